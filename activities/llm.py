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
from typing import Any, ClassVar, Literal, Protocol, TypedDict

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from storage.limits import OLLAMA_ENDPOINT_DEFAULT
from storage.tls import client_context

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


def make_chat_model(
    provider: str, model: str, endpoint: str | None, *, api_key: str | None = None
) -> ChatModel:
    """Build the client for a ``memory.llm`` (or ``capture.reconcileModel``) setting.

    * ``ollama``: endpoint defaults to LIM-55.
    * ``openai-compatible``: endpoint required.
    * ``agent-host`` (AMB-46): ``model`` is a ``provider:model`` reference; the part after the first colon
      is the model name sent to the OpenAI-compatible ``endpoint`` the caller resolved for that provider.
      There is no host runtime in Python, so the endpoint is required.
    """
    if provider == "ollama":
        return OllamaChat(endpoint or OLLAMA_ENDPOINT_DEFAULT, model)
    if provider == "openai-compatible":
        if endpoint is None:
            raise ValueError('provider "openai-compatible" needs an endpoint')
        return OpenAICompatChat(endpoint, model, api_key)
    if provider == "agent-host":
        if not AGENT_HOST_MODEL_REF.match(model):
            raise ValueError("agent-host model must be a provider:model reference (AMB-46)")
        if endpoint is None:
            raise ValueError('provider "agent-host" needs the endpoint of its provider')
        return OpenAICompatChat(endpoint, model.split(":", 1)[1], api_key)
    raise ValueError(f"unknown chat provider {provider!r}")
