"""Chat-model clients for the capture pipeline: Ollama and OpenAI-compatible, over httpx (AMB-46).

One :class:`ChatModel` call is one model request. The pieces that matter for the rest of the pipeline:

* **No hidden retries (CAP-20).** The durable retry budget lives in the intake record and the workflow
  (INTAKE-13); a client that silently retried would multiply model calls (LIM-18: at most 3 per turn) and
  could turn one bad answer into a second, different one. The only retry here is tenacity around
  *connection establishment* (``httpx.ConnectError``: DNS, refused, TLS handshake) inside one call and
  inside that call's deadline. Nothing was sent to the model then, so the retry cannot duplicate a call.
  A timeout, an HTTP error or malformed output is never retried here.
* **One deadline per call.** ``timeout_s`` bounds the whole call (connect, send, wait, read) through
  ``asyncio.timeout``; the default comes from ``memory.llm.timeoutMs`` (LIM-22), passed in by the caller.
* **Cancellation propagates.** ``asyncio.CancelledError`` is never caught; leaving the ``async with``
  closes the connection, which aborts the in-flight request.
* **Typed, content-free errors.** Each error maps to a bounded failure category (AMB-29) via
  ``.category``. Messages carry protocol names and status codes only, never message content or model
  output, and nothing here logs either (memory text stays out of logs and Temporal history).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypedDict

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from tempomem.storage.limits import OLLAMA_ENDPOINT_DEFAULT

if TYPE_CHECKING:
    from tempomem.capture.settings import CaptureSettings
from tempomem.storage.tls import client_context

log = logging.getLogger(__name__)

ChatRole = Literal["system", "user", "assistant"]

# A completion is at most 262,144 UTF-16 code units (LIM-15); even fully \u-escaped inside a protocol
# envelope that stays well below this. Larger bodies are refused while streaming, before buffering.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024

# Connection establishment only (see module docstring): 3 tries, 0.1 s then 0.2 s apart.
CONNECT_ATTEMPTS = 3

# AMB-46: `provider:model` runtime reference, e.g. `openai-codex:gpt-5.6-terra`.
AGENT_HOST_MODEL_REF = re.compile(r"^[a-z0-9][a-z0-9-]*:[A-Za-z0-9._:-]+$")

Provider = Literal["ollama", "openai-compatible", "agent-host"]


class ChatMessage(TypedDict):
    role: ChatRole
    content: str


class LlmError(Exception):
    """Base of the chat-client failures. ``category`` is the bounded failure vocabulary (AMB-29)."""

    category: ClassVar[str] = "llm_error"


class LlmTimeout(LlmError):
    """The call did not finish within its per-call deadline."""

    category: ClassVar[str] = "llm_timeout"


class LlmUnavailable(LlmError):
    """Connection failure or an HTTP error status (4xx/5xx) from the model endpoint."""

    category: ClassVar[str] = "llm_error"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LlmProtocolError(LlmError):
    """The response body is not the protocol's JSON shape (this is about the envelope, not the contract)."""

    category: ClassVar[str] = "invalid_output"


class ChatModel(Protocol):
    async def complete(self, messages: list[ChatMessage], *, timeout_s: float) -> str: ...


class _HttpChat:
    """Shared request path: one POST, one deadline, streamed and bounded body, typed errors."""

    protocol: ClassVar[str]
    path: ClassVar[str]

    def __init__(self, endpoint: str, model: str, api_key: str | None = None) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError("endpoint must be an http(s) URL")
        if not model:
            raise ValueError("model must be non-empty")
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self._api_key = api_key

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(endpoint={self.endpoint!r}, model={self.model!r})"

    @property
    def url(self) -> str:
        return self.endpoint + self.path

    def _body(self, messages: list[ChatMessage]) -> dict[str, Any]:
        raise NotImplementedError

    def _content(self, payload: Any) -> str:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    async def complete(self, messages: list[ChatMessage], *, timeout_s: float) -> str:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        body = json.dumps(self._body(messages), ensure_ascii=False).encode("utf-8")
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                raw = await self._post(body, timeout_s)
        except TimeoutError:
            log.info("%s chat call timed out after %.1f s", self.protocol, timeout_s)
            raise LlmTimeout(f"{self.protocol} chat call exceeded {timeout_s:g} s") from None
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            raise LlmProtocolError(f"{self.protocol} response is not JSON") from None
        content = self._content(payload)
        log.debug("%s chat call ok in %.3f s", self.protocol, time.monotonic() - started)
        return content

    async def _post(self, body: bytes, timeout_s: float) -> bytes:
        # httpx's own timeout is a backstop; asyncio.timeout in complete() is the real per-call bound.
        timeout = httpx.Timeout(timeout_s)
        async with httpx.AsyncClient(timeout=timeout, verify=client_context()) as client:
            retrying = AsyncRetrying(
                retry=retry_if_exception_type(httpx.ConnectError),
                stop=stop_after_attempt(CONNECT_ATTEMPTS),
                wait=wait_exponential(multiplier=0.1, max=1.0),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        return await self._send(client, body)
            except httpx.TimeoutException:
                raise TimeoutError from None
            except httpx.HTTPError as exc:  # connect failures after the retries, resets, protocol errors
                raise LlmUnavailable(f"{self.protocol} endpoint unreachable ({type(exc).__name__})") from None
        raise AssertionError("unreachable")  # pragma: no cover - AsyncRetrying either returns or raises

    async def _send(self, client: httpx.AsyncClient, body: bytes) -> bytes:
        async with client.stream("POST", self.url, content=body, headers=self._headers()) as response:
            if response.status_code >= 400:
                raise LlmUnavailable(
                    f"{self.protocol} endpoint returned HTTP {response.status_code}",
                    status=response.status_code,
                )
            if response.status_code != 200:
                raise LlmProtocolError(f"{self.protocol} endpoint returned HTTP {response.status_code}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise LlmProtocolError(f"{self.protocol} response exceeds {MAX_RESPONSE_BYTES} bytes")
                chunks.append(chunk)
            return b"".join(chunks)


def _string(value: Any, protocol: str) -> str:
    if not isinstance(value, str):
        raise LlmProtocolError(f"{protocol} response has no string message content")
    return value


class OllamaChat(_HttpChat):
    """Ollama ``POST /api/chat``, non-streaming, JSON mode, temperature 0."""

    protocol: ClassVar[str] = "ollama"
    path: ClassVar[str] = "/api/chat"

    def _body(self, messages: list[ChatMessage]) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "stream": False,
            "format": "json",
            "options": {"temperature": 0},
        }

    def _content(self, payload: Any) -> str:
        message = payload.get("message") if isinstance(payload, dict) else None
        if not isinstance(message, dict):
            raise LlmProtocolError("ollama response has no message object")
        return _string(message.get("content"), self.protocol)


class OpenAICompatChat(_HttpChat):
    """OpenAI-compatible ``POST /v1/chat/completions`` (LM Studio, vLLM, llama.cpp server, OpenAI).

    An endpoint that already ends in ``/v1`` (how LM Studio and OpenAI print their base URL) is not
    doubled.
    """

    protocol: ClassVar[str] = "openai-compatible"
    path: ClassVar[str] = "/v1/chat/completions"

    @property
    def url(self) -> str:
        if self.endpoint.endswith("/v1"):
            return self.endpoint + "/chat/completions"
        return self.endpoint + self.path

    def _body(self, messages: list[ChatMessage]) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }

    def _content(self, payload: Any) -> str:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LlmProtocolError("openai-compatible response has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise LlmProtocolError("openai-compatible response has no message object")
        return _string(message.get("content"), self.protocol)


class HostModelClient(Protocol):
    """The agent host's own model client, handed to tempomem in-process (``llm.provider: "agent-host"``).

    ``complete`` gets the chat messages, the ``provider:model`` runtime reference the config names (the
    host resolves it against its own provider registry), and ``json_mode=True`` (capture always asks for
    one JSON object). It returns the model's text. tempomem bounds each call by ``memory.llm.timeoutMs``
    and never retries it; any exception becomes a content-free ``llm_error`` (the durable retry budget
    decides what happens next).
    """

    async def complete(self, messages: list[ChatMessage], *, model: str, json_mode: bool) -> str: ...


class HostChat:
    """``ChatModel`` over a ``HostModelClient`` (AMB-46 with a host runtime)."""

    protocol: ClassVar[str] = "agent-host"

    def __init__(self, client: HostModelClient, model: str) -> None:
        if not AGENT_HOST_MODEL_REF.match(model):
            raise ValueError("agent-host model must be a provider:model reference (AMB-46)")
        self.client = client
        self.model = model

    def __repr__(self) -> str:
        return f"HostChat(model={self.model!r})"

    async def complete(self, messages: list[ChatMessage], *, timeout_s: float) -> str:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        try:
            async with asyncio.timeout(timeout_s):
                text = await self.client.complete(
                    [ChatMessage(role=m["role"], content=m["content"]) for m in messages],
                    model=self.model,
                    json_mode=True,
                )
        except TimeoutError:
            raise LlmTimeout(f"agent-host model call exceeded {timeout_s:g} s") from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the host's own error may quote content: keep only its type
            raise LlmUnavailable(f"agent-host model client failed ({type(exc).__name__})") from None
        if not isinstance(text, str):
            raise LlmProtocolError("agent-host model client returned no text")
        return text


class ModelNotConfigured(ValueError):
    """No way to reach the model a setting names (say which setting; never a key)."""


@dataclass(frozen=True)
class ProviderEndpoint:
    """One entry of the agent-host provider registry: an OpenAI-compatible endpoint and its key."""

    endpoint: str
    api_key: str | None = None


def make_chat_model(
    provider: str,
    model: str,
    endpoint: str | None,
    *,
    api_key: str | None = None,
    host_client: HostModelClient | None = None,
    providers: Mapping[str, ProviderEndpoint] | None = None,
) -> ChatModel:
    """Build the client for a ``memory.llm`` (or ``capture.reconcileModel``) setting.

    * ``ollama``: endpoint defaults to LIM-55.
    * ``openai-compatible``: endpoint required; ``api_key`` sent as a bearer token.
    * ``agent-host`` (AMB-46): ``model`` is a ``provider:model`` reference, resolved in this order: the
      host's in-process ``host_client`` (gets the whole reference); the provider registry ``providers``
      (``agentHost.providers`` in the config) for the reference's provider; ``endpoint`` (an
      OpenAI-compatible server for the part after the first colon).
    """
    if provider == "ollama":
        return OllamaChat(endpoint or OLLAMA_ENDPOINT_DEFAULT, model, api_key)
    if provider == "openai-compatible":
        if endpoint is None:
            raise ModelNotConfigured('provider "openai-compatible" needs an endpoint')
        return OpenAICompatChat(endpoint, model, api_key)
    if provider == "agent-host":
        if not AGENT_HOST_MODEL_REF.match(model):
            raise ModelNotConfigured("agent-host model must be a provider:model reference (AMB-46)")
        if host_client is not None:
            return HostChat(host_client, model)
        runtime, name = model.split(":", 1)
        entry = (providers or {}).get(runtime)
        if entry is not None:
            return OpenAICompatChat(entry.endpoint, name, entry.api_key)
        if endpoint is None:
            raise ModelNotConfigured(
                f"agent-host model {model!r}: no host model client was given, agentHost.providers has no "
                f"{runtime!r} entry, and there is no endpoint"
            )
        return OpenAICompatChat(endpoint, name, api_key)
    raise ModelNotConfigured(f"unknown chat provider {provider!r}")


def chat_model_for(
    settings: CaptureSettings, *, classifier: bool = False, override: str | None = None
) -> ChatModel:
    """The chat model of a capture stage (CAP-08). Extraction and review use ``memory.llm`` (``override``,
    a re-curation's model name, replaces its model on the same provider). Classification uses
    ``capture.reconcileModel`` when set: always through agent-host (CFG-15), inheriting the capture LLM's
    endpoint and key only when that is agent-host too; with an Ollama or OpenAI-compatible capture LLM its
    provider must come from the host client or ``agentHost.providers``."""
    s = settings
    if classifier and s.reconcile_model:
        inherit = s.llm_provider == "agent-host"
        return make_chat_model(
            "agent-host",
            s.reconcile_model,
            s.llm_endpoint if inherit else None,
            api_key=s.llm_api_key if inherit else None,
            host_client=s.host_client,
            providers=s.providers,
        )
    return make_chat_model(
        s.llm_provider,
        override or s.llm_model,
        s.llm_endpoint,
        api_key=s.llm_api_key,
        host_client=s.host_client,
        providers=s.providers,
    )


def check_capture_models(settings: CaptureSettings) -> None:
    """Build every model capture will call, so a worker refuses to start on a setting it cannot serve
    (raises ``ModelNotConfigured`` naming the setting) instead of failing each turn for 44 hours."""
    chat_model_for(settings)
    if settings.reconcile_model:
        try:
            chat_model_for(settings, classifier=True)
        except ModelNotConfigured as exc:
            raise ModelNotConfigured(f"memory.capture.reconcileModel: {exc}") from None
