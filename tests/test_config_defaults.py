"""tempomem.config: defaults (CFG-14, CFG-21..CFG-25, AMB-04, AMB-05, AMB-41), names and the camelCase round
trip, config files (AMB-46), and keys that would do nothing.
"""

from __future__ import annotations

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
    EMBEDDING_DIM_DEFAULT,
    LLM_TIMEOUT_MS_DEFAULT,
    MAX_BYTES_DEFAULT,
    OLLAMA_ENDPOINT_DEFAULT,
)
from tests.helpers.config_examples import (
    BUJO_CAPTURE,
    FOCUS_ONLY,
    FRAGMENT_APPEND,
    FRAGMENT_BUJO_CAPTURE,
    FRAGMENT_INTENT_BUILT,
    LLM,
    bujo,
    mem,
    merged,
)

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
