"""The ``agent-host`` model provider with a host-supplied client, API keys for HTTP providers, and the
reconcile classifier's endpoint, model and credentials for every provider (AMB-46, CFG-11..15, CAP-08).

The host client here is what an agent host would really pass: its own OpenAI-compatible client, talking
over real HTTP to the scripted model server on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tempomem import MemoryStore, load_config
from tempomem.capture.model_client import ChatMessage, ModelNotConfigured, chat_model_for
from tempomem.capture.settings import CaptureSettings
from tempomem.config import SecretMissingError, load_config_data
from tempomem.store import capture_settings
from tempomem.worker import run_worker
from tests.conftest import running_worker
from tests.scripted_model import OLLAMA_PATH, OPENAI_PATH, ScriptedModelServer
from tests.test_capture_flow import outcome_of
from tests.test_capture_pipeline import bullets, extraction, memory, turn

REFERENCE_REF = "openai-codex:gpt-5.6-terra"


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


class HostClient:
    """An agent host's model client: resolves the runtime reference itself (here: one OpenAI-compatible
    server) and records what tempomem asked for."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.requests: list[tuple[str, bool]] = []

    async def complete(self, messages: list[ChatMessage], *, model: str, json_mode: bool) -> str:
        self.requests.append((model, json_mode))
        body: dict[str, Any] = {"model": model.split(":", 1)[1], "messages": messages}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        async with httpx.AsyncClient() as http:
            response = await http.post(self.url + OPENAI_PATH, json=body)
            response.raise_for_status()
            return response.json()["choices"][0]["message"]["content"]


def write_reference_config(folder: Path) -> Path:
    """The reference's agent-host capture config, as a file (memory.path relative to it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tempomem.json"
    path.write_text(
        json.dumps(
            {
                "memory": {
                    "mode": "bujo",
                    "writeMode": "capture",
                    "path": "./memory",
                    "embeddings": {"provider": "local"},
                    "llm": {"provider": "agent-host", "model": REFERENCE_REF},
                }
            }
        )
    )
    return path


async def test_agent_host_captures_end_to_end_with_the_hosts_client(
    client: Client, tmp_path: Path, model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = write_reference_config(tmp_path / "agent")
    monkeypatch.chdir(tmp_path)  # a host running from another folder still finds ./memory beside the file
    host = HostClient(model.url)
    store = MemoryStore(load_config(config_file), client=client, first_delay_seconds=1, host_model=host)
    assert (
        store.root == (tmp_path / "agent" / "memory").resolve() or store.root == tmp_path / "agent" / "memory"
    )
    model.push(
        extraction(memory("The user's sister Ana is vegetarian.")),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    result = await store.persist_completed_turn(turn("host-1", "My sister Ana is vegetarian.", "Noted."))
    assert result.workflow_started
    async with running_worker(client, store):
        outcome = await outcome_of(client, result)
    assert outcome.state == "resolved"
    assert host.requests == [(REFERENCE_REF, True), (REFERENCE_REF, True)]  # extraction + review
    assert [c.model for c in model.calls] == ["gpt-5.6-terra", "gpt-5.6-terra"]
    assert [b.text for b in bullets(store.root)] == ["The user's sister Ana is vegetarian."]


async def test_a_failing_host_client_is_a_content_free_llm_error() -> None:
    class Broken:
        async def complete(self, messages: list[ChatMessage], *, model: str, json_mode: bool) -> str:
            raise RuntimeError("secret memory text in a host error")

    settings = CaptureSettings("agent-host", REFERENCE_REF, host_client=Broken())
    from tempomem.capture.model_client import LlmUnavailable

    with pytest.raises(LlmUnavailable) as caught:
        await chat_model_for(settings).complete([{"role": "user", "content": "x"}], timeout_s=5)
    assert "secret" not in str(caught.value) and caught.value.category == "llm_error"


async def test_worker_refuses_agent_host_without_client_registry_or_endpoint(
    client: Client, tmp_path: Path
) -> None:
    store = MemoryStore(load_config(write_reference_config(tmp_path)), client=client)
    import asyncio

    with pytest.raises(ModelNotConfigured, match=r"agentHost\.providers"):
        await run_worker(client, store.worker_context(client), stop=asyncio.Event(), schedule=False)
    assert not (tmp_path / "memory" / ".agent.lock").exists()  # refused before taking the store


def settings_for(llm: dict[str, Any], *, providers: dict[str, Any] | None = None, host: Any = None):
    data: dict[str, Any] = {
        "memory": {
            "mode": "bujo",
            "writeMode": "capture",
            "embeddings": {"provider": "local"},
            "llm": llm,
            "capture": {"reconcileModel": "lab:classifier-1"},
        }
    }
    if providers is not None:
        data["agentHost"] = {"providers": providers}
    settings = capture_settings(load_config_data(data), host)
    assert settings is not None
    return settings


async def one_call(settings: CaptureSettings, model: ScriptedModelServer, *, classifier: bool):
    model.push('{"ok": true}')
    text = await chat_model_for(settings, classifier=classifier).complete(
        [{"role": "user", "content": "classify"}], timeout_s=10
    )
    assert text == '{"ok": true}'
    return model.calls[-1]


@pytest.mark.parametrize("provider", ["ollama", "openai-compatible", "agent-host"])
async def test_reconcile_classifier_takes_registry_endpoint_model_and_key(
    provider: str, model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CAP-08/CFG-15: extraction stays on memory.llm; the classifier runs through agent-host, resolved in
    the provider registry with its own key, whatever the capture provider is."""
    monkeypatch.setenv("LAB_KEY", "lab-secret")
    monkeypatch.setenv("LLM_KEY", "llm-secret")
    capture_model = "openai-codex:main-1" if provider == "agent-host" else "main-1"
    with ScriptedModelServer() as capture_server:
        llm = {
            "provider": provider,
            "model": capture_model,
            "endpoint": capture_server.url,
            "apiKeyEnv": "LLM_KEY",
        }
        settings = settings_for(llm, providers={"lab": {"endpoint": model.url, "apiKeyEnv": "LAB_KEY"}})
        classified = await one_call(settings, model, classifier=True)
        extracted = await one_call(settings, capture_server, classifier=False)
    assert (classified.path, classified.model) == (OPENAI_PATH, "classifier-1")
    assert classified.headers.get("authorization") == "Bearer lab-secret"
    assert extracted.path == (OLLAMA_PATH if provider == "ollama" else OPENAI_PATH)
    assert extracted.model == "main-1"
    assert extracted.headers.get("authorization") == "Bearer llm-secret"


async def test_classifier_inherits_an_agent_host_capture_endpoint(model: ScriptedModelServer) -> None:
    settings = settings_for({"provider": "agent-host", "model": "openai-codex:main-1", "endpoint": model.url})
    call = await one_call(settings, model, classifier=True)
    assert (call.path, call.model) == (OPENAI_PATH, "classifier-1")


async def test_classifier_through_the_host_client_gets_the_whole_reference(
    model: ScriptedModelServer,
) -> None:
    host = HostClient(model.url)
    settings = settings_for({"provider": "ollama", "model": "llama3.2", "endpoint": model.url}, host=host)
    await one_call(settings, model, classifier=True)
    assert host.requests == [("lab:classifier-1", True)]


def test_classifier_with_ollama_and_no_registry_is_refused_by_name() -> None:
    from tempomem.capture.model_client import check_capture_models

    settings = settings_for({"provider": "ollama", "model": "llama3.2"})
    with pytest.raises(ModelNotConfigured, match=r"memory\.capture\.reconcileModel: .*'lab'"):
        check_capture_models(settings)


def test_an_api_key_env_that_is_unset_is_named_and_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(SecretMissingError, match=r"memory\.llm\.apiKeyEnv: environment variable NOPE_KEY"):
        settings_for(
            {
                "provider": "openai-compatible",
                "model": "m",
                "endpoint": "http://127.0.0.1:9",
                "apiKeyEnv": "NOPE_KEY",
            }
        )
    settings = settings_for(
        {
            "provider": "openai-compatible",
            "model": "m",
            "endpoint": "http://127.0.0.1:9",
            "apiKey": "inline-k",
        }
    )
    assert "inline-k" not in repr(settings) and "inline-k" not in repr(chat_model_for(settings))
