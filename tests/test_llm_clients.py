"""Chat clients against the scripted model server: real HTTP on loopback, both protocols."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tempomem.capture.contracts import ContractViolation, parse_extraction
from tempomem.capture.model_client import (
    ChatMessage,
    LlmProtocolError,
    LlmTimeout,
    LlmUnavailable,
    OllamaChat,
    OpenAICompatChat,
    make_chat_model,
)
from tempomem.capture.prompts import extraction_messages
from tests.scripted_model import OLLAMA_PATH, OPENAI_PATH, Delay, Hang, HttpError, Raw, ScriptedModelServer

MESSAGES: list[ChatMessage] = [
    {"role": "system", "content": "Reply with JSON."},
    {"role": "user", "content": "secret memory text: Ada likes tea"},
]

PROTOCOLS = [
    pytest.param("ollama", OLLAMA_PATH, id="ollama"),
    pytest.param("openai-compatible", OPENAI_PATH, id="openai-compatible"),
]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as srv:
        yield srv


def client_for(provider: str, srv: ScriptedModelServer) -> Any:
    return make_chat_model(provider, "test-model", srv.url)


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
async def test_complete_returns_content_and_sends_protocol_body(
    server: ScriptedModelServer, provider: str, path: str
) -> None:
    server.push('{"memories":[]}')
    out = await client_for(provider, server).complete(MESSAGES, timeout_s=5)
    assert out == '{"memories":[]}'
    assert len(server.calls) == 1
    call = server.calls[0]
    assert call.path == path
    assert call.model == "test-model"
    assert call.messages == [dict(m) for m in MESSAGES]
    if provider == "ollama":
        assert call.body == {
            "model": "test-model",
            "messages": call.messages,
            "stream": False,
            "format": "json",
            "options": {"temperature": 0},
        }
    else:
        assert call.body == {
            "model": "test-model",
            "messages": call.messages,
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
@pytest.mark.parametrize("status", [500, 503, 400, 404, 429])
async def test_http_error_is_unavailable_and_never_retried(
    server: ScriptedModelServer, provider: str, path: str, status: int
) -> None:
    server.push(HttpError(status), "would be a second answer")
    with pytest.raises(LlmUnavailable) as info:
        await client_for(provider, server).complete(MESSAGES, timeout_s=5)
    assert info.value.status == status
    assert info.value.category == "llm_error"
    assert len(server.calls) == 1  # CAP-20: no hidden retry
    assert server.remaining == 1


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
@pytest.mark.parametrize(
    "body",
    [
        "not json at all",
        "[]",
        '{"message": null, "choices": null}',
        '{"message": {"content": 7}, "choices": [{"message": {"content": 7}}]}',
        '{"message": {"content": null}, "choices": [{"message": {"content": null}}]}',
        '{"message": "x", "choices": []}',
        '{"message": {}, "choices": [{}]}',
        '{"choices": "x", "message": ["x"]}',
    ],
)
async def test_malformed_protocol_envelope_is_protocol_error(
    server: ScriptedModelServer, provider: str, path: str, body: str
) -> None:
    server.push(Raw(body))
    with pytest.raises(LlmProtocolError) as info:
        await client_for(provider, server).complete(MESSAGES, timeout_s=5)
    assert info.value.category == "invalid_output"
    assert len(server.calls) == 1


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
async def test_timeout_within_bound_and_single_call(
    server: ScriptedModelServer, provider: str, path: str
) -> None:
    server.push(Hang(), "unused")
    started = time.monotonic()
    with pytest.raises(LlmTimeout) as info:
        await client_for(provider, server).complete(MESSAGES, timeout_s=0.4)
    elapsed = time.monotonic() - started
    assert 0.35 <= elapsed < 1.5
    assert info.value.category == "llm_timeout"
    assert len(server.calls) == 1


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
async def test_slow_answer_inside_deadline_succeeds(
    server: ScriptedModelServer, provider: str, path: str
) -> None:
    server.push(Delay(0.2, then='{"ok":true}'))
    assert await client_for(provider, server).complete(MESSAGES, timeout_s=3) == '{"ok":true}'


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
async def test_cancellation_of_hung_call_returns_promptly(
    server: ScriptedModelServer, provider: str, path: str
) -> None:
    server.push(Hang())
    task = asyncio.create_task(client_for(provider, server).complete(MESSAGES, timeout_s=30))
    while not server.calls:
        await asyncio.sleep(0.01)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 0.5
    assert len(server.calls) == 1


async def test_empty_script_is_http_500_and_recorded(server: ScriptedModelServer) -> None:
    with pytest.raises(LlmUnavailable):
        await client_for("ollama", server).complete(MESSAGES, timeout_s=5)
    assert [c.path for c in server.calls] == [OLLAMA_PATH]


async def test_callable_script_item_sees_request(server: ScriptedModelServer) -> None:
    server.push(lambda req: req["messages"][-1]["content"].upper())
    out = await client_for("openai-compatible", server).complete(MESSAGES, timeout_s=5)
    assert out == "SECRET MEMORY TEXT: ADA LIKES TEA"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("provider", ["ollama", "openai-compatible"])
async def test_connection_refused_is_unavailable(provider: str) -> None:
    model = make_chat_model(provider, "m", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(LlmUnavailable) as info:
        await model.complete(MESSAGES, timeout_s=5)
    assert info.value.status is None
    assert time.monotonic() - started < 2  # a few connect tries, short waits


async def test_connection_refused_respects_deadline() -> None:
    model = make_chat_model("ollama", "m", f"http://127.0.0.1:{free_port()}")
    with pytest.raises((LlmTimeout, LlmUnavailable)):
        await model.complete(MESSAGES, timeout_s=0.05)


async def test_agent_host_sends_model_part_after_first_colon(server: ScriptedModelServer) -> None:
    server.push("{}")
    model = make_chat_model("agent-host", "openai-codex:gpt-5.6-terra:beta", server.url, api_key="k-123")
    assert isinstance(model, OpenAICompatChat)
    assert await model.complete(MESSAGES, timeout_s=5) == "{}"
    assert server.calls[0].path == OPENAI_PATH
    assert server.calls[0].model == "gpt-5.6-terra:beta"
    assert server.calls[0].headers["authorization"] == "Bearer k-123"
    assert "k-123" not in repr(model)


async def test_openai_endpoint_with_v1_suffix_is_not_doubled(server: ScriptedModelServer) -> None:
    server.push("{}")
    await make_chat_model("openai-compatible", "m", server.url + "/v1/").complete(MESSAGES, timeout_s=5)
    assert server.calls[0].path == OPENAI_PATH


@pytest.mark.parametrize(
    ("provider", "model", "endpoint"),
    [
        ("agent-host", "gpt-4o", "http://x"),  # not a provider:model reference
        ("agent-host", "Openai:gpt", "http://x"),
        ("agent-host", "openai:gpt", None),
        ("openai-compatible", "m", None),
        ("anthropic", "m", "http://x"),
        ("ollama", "m", "localhost:11434"),
        ("ollama", "", None),
    ],
)
def test_make_chat_model_rejects_bad_settings(provider: str, model: str, endpoint: str | None) -> None:
    with pytest.raises(ValueError):
        make_chat_model(provider, model, endpoint)


def test_ollama_default_endpoint() -> None:
    model = make_chat_model("ollama", "llama3.2", None)
    assert isinstance(model, OllamaChat)
    assert model.url == "http://localhost:11434/api/chat"


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
async def test_content_never_logged(
    server: ScriptedModelServer, provider: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.push('{"answer":"model output Ada"}', HttpError(500), Hang())
    model = client_for(provider, server)
    await model.complete(MESSAGES, timeout_s=5)
    with pytest.raises(LlmUnavailable) as e1:
        await model.complete(MESSAGES, timeout_s=5)
    with pytest.raises(LlmTimeout) as e2:
        await model.complete(MESSAGES, timeout_s=0.2)
    text = caplog.text + str(e1.value) + str(e2.value)
    assert "Ada" not in text and "secret" not in text


@pytest.mark.parametrize(("provider", "path"), PROTOCOLS)
async def test_prompt_to_model_to_contract_round_trip(
    server: ScriptedModelServer, provider: str, path: str
) -> None:
    """The pieces in order: extraction prompt → real HTTP → strict parse; bad output is invalid_output."""

    def answer(request: dict[str, Any]) -> str:
        turn = request["messages"][-1]["content"]
        assert "Turn source: User" in turn and "Ada" in turn
        return json.dumps(
            {
                "memories": [
                    {
                        "text": "Ada prefers green tea",
                        "kind": "preference",
                        "source": "user",
                        "salience": 0.8,
                        "entities": ["ada"],
                    }
                ],
                "entities": [{"ref": "ada", "name": "Ada", "type": "person"}],
                "relations": [],
            }
        )

    server.push(answer, "```json\n{}\n```")
    messages = extraction_messages(
        admitted_at=datetime(2026, 9, 8, tzinfo=UTC),
        user_text="Ada here, I prefer green tea",
        assistant_text="Noted.",
    )
    model = client_for(provider, server)
    plan = parse_extraction(await model.complete(messages, timeout_s=5))
    assert [m.text for m in plan.memories] == ["Ada prefers green tea"]
    with pytest.raises(ContractViolation) as info:
        parse_extraction(await model.complete(messages, timeout_s=5))
    assert info.value.reason == "not_json"
    assert len(server.calls) == 2


def test_model_and_embedding_clients_share_one_verifying_tls_context() -> None:
    """Building an httpx client's default TLS context costs ~50 ms (the CA bundle): every client gets
    the one process-wide context instead, and it still verifies certificates and host names."""
    import ssl

    from tempomem.storage.tls import client_context

    ctx = client_context()
    assert ctx is client_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded
