"""A scripted chat-model server for tests: real HTTP on loopback, deterministic answers.

It speaks Ollama ``POST /api/chat`` and OpenAI-compatible ``POST /v1/chat/completions`` and answers each
request with the next item of a per-test script:

* ``str`` — the completion text, wrapped in the protocol's envelope;
* ``Delay(seconds, then=item)`` — wait, then answer with ``item``;
* ``HttpError(status)`` — an HTTP error status;
* ``Hang()`` — never answer (until the server closes), for timeouts and cancellation;
* ``Raw(body, status=200)`` — exactly these bytes, for malformed protocol envelopes;
* a callable ``(request_json) -> item`` — computed answer (usually a ``str``).

An empty script answers HTTP 500 (and records the call), so a test notices a call it did not expect.
Every request is recorded in ``.calls``. This is test infrastructure, never a default model.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

OLLAMA_PATH = "/api/chat"
OPENAI_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Delay:
    seconds: float
    then: Item = ""


@dataclass(frozen=True)
class HttpError:
    status: int = 500


@dataclass(frozen=True)
class Hang:
    pass


@dataclass(frozen=True)
class Raw:
    body: bytes | str
    status: int = 200


Item = Union[str, Delay, HttpError, Hang, Raw, Callable[[dict[str, Any]], Any]]  # noqa: UP007


@dataclass(frozen=True)
class RecordedCall:
    path: str
    model: str | None
    messages: list[dict[str, Any]]
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)


class ScriptedModelServer:
    def __init__(self, script: Iterable[Item] = ()) -> None:
        self._script: deque[Item] = deque(script)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.calls: list[RecordedCall] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- script -------------------------------------------------------------------------------------
    def push(self, *items: Item) -> None:
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next(self) -> Item | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ScriptedModelServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="scripted-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # releases Hang() and Delay() handlers
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- HTTP ---------------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                request = body if isinstance(body, dict) else {}
                messages = request.get("messages")
                server.calls.append(
                    RecordedCall(
                        path=self.path,
                        model=request.get("model"),
                        messages=messages if isinstance(messages, list) else [],
                        body=body if isinstance(body, dict) else None,
                        headers={k.lower(): v for k, v in self.headers.items()},
                    )
                )
                if self.path not in (OLLAMA_PATH, OPENAI_PATH):
                    self._send(404, b'{"error":"not found"}')
                    return
                self._answer(server._next(), request)

            def _answer(self, item: Item | None, request: dict[str, Any]) -> None:
                if item is None:
                    self._send(500, b'{"error":"script exhausted"}')
                elif isinstance(item, Hang):
                    server._closing.wait()
                    self.close_connection = True
                elif isinstance(item, Delay):
                    if server._closing.wait(item.seconds):
                        return
                    self._answer(item.then, request)
                elif isinstance(item, HttpError):
                    self._send(item.status, json.dumps({"error": f"scripted {item.status}"}).encode())
                elif isinstance(item, Raw):
                    body = item.body.encode() if isinstance(item.body, str) else item.body
                    self._send(item.status, body)
                elif isinstance(item, str):
                    self._send(200, json.dumps(self._envelope(item, request)).encode())
                elif callable(item):
                    self._answer(item(request), request)
                else:  # pragma: no cover - a broken script is a test bug
                    raise TypeError(f"unknown script item {item!r}")

            def _envelope(self, content: str, request: dict[str, Any]) -> dict[str, Any]:
                model = request.get("model")
                message = {"role": "assistant", "content": content}
                if self.path == OLLAMA_PATH:
                    return {
                        "model": model,
                        "created_at": "2026-01-01T00:00:00Z",
                        "message": message,
                        "done": True,
                        "done_reason": "stop",
                    }
                return {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout, cancel)
                    pass

        return Handler
