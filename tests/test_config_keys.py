"""Every config key either works or is refused (#12 item 6).

``EFFECT`` names, for every key the schema accepts, the test that proves what it does (each of those fails
when the key stops working); ``REFUSED`` lists the values the schema accepts but validation refuses by
name because nothing implements them yet. The walk fails when the schema gains a key that is in neither.
"""

from __future__ import annotations

import ast
import json
import typing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from tempomem import MemoryStore
from tempomem.capture.model_client import LlmTimeout, chat_model_for
from tempomem.capture.settings import CaptureSettings
from tempomem.config import TempomemConfig, load_config, load_config_data
from tempomem.connect import connect_options
from tests.scripted_model import Delay, ScriptedModelServer

TESTS = Path(__file__).resolve().parent

REGISTRY = "test_host_model.py::test_reconcile_classifier_takes_registry_endpoint_model_and_key"
KEY_ENV_UNSET = "test_host_model.py::test_an_api_key_env_that_is_unset_is_named_and_never_echoed"
ENVCONFIG = "test_public_api.py::test_connect_options_follow_envconfig_unless_the_file_says_otherwise"
INTENT_EXPIRY = "test_auto_block.py::test_AUTO29_intent_expiry_excludes_dated_and_done_notes"
PROFILE = "test_owner_profile.py::test_PROFILE01_PROFILE10_a_real_store_injects_it_only_when_enabled"
RECENCY = "test_recency.py::test_INTENT32_a_real_bujo_store_orders_by_recency_only_when_configured"
CODEC_HISTORY = "test_codec.py::test_history_is_encrypted_yet_the_codec_client_reads_the_result"
CLASSIFIER_INHERITS = "test_host_model.py::test_classifier_inherits_an_agent_host_capture_endpoint"
RELATIVE_PATH = "test_public_api.py::test_relative_store_path_resolves_against_the_config_file"

EFFECT: dict[str, str] = {
    "memory": "test_cli.py::test_validate_lists_every_violation_with_its_key_path",
    "memory.mode": "test_capture_flow.py::test_lite_turn_is_projected_indexed_and_resolved",
    "memory.writeMode": "test_admission.py::test_wm_skip_rules",
    "memory.path": RELATIVE_PATH,
    "memory.embeddings": "test_recall_index.py::test_changed_identity_reembeds_everything",
    "memory.embeddings.provider": "test_recall_index.py::test_changed_identity_reembeds_everything",
    "memory.embeddings.model": "test_embedding.py::test_ollama_embedder",
    "memory.embeddings.dim": "test_recall_index.py::test_changed_identity_reembeds_everything",
    "memory.embeddings.endpoint": "test_embedding.py::test_ollama_embedder",
    "memory.llm": "test_capture_pipeline.py::test_capture_extracts_reviews_and_commits",
    "memory.llm.provider": REGISTRY,
    "memory.llm.model": REGISTRY,
    "memory.llm.endpoint": REGISTRY,
    "memory.llm.timeoutMs": "test_config_keys.py::test_llm_timeout_bounds_each_model_call",
    "memory.llm.apiKey": KEY_ENV_UNSET,
    "memory.llm.concurrency": "test_parallel_capture.py::test_model_stages_overlap_up_to_the_store_limit",
    "memory.llm.apiKeyEnv": REGISTRY,
    "memory.capture": "test_capture_pipeline.py::test_capture_only_and_task_lines",
    "memory.capture.reconcileModel": CLASSIFIER_INHERITS,
    "memory.capture.cron": "test_admission.py::test_wm_skip_rules",
    "memory.capture.webhook": "test_admission.py::test_wm_skip_rules",
    "memory.capture.focus": "test_prompts.py::test_extraction_user_message_sections",
    "memory.capture.only": "test_capture_pipeline.py::test_capture_only_and_task_lines",
    "memory.capture.intentLifecycle": "test_contracts.py::test_intent_fields_only_with_flag",
    "memory.capture.turnArchiveDays": "test_recurate.py::test_turn_archive_days_bounds_and_default",
    "memory.recall": INTENT_EXPIRY,
    "memory.recall.intentExpiry": INTENT_EXPIRY,
    "memory.recall.recency": RECENCY,
    "memory.profile": PROFILE,
    "memory.profile.enabled": PROFILE,
    "memory.recallTool": "test_mcp.py::test_recall_tool_disabled_removes_both_read_tools",
    "memory.recallTool.enabled": "test_mcp.py::test_recall_tool_disabled_removes_both_read_tools",
    "memory.rememberTool": "test_mcp.py::test_remember_tool_disabled_removes_remember",
    "memory.rememberTool.enabled": "test_mcp.py::test_remember_tool_disabled_removes_remember",
    "memory.maxBytes": "test_config_keys.py::test_max_bytes_bounds_the_automatic_context",
    "temporal": ENVCONFIG,
    "temporal.address": "test_cli_surface.py::test_an_unreachable_cluster_is_one_line",
    "temporal.namespace": "test_cli_surface.py::test_an_unknown_namespace_is_one_line",
    "temporal.taskQueue": CODEC_HISTORY,
    "temporal.apiKey": "test_config_keys.py::test_inline_api_key_server_name_and_profile",
    "temporal.apiKeyEnv": "test_public_api.py::test_mtls_files_and_api_key_env_from_the_config_file",
    "temporal.tls": ENVCONFIG,
    "temporal.tls.serverName": "test_config_keys.py::test_inline_api_key_server_name_and_profile",
    "temporal.tls.serverCaCert": "test_public_api.py::test_mtls_files_and_api_key_env_from_the_config_file",
    "temporal.tls.clientCert": "test_public_api.py::test_mtls_files_and_api_key_env_from_the_config_file",
    "temporal.tls.clientKey": "test_public_api.py::test_mtls_files_and_api_key_env_from_the_config_file",
    "temporal.profile": "test_config_keys.py::test_inline_api_key_server_name_and_profile",
    "temporal.uiUrl": "test_cli.py::test_demo_search_rebuild_and_inspect",
    "temporal.codecKeyFile": "test_codec.py::test_codec_from_config",
    "temporal.codecKeyEnv": "test_codec.py::test_codec_from_config",
    "temporal.codecKeyId": "test_codec.py::test_codec_from_config",
    "agentHost": REGISTRY,
    "agentHost.providers": REGISTRY,
    "agentHost.providers.*.endpoint": REGISTRY,
    "agentHost.providers.*.apiKey": "test_config_keys.py::test_registry_inline_key_is_sent",
    "agentHost.providers.*.apiKeyEnv": REGISTRY,
}

# Values the schema accepts that validation refuses, by key (test_config.py proves each refusal).
REFUSED: dict[str, object] = {}  # none today: every key the schema accepts is built


def schema_keys(model: type[BaseModel] = TempomemConfig, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else (field.alias or name)
        keys.add(path)
        annotation = field.annotation
        if typing.get_origin(annotation) is dict:
            for arg in typing.get_args(annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    keys |= schema_keys(arg, f"{path}.*")
            continue
        members = typing.get_args(annotation) or (annotation,)
        for arg in members:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                keys |= schema_keys(arg, path)
    return keys


def test_every_key_has_a_proven_effect_or_is_refused() -> None:
    keys = schema_keys()
    assert len(keys) > 40  # the walk reaches nested blocks
    unaccounted = keys - set(EFFECT) - set(REFUSED)
    assert unaccounted == set(), f"document the effect (a test) or refuse these keys: {sorted(unaccounted)}"
    assert set(EFFECT) - keys == set()  # no stale names


def test_every_named_test_exists() -> None:
    functions: dict[str, set[str]] = {}
    for node in sorted(set(EFFECT.values())):
        file, name = node.split("::")
        if file not in functions:
            tree = ast.parse((TESTS / file).read_text())
            functions[file] = {
                n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
        assert name in functions[file], node


# -- effects not proven elsewhere ------------------------------------------------------------------------
async def test_llm_timeout_bounds_each_model_call() -> None:
    data = {"mode": "bujo", "writeMode": "capture", "embeddings": {"provider": "local"}}
    with ScriptedModelServer() as server:
        server.push(Delay(3.0, '{"late": true}'))
        llm = {"provider": "ollama", "model": "m", "endpoint": server.url, "timeoutMs": 300}
        from tempomem.store import capture_settings

        settings = capture_settings(load_config_data({"memory": {**data, "llm": llm}}))
        assert isinstance(settings, CaptureSettings) and settings.timeout_ms == 300
        from tempomem.activities.curation import CurationActivities

        assert (
            "timeout_s=self.settings.timeout_ms / 1000"
            in Path(
                __import__("inspect").getsourcefile(CurationActivities)  # type: ignore[arg-type]
            ).read_text()
        )
        started = datetime.now(UTC)
        with pytest.raises(LlmTimeout):
            await chat_model_for(settings).complete([{"role": "user", "content": "x"}], timeout_s=0.3)
        assert (datetime.now(UTC) - started).total_seconds() < 2.5


def test_max_bytes_bounds_the_automatic_context(tmp_path: Path) -> None:
    def store(max_bytes: int | None) -> MemoryStore:
        memory: dict = {"mode": "journal", "embeddings": {"provider": "local"}, "path": str(tmp_path / "m")}
        if max_bytes is not None:
            memory["maxBytes"] = max_bytes
        return MemoryStore(load_config_data({"memory": memory}))

    full = store(None)
    for i in range(6):
        full.remember(
            f"The user's tea preference number {i} is a long detailed note about green tea brewing at "
            f"{70 + i} degrees for exactly {i + 2} minutes in the morning.",
            conversation_id=f"web:other-{i}",
        )
    question = "How should I brew my green tea in the morning, and at what temperature?"
    wide = full.automatic_context_sync(question, verified_owner=True, surface="web")
    assert wide.block.byte_size > 300
    narrow = store(300).automatic_context_sync(question, verified_owner=True, surface="web")
    assert 0 < len(narrow.context_text.encode()) <= 300 or narrow.block.suppressed == "budget"
    assert len(narrow.context_text.encode()) < wide.block.byte_size


def test_inline_api_key_server_name_and_profile(tmp_path: Path) -> None:
    profiles = tmp_path / "temporal.toml"
    profiles.write_text('[profile.staging]\naddress = "staging.example:7233"\nnamespace = "stage-ns"\n')
    (tmp_path / "tempomem.json").write_text(
        json.dumps(
            {
                "memory": {"mode": "lite"},
                "temporal": {
                    "profile": "staging",
                    "apiKey": "inline-key",
                    "tls": {"serverName": "sni.example"},
                },
            }
        )
    )
    options = connect_options(
        load_config(tmp_path / "tempomem.json"), environ={"TEMPORAL_CONFIG_FILE": str(profiles)}
    )
    assert (options["target_host"], options["namespace"]) == ("staging.example:7233", "stage-ns")
    assert options["api_key"] == "inline-key" and options["tls"].domain == "sni.example"


async def test_registry_inline_key_is_sent() -> None:
    from tempomem.store import capture_settings

    with ScriptedModelServer() as server:
        server.push('{"ok": 1}')
        data = {
            "memory": {
                "mode": "bujo",
                "writeMode": "capture",
                "embeddings": {"provider": "local"},
                "llm": {"provider": "agent-host", "model": "lab:m-1"},
            },
            "agentHost": {"providers": {"lab": {"endpoint": server.url, "apiKey": "reg-key"}}},
        }
        settings = capture_settings(load_config_data(data))
        assert settings is not None
        await chat_model_for(settings).complete([{"role": "user", "content": "x"}], timeout_s=10)
        assert server.calls[-1].headers.get("authorization") == "Bearer reg-key"
        assert server.calls[-1].model == "m-1"
