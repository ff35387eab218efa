"""tempomem.config: the memory config block and its validation (CFG-01..CFG-28, AMB-41, AMB-42): valid
configs, single-rule violations, fragments and multiple violations, warnings.
"""

from __future__ import annotations

from typing import Any

import pytest

from tempomem.config import (
    ConfigError,
    TempomemConfig,
    config_warnings,
    load_config_data,
    validate_config_data,
)
from tempomem.storage.limits import (
    CAPTURE_FOCUS_MAX_BYTES,
)
from tests.helpers.config_examples import (
    BUJO_CAPTURE,
    EMB,
    FOCUS_ONLY,
    FRAGMENT_APPEND,
    FRAGMENT_BUJO_CAPTURE,
    FRAGMENT_INTENT,
    FRAGMENT_INTENT_BUILT,
    FRAGMENT_PROFILE,
    FRAGMENT_RECALL_TOOL,
    LLM,
    RECALL_TOOL_BUJO,
    bujo,
    mem,
    merged,
    paths,
)

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
