"""tempomem.config: the memory config block and its validation (CFG-01..CFG-28, AMB-04/05/41/42/46)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tempomem.config import (
    CaptureConfig,
    ConfigError,
    ConfigViolation,
    EmbeddingsConfig,
    LlmConfig,
    MemoryConfig,
    TempomemConfig,
    config_warnings,
    default_config,
    load_config_data,
    load_config_file,
    validate_config_data,
)
from tempomem.storage.limits import (
    CAPTURE_FOCUS_MAX_BYTES,
    EMBEDDING_DIM_DEFAULT,
    LLM_TIMEOUT_MS_DEFAULT,
    MAX_BYTES_DEFAULT,
    OLLAMA_ENDPOINT_DEFAULT,
)

# --- the reference page's examples, verbatim ---

BUJO_CAPTURE = {
    "memory": {
        "mode": "bujo",
        "writeMode": "capture",
        "path": "./.mono-agent/memory",
        "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
        "llm": {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"},
    }
}

FOCUS_ONLY = {
    "memory": {
        "mode": "bujo",
        "writeMode": "capture",
        "path": "./.mono-agent/memory",
        "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
        "llm": {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"},
        "capture": {
            "focus": "Keep durable coding preferences and lessons; skip PR and CI status.",
            "only": ["preference", "lesson"],
        },
    }
}

# The MemoryRecall example: a BuJo block without memory.llm, so it needs the tier's llm block (CFG-06).
RECALL_TOOL_BUJO = {
    "memory": {
        "mode": "bujo",
        "path": "./.mono-agent/memory",
        "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
        "recallTool": {"enabled": True},
    }
}

FRAGMENT_APPEND = {"memory": {"writeMode": "append-host-summary"}}
FRAGMENT_BUJO_CAPTURE = {"memory": {"mode": "bujo", "writeMode": "capture"}}
FRAGMENT_RECALL_TOOL = {"memory": {"recallTool": {"enabled": True}}}
FRAGMENT_PROFILE = {"memory": {"profile": {"enabled": True}}}
FRAGMENT_INTENT = {
    "memory": {"capture": {"intentLifecycle": True}, "recall": {"intentExpiry": True, "recency": True}}
}
# What BuJo accepts today: all three intent switches (the profile is accepted too, CFG-25).
FRAGMENT_INTENT_BUILT = FRAGMENT_INTENT

LLM = {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"}
EMB = {"provider": "ollama"}


def merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``fragment`` into a copy of ``base`` ("add this block to an otherwise valid config")."""
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def mem(**memory: Any) -> dict[str, Any]:
    return {"memory": memory}


def bujo(**extra: Any) -> dict[str, Any]:
    return mem(mode="bujo", writeMode="capture", embeddings=EMB, llm=LLM, **extra)


def paths(data: object) -> list[str]:
    return [v.path for v in validate_config_data(data)]


# --- valid configs ---


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(BUJO_CAPTURE, id="ref-bujo-capture"),
        pytest.param(FOCUS_ONLY, id="ref-focus-only-CFG-18-CFG-19"),
        pytest.param(
            merged(RECALL_TOOL_BUJO, {"memory": {"llm": LLM}}), id="ref-recall-tool-plus-llm-CFG-06"
        ),
        pytest.param(FRAGMENT_APPEND, id="fragment-append-AMB-41"),
        pytest.param(FRAGMENT_RECALL_TOOL, id="fragment-recall-tool-CFG-28"),
        pytest.param(merged(BUJO_CAPTURE, FRAGMENT_INTENT_BUILT), id="intent-flags-on-bujo-CFG-21"),
        # INTENT-30: intentExpiry without intentLifecycle; INTENT-02: each switch on its own
        pytest.param(merged(BUJO_CAPTURE, {"memory": {"recall": {"intentExpiry": True}}}), id="expiry-alone"),
        pytest.param(merged(BUJO_CAPTURE, {"memory": {"recall": {"recency": True}}}), id="recency-alone"),
        pytest.param(mem(mode="journal", embeddings={"dim": 512}), id="dim-only-block-CFG-07"),
        pytest.param(mem(mode="journal", embeddings={"provider": "local"}), id="journal-local"),
        pytest.param(mem(mode="lite", embeddings={"provider": "ollama"}), id="lite-with-embeddings-allowed"),
        pytest.param(
            mem(mode="lite", capture={}, recall={}, profile={"enabled": False}), id="lite-flags-off"
        ),
        pytest.param(bujo(capture={"only": []}), id="only-empty-CFG-19"),
        pytest.param(bujo(capture={"cron": False, "webhook": True}), id="cron-webhook-CFG-17"),
        pytest.param(bujo(capture={"reconcileModel": "openai-codex:gpt-6-sol"}), id="reconcile-model-CFG-15"),
        pytest.param(
            bujo(capture={"focus": "é" * (CAPTURE_FOCUS_MAX_BYTES // 2)}), id="focus-at-limit-CFG-18"
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={"provider": "ollama", "model": "llama3.2"}),
            id="ollama-llm-CFG-11",
        ),
        pytest.param(
            mem(mode="journal", embeddings={"provider": "openai", "model": "text-embedding-3-small"}),
            id="openai-with-model-AMB-05",
        ),
        pytest.param(
            merged(BUJO_CAPTURE, {"temporal": {"address": "tm.example:7233", "tls": True, "apiKey": "k"}}),
            id="temporal-block",
        ),
        pytest.param(mem(recallTool={"enabled": False}, rememberTool={"enabled": False}), id="tools-off"),
    ],
)
def test_valid_configs(data: dict[str, Any]) -> None:
    assert validate_config_data(data) == []
    assert isinstance(load_config_data(data), TempomemConfig)


# --- single-rule violations ---


@pytest.mark.parametrize(
    ("data", "path"),
    [
        pytest.param({}, "memory", id="memory-required"),
        pytest.param({"memory": None}, "memory", id="memory-null"),
        pytest.param(mem(mode="tiny"), "memory.mode", id="CFG-02-bad-mode"),
        pytest.param(mem(writeMode="always"), "memory.writeMode", id="CFG-03-bad-write-mode"),
        pytest.param(
            mem(mode="journal", writeMode="capture", embeddings=EMB), "memory.writeMode", id="CFG-05-journal"
        ),
        pytest.param(mem(writeMode="capture"), "memory.writeMode", id="CFG-05-lite"),
        pytest.param(mem(mode="bujo", embeddings=EMB), "memory.llm", id="CFG-06-bujo-needs-llm"),
        pytest.param(mem(mode="journal"), "memory.embeddings", id="CFG-07-journal-missing"),
        pytest.param(mem(mode="journal", embeddings={}), "memory.embeddings", id="CFG-07-journal-empty"),
        pytest.param(mem(mode="journal", embeddings={"model": None}), "memory.embeddings", id="CFG-07-null"),
        pytest.param(mem(mode="bujo", llm=LLM, embeddings={}), "memory.embeddings", id="CFG-07-bujo-empty"),
        pytest.param(
            mem(mode="journal", embeddings={"provider": "cohere"}), "memory.embeddings.provider", id="CFG-08"
        ),
        pytest.param(
            mem(mode="journal", embeddings={"provider": "openai"}), "memory.embeddings.model", id="AMB-05"
        ),
        pytest.param(
            mem(mode="journal", embeddings={"provider": "local", "dim": 768}),
            "memory.embeddings.dim",
            id="local-dim-fixed",
        ),
        pytest.param(
            mem(mode="journal", embeddings={"provider": "local", "model": "nomic-embed-text:v1.5"}),
            "memory.embeddings.model",
            id="local-model-fixed",
        ),
        pytest.param(
            mem(mode="journal", embeddings={"provider": "local", "endpoint": "http://x"}),
            "memory.embeddings.endpoint",
            id="local-no-endpoint",
        ),
        pytest.param(
            mem(mode="journal", embeddings={"dim": 0}), "memory.embeddings.dim", id="CFG-10-dim-positive"
        ),
        pytest.param(
            mem(mode="journal", embeddings={"dim": "768"}), "memory.embeddings.dim", id="CFG-10-strict"
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={"provider": "anthropic", "model": "x"}),
            "memory.llm.provider",
            id="CFG-11-bad-llm-provider",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={"provider": "agent-host"}), "memory.llm.model", id="CFG-12"
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={"provider": "agent-host", "model": "gpt-5"}),
            "memory.llm.model",
            id="AMB-46-model-ref-grammar",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={"provider": "agent-host", "model": "OpenAI:gpt"}),
            "memory.llm.model",
            id="AMB-46-provider-lowercase",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={"provider": "openai-compatible", "model": "m"}),
            "memory.llm.endpoint",
            id="openai-compatible-needs-endpoint",
        ),
        pytest.param(
            mem(
                mode="bujo", embeddings=EMB, llm={"provider": "ollama", "model": "m", "endpoint": "localhost"}
            ),
            "memory.llm.endpoint",
            id="CFG-13-endpoint-url",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={**LLM, "timeoutMs": 0}),
            "memory.llm.timeoutMs",
            id="CFG-14-zero",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={**LLM, "timeoutMs": "60000"}),
            "memory.llm.timeoutMs",
            id="CFG-14-strict",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm={**LLM, "timeoutMs": 1.5}),
            "memory.llm.timeoutMs",
            id="CFG-14-float",
        ),
        pytest.param(
            bujo(capture={"reconcileModel": "gpt-6-sol"}), "memory.capture.reconcileModel", id="CFG-15-ref"
        ),
        pytest.param(
            bujo(capture={"reconcileEffort": "high"}),
            "memory.capture.reconcileEffort",
            id="CFG-16-effort-key",
        ),
        pytest.param(bujo(capture={"cron": "false"}), "memory.capture.cron", id="CFG-17-cron-bool"),
        pytest.param(bujo(capture={"webhook": 0}), "memory.capture.webhook", id="CFG-17-webhook-bool"),
        pytest.param(
            bujo(capture={"focus": "x" * (CAPTURE_FOCUS_MAX_BYTES + 1)}),
            "memory.capture.focus",
            id="CFG-18-ascii",
        ),
        pytest.param(
            bujo(capture={"focus": "é" * (CAPTURE_FOCUS_MAX_BYTES // 2 + 1)}),
            "memory.capture.focus",
            id="CFG-18-utf8-bytes-not-chars",
        ),
        pytest.param(bujo(capture={"only": ["fact", "task"]}), "memory.capture.only[1]", id="CFG-19-kind"),
        pytest.param(bujo(capture={"only": ["fact", "fact"]}), "memory.capture.only", id="CFG-19-duplicate"),
        pytest.param(bujo(capture={"only": "fact"}), "memory.capture.only", id="CFG-19-not-a-list"),
        pytest.param(
            mem(
                mode="bujo", writeMode="append-host-summary", embeddings=EMB, llm=LLM, capture={"focus": "x"}
            ),
            "memory.capture.focus",
            id="CFG-20-focus-needs-capture",
        ),
        pytest.param(
            mem(mode="journal", embeddings=EMB, capture={"only": []}),
            "memory.capture.only",
            id="CFG-20-only-on-journal",
        ),
        pytest.param(mem(capture={"cron": True}), "memory.capture.cron", id="CFG-20-cron-on-lite"),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm=LLM, capture={"webhook": False}),
            "memory.capture.webhook",
            id="CFG-20-webhook-disabled-write",
        ),
        pytest.param(
            mem(mode="bujo", embeddings=EMB, llm=LLM, capture={"reconcileModel": "openai-codex:gpt-6-sol"}),
            "memory.capture.reconcileModel",
            id="AMB-42-reconcile-model-needs-capture",
        ),
        pytest.param(
            mem(mode="journal", embeddings=EMB, capture={"intentLifecycle": True}),
            "memory.capture.intentLifecycle",
            id="CFG-21-AMB-42-intent-lifecycle",
        ),
        pytest.param(
            mem(mode="journal", embeddings=EMB, recall={"intentExpiry": True}),
            "memory.recall.intentExpiry",
            id="CFG-21-AMB-42-intent-expiry",
        ),
        pytest.param(mem(recall={"recency": True}), "memory.recall.recency", id="CFG-21-AMB-42-recency"),
        pytest.param(FRAGMENT_PROFILE, "memory.profile.enabled", id="CFG-25-profile-lite"),
        pytest.param(
            mem(mode="journal", embeddings=EMB, profile={"enabled": True}),
            "memory.profile.enabled",
            id="CFG-25-profile-journal",
        ),
        pytest.param(mem(recallTool={"enabled": "no"}), "memory.recallTool.enabled", id="CFG-22-bool"),
        pytest.param(
            mem(rememberTool={}, recallTool={"on": True}), "memory.recallTool.on", id="CFG-22-extra"
        ),
        pytest.param(mem(maxBytes=0), "memory.maxBytes", id="CFG-26-AMB-04-positive"),
        pytest.param(mem(maxBytes=True), "memory.maxBytes", id="CFG-26-strict-no-bool"),
        pytest.param(mem(path=""), "memory.path", id="CFG-04-path-empty"),
        pytest.param(mem(path=7), "memory.path", id="CFG-04-path-type"),
        pytest.param(mem(mcp={"enabled": True}), "memory.mcp", id="CFG-01-no-separate-mcp-key"),
        pytest.param(mem(write_mode="capture"), "memory.write_mode", id="data-needs-camelCase"),
        pytest.param({"memory": {}, "extra": 1}, "extra", id="top-level-extra"),
        pytest.param({"memory": {}, "temporal": {"tls": "true"}}, "temporal.tls", id="temporal-strict"),
        pytest.param({"memory": {}, "temporal": {"uiUrl": "localhost:8233"}}, "temporal.uiUrl", id="ui-url"),
    ],
)
def test_single_violation(data: dict[str, Any], path: str) -> None:
    violations = validate_config_data(data)
    assert [v.path for v in violations] == [path], violations
    assert all(v.message for v in violations)
    with pytest.raises(ConfigError) as info:
        load_config_data(data)
    assert info.value.violations == violations


def test_CFG_16_unknown_capture_key_is_not_silently_dropped() -> None:
    (violation,) = validate_config_data(bujo(capture={"reconcileEffort": "high"}))
    assert violation.message.startswith("unknown key")


def test_CFG_03_pydantic_enum_message_is_kept() -> None:
    assert [str(v) for v in validate_config_data(mem(writeMode="always"))] == [
        "memory.writeMode: Input should be 'disabled', 'append-host-summary' or 'capture'"
    ]


@pytest.mark.parametrize("data", [[], "memory", 3, None], ids=["list", "str", "int", "none"])
def test_top_level_must_be_an_object(data: object) -> None:
    violations = validate_config_data(data)
    assert [v.path for v in violations] == [""]


# --- fragments and multiple violations (AMB-41, CFG-28) ---


def test_AMB_41_bujo_capture_fragment_needs_llm_and_embeddings() -> None:
    assert paths(FRAGMENT_BUJO_CAPTURE) == ["memory.llm", "memory.embeddings"]
    with pytest.raises(ConfigError) as info:
        load_config_data(FRAGMENT_BUJO_CAPTURE)
    text = str(info.value)
    assert text.splitlines() == [f"{v.path}: {v.message}" for v in info.value.violations]
    assert "memory.llm:" in text and "memory.embeddings:" in text


def test_CFG_06_reference_recall_tool_example_needs_llm() -> None:
    assert paths(RECALL_TOOL_BUJO) == ["memory.llm"]


def test_CFG_28_profile_and_intent_fragments_alone_are_invalid() -> None:
    assert paths(FRAGMENT_PROFILE) == ["memory.profile.enabled"]
    assert sorted(paths(FRAGMENT_INTENT)) == [
        "memory.capture.intentLifecycle",
        "memory.recall.intentExpiry",
        "memory.recall.recency",
    ]


def test_all_cross_field_violations_reported_at_once() -> None:
    data = mem(
        mode="lite",
        writeMode="capture",
        capture={"focus": "f", "only": ["fact"], "cron": False, "webhook": False, "reconcileModel": "a:b"},
        recall={"intentExpiry": True, "recency": True},
        profile={"enabled": True},
    )
    assert sorted(paths(data)) == sorted(
        [
            "memory.writeMode",
            "memory.capture.focus",
            "memory.capture.only",
            "memory.capture.cron",
            "memory.capture.webhook",
            "memory.capture.reconcileModel",
            "memory.recall.intentExpiry",
            "memory.recall.recency",
            "memory.profile.enabled",
        ]
    )


def test_type_errors_and_rule_violations_reported_together() -> None:
    data = {
        "memory": {
            "mode": "bujo",
            "writeMode": "capture",
            "embeddings": {"provider": "openai"},
            "capture": {"reconcileEffort": "low", "focus": "x" * (CAPTURE_FOCUS_MAX_BYTES + 1)},
            "maxBytes": "2560",
        },
        "temporal": {"tls": 1},
    }
    assert sorted(paths(data)) == sorted(
        [
            "memory.capture.reconcileEffort",
            "memory.capture.focus",
            "memory.maxBytes",
            "temporal.tls",
            "memory.embeddings.model",  # AMB-05 rule, found although other keys are broken
            "memory.llm",  # CFG-06 rule, likewise
        ]
    )


def test_no_guessing_about_the_tier_when_mode_is_broken() -> None:
    # With an invalid mode, "capture requires bujo" and "focus requires capture" would be guesses.
    assert paths(mem(mode="BuJo", writeMode="capture", capture={"focus": "x"})) == ["memory.mode"]


def test_broken_block_does_not_also_count_as_missing() -> None:
    # llm is present but broken: report the broken key, not "bujo requires llm" (CFG-06).
    data = mem(mode="bujo", embeddings={"dim": "512"}, llm={"provider": "agent-host"})
    assert sorted(paths(data)) == ["memory.embeddings.dim", "memory.llm.model"]


def test_rules_when_only_temporal_is_broken() -> None:
    data = {"memory": {"mode": "journal"}, "temporal": {"namespace": 5}}
    assert sorted(paths(data)) == ["memory.embeddings", "temporal.namespace"]


# --- warnings (AMB-42) ---


def test_AMB_42_intent_lifecycle_without_capture_is_a_warning_not_an_error() -> None:
    data = mem(
        mode="bujo",
        writeMode="append-host-summary",
        embeddings=EMB,
        llm=LLM,
        capture={"intentLifecycle": True},
    )
    cfg = load_config_data(data)
    assert [w.path for w in config_warnings(cfg)] == ["memory.capture.intentLifecycle"]


def test_no_warnings_for_the_reference_configs() -> None:
    for data in (BUJO_CAPTURE, FOCUS_ONLY, merged(BUJO_CAPTURE, FRAGMENT_INTENT_BUILT)):
        assert config_warnings(load_config_data(data)) == []


def test_ignored_blocks_are_warned_about() -> None:
    cfg = load_config_data(mem(mode="lite", embeddings=EMB, llm=LLM))
    assert [w.path for w in config_warnings(cfg)] == ["memory.embeddings", "memory.llm"]


# --- defaults ---


def test_AMB_41_fragment_defaults() -> None:
    m = load_config_data(FRAGMENT_APPEND).memory
    assert (m.mode, m.write_mode) == ("lite", "append-host-summary")
    assert m.path == "./.tempomem/memory"  # ours; the reference's is ./.mono-agent/memory
    assert load_config_data({"memory": {}}).memory.write_mode == "disabled"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"memory": {}}, id="lite"),
        pytest.param(mem(mode="journal", embeddings={"dim": 384}), id="journal"),
        pytest.param(BUJO_CAPTURE, id="bujo"),
    ],
)
def test_CFG_22_CFG_24_tools_default_on_for_every_tier(data: dict[str, Any]) -> None:
    m = load_config_data(data).memory
    assert m.recall_tool.enabled is True
    assert m.remember_tool.enabled is True


def test_CFG_22_recall_tool_off_only_when_explicitly_false() -> None:
    assert load_config_data(mem(recallTool={})).memory.recall_tool.enabled is True
    assert load_config_data(mem(recallTool={"enabled": False})).memory.recall_tool.enabled is False


def test_CFG_23_programmatic_composition_gets_the_same_defaults() -> None:
    m = MemoryConfig(mode="lite", write_mode="append-host-summary")
    assert m.recall_tool.enabled is True and m.remember_tool.enabled is True
    assert TempomemConfig(memory=m).temporal.address == "localhost:7233"


def test_CFG_23_programmatic_composition_is_validated_too() -> None:
    with pytest.raises(ValidationError, match="CFG-05"):
        MemoryConfig(write_mode="capture")
    with pytest.raises(ValidationError):
        MemoryConfig(mode="journal", embeddings=EmbeddingsConfig(), llm=None)


def test_memory_defaults_CFG_14_CFG_21_CFG_25_AMB_04() -> None:
    m = load_config_data(BUJO_CAPTURE).memory
    assert m.llm is not None and m.llm.timeout_ms == LLM_TIMEOUT_MS_DEFAULT == 60000
    assert m.max_bytes == MAX_BYTES_DEFAULT == 2560
    assert m.capture is None and m.recall is None and m.profile is None
    c = load_config_data(bujo(capture={})).memory.capture
    assert c is not None
    assert (c.intent_lifecycle, c.cron, c.webhook, c.only, c.focus, c.reconcile_model) == (
        False,
        None,
        None,
        None,
        None,
        None,
    )
    r = load_config_data(bujo(recall={}, profile={})).memory
    assert r.recall is not None and (r.recall.intent_expiry, r.recall.recency) == (False, False)
    assert r.profile is not None and r.profile.enabled is False


@pytest.mark.parametrize(
    ("block", "model", "dim", "endpoint"),
    [
        pytest.param({}, "nomic-embed-text:v1.5", 768, "http://localhost:11434", id="CFG-08-default-ollama"),
        pytest.param(
            {"dim": 512}, "nomic-embed-text:v1.5", 512, OLLAMA_ENDPOINT_DEFAULT, id="CFG-10-dim-override"
        ),
        pytest.param(
            {"provider": "lmstudio"},
            "text-embedding-nomic-embed-text-v1.5",
            EMBEDDING_DIM_DEFAULT,
            "http://localhost:1234",
            id="CFG-09-lmstudio",
        ),
        pytest.param(
            {"provider": "openai", "model": "text-embedding-3-small"},
            "text-embedding-3-small",
            768,
            "https://api.openai.com",
            id="AMB-05-openai",
        ),
        pytest.param({"provider": "local"}, "all-MiniLM-L6-v2-int8", 384, None, id="local-minilm"),
        pytest.param(
            {"provider": "ollama", "model": "mxbai-embed-large", "dim": 1024, "endpoint": "http://gpu:11434"},
            "mxbai-embed-large",
            1024,
            "http://gpu:11434",
            id="explicit",
        ),
    ],
)
def test_embedding_effective_values(
    block: dict[str, Any], model: str, dim: int, endpoint: str | None
) -> None:
    emb = EmbeddingsConfig.model_validate(block)
    assert (emb.effective_model, emb.effective_dim, emb.effective_endpoint) == (model, dim, endpoint)
    if block:
        cfg = load_config_data(mem(mode="journal", embeddings=block))
        assert cfg.memory.embeddings == emb


def test_AMB_05_openai_effective_model_without_model_raises() -> None:
    with pytest.raises(ValueError, match="AMB-05"):
        _ = EmbeddingsConfig(provider="openai").effective_model


@pytest.mark.parametrize(
    ("llm", "endpoint"),
    [
        pytest.param(
            {"provider": "ollama", "model": "llama3.2"}, OLLAMA_ENDPOINT_DEFAULT, id="CFG-13-LIM-55"
        ),
        pytest.param(LLM, None, id="agent-host-registry"),
        pytest.param({**LLM, "endpoint": "http://h:8080"}, "http://h:8080", id="explicit"),
    ],
)
def test_llm_effective_endpoint(llm: dict[str, Any], endpoint: str | None) -> None:
    assert LlmConfig.model_validate(llm).effective_endpoint == endpoint


def test_temporal_defaults() -> None:
    t = load_config_data({"memory": {}}).temporal
    assert (t.address, t.namespace, t.task_queue, t.api_key, t.tls, t.ui_url) == (
        "localhost:7233",
        "default",
        None,
        None,
        False,
        "http://localhost:8233",
    )


def test_default_config_is_the_demo_journal() -> None:
    cfg = default_config()
    m = cfg.memory
    assert (m.mode, m.write_mode, m.path) == ("journal", "append-host-summary", "./.tempomem/memory")
    assert m.embeddings is not None and m.embeddings.provider == "local"
    assert validate_config_data(cfg.model_dump(by_alias=True)) == []
    assert config_warnings(cfg) == []
    assert default_config() is not cfg  # a fresh object per call


# --- names and round trip ---


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            merged(FOCUS_ONLY, FRAGMENT_INTENT_BUILT | {"memory": {"profile": {"enabled": False}}}), id="bujo"
        ),
        pytest.param(mem(mode="journal", embeddings={"dim": 512}), id="journal"),
        pytest.param({"memory": {}}, id="lite"),
    ],
)
def test_camel_case_round_trip(data: dict[str, Any]) -> None:
    cfg = load_config_data(data)
    dumped = cfg.model_dump(by_alias=True)
    assert "writeMode" in dumped["memory"] and "recallTool" in dumped["memory"]
    assert "taskQueue" in dumped["temporal"] and "uiUrl" in dumped["temporal"]
    assert "write_mode" not in dumped["memory"]
    assert load_config_data(dumped) == cfg
    assert load_config_data(json.loads(json.dumps(dumped))) == cfg


def test_python_code_may_use_snake_case_names() -> None:
    c = CaptureConfig(reconcile_model="openai-codex:gpt-6-sol", intent_lifecycle=True)
    assert c.model_dump(by_alias=True)["reconcileModel"] == "openai-codex:gpt-6-sol"
    assert CaptureConfig(reconcileModel="a:b").reconcile_model == "a:b"


def test_violation_model_and_error_text() -> None:
    err = ConfigError(
        [ConfigViolation(path="memory.llm", message="m1"), ConfigViolation(path="", message="m2")]
    )
    assert err.violations[0].path == "memory.llm"
    assert str(err).splitlines() == ["memory.llm: m1", "<config>: m2"]


# --- files ---


def test_load_config_file_valid(tmp_path: Path) -> None:
    f = tmp_path / "tempomem.json"
    f.write_text(json.dumps(FOCUS_ONLY), encoding="utf-8")
    cfg = load_config_file(f)
    assert cfg.memory.capture is not None and cfg.memory.capture.only == ["preference", "lesson"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param('{"memory": {', "not valid JSON", id="truncated"),
        pytest.param("", "not valid JSON", id="empty-file"),
        pytest.param('{"memory": {"maxBytes": NaN}}', "not valid JSON", id="nan"),
        pytest.param("{'memory': {}}", "not valid JSON", id="single-quotes"),
    ],
)
def test_load_config_file_invalid_json(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config_file(f)
    (violation,) = info.value.violations
    assert violation.path == ""
    assert needle in violation.message and str(f) in violation.message


def test_load_config_file_missing(tmp_path: Path) -> None:
    f = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_config_file(f)
    (violation,) = info.value.violations
    assert violation.path == "" and "cannot read" in violation.message and str(f) in violation.message


def test_load_config_file_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.json"
    f.write_bytes(b'{"memory": {"path": "\xe9"}}')
    with pytest.raises(ConfigError) as info:
        load_config_file(f)
    assert [v.path for v in info.value.violations] == [""]


def test_load_config_file_duplicate_keys(tmp_path: Path) -> None:
    f = tmp_path / "dup.json"
    f.write_text('{"memory": {"mode": "lite", "mode": "bujo", "capture": {"cron": true, "cron": false}}}')
    with pytest.raises(ConfigError) as info:
        load_config_file(f)
    dupes = [v for v in info.value.violations if "duplicate" in v.message]
    assert sorted(v.path for v in dupes) == ["memory.capture.cron", "memory.mode"]


def test_load_config_file_reports_all_violations(tmp_path: Path) -> None:
    f = tmp_path / "frag.json"
    f.write_text(json.dumps(FRAGMENT_BUJO_CAPTURE))
    with pytest.raises(ConfigError) as info:
        load_config_file(f)
    assert [v.path for v in info.value.violations] == ["memory.llm", "memory.embeddings"]


def test_local_e5_provider_is_embedded_with_fixed_model_and_dim() -> None:
    ok = {
        "memory": {
            "mode": "journal",
            "writeMode": "append-host-summary",
            "embeddings": {"provider": "local-e5"},
        }
    }
    cfg = load_config_data(ok)
    assert (cfg.memory.embeddings.effective_model, cfg.memory.embeddings.effective_dim) == (
        "multilingual-e5-small-q4",
        384,
    )
    bad = {
        "memory": {**ok["memory"], "embeddings": {"provider": "local-e5", "dim": 768, "endpoint": "http://x"}}
    }
    paths = {v.path for v in validate_config_data(bad)}
    assert paths == {"memory.embeddings.dim", "memory.embeddings.endpoint"}


@pytest.mark.parametrize(
    ("data", "key"),
    [
        pytest.param(merged(BUJO_CAPTURE, {"memory": {"maxBytes": 4096}}), "memory.maxBytes", id="maxBytes"),
    ],
)
def test_keys_that_would_do_nothing_are_refused_by_name(data: dict[str, Any], key: str) -> None:
    """#12: a key the schema accepts but nothing implements is refused, never silently ignored."""
    [violation] = validate_config_data(data)
    assert violation.path == key
    assert "not supported" in violation.message or "at most 2560" in violation.message


@pytest.mark.parametrize("tier", ["lite", "journal"])
def test_write_mode_is_independent_of_the_tiers_recall(tier: str, tmp_path: Path) -> None:
    """WM-01: ``memory.writeMode`` decides how turns are persisted, never what the tier recalls. One
    store written under the default write mode is read under ``disabled``: the same hits, in the same
    order, for the tier's recall."""
    from tempomem.store import MemoryStore
    from tests.conftest import make_config

    writer = MemoryStore(make_config(tmp_path / "mem", mode=tier))
    for text in ("The user's kayak is blue.", "The user's canoe is red.", "Ana sails on Sundays."):
        assert writer.remember(text, conversation_id="web:c").status == "written"
    reader = MemoryStore(make_config(tmp_path / "mem", mode=tier, writeMode="disabled"))
    assert (writer.config.memory.mode, reader.config.memory.mode) == (tier, tier)
    for query in ("kayak colour", "who sails", "red boat"):
        want = [(h.id, h.text) for h in writer.search(query)]
        assert want and [(h.id, h.text) for h in reader.search(query)] == want
