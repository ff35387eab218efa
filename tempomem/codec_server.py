"""A Temporal codec server for the UI and CLI (``tempomem codec-server --port N``).

The Temporal Web UI (and ``temporal workflow show --codec-endpoint``) POSTs ``{"payloads": [...]}`` in the
protobuf JSON format (metadata values and data base64) to ``<endpoint>/decode`` and ``<endpoint>/encode``;
this server answers with the same shape, run through ``AesGcmCodec``. The browser calls it directly, so
it answers CORS preflights for the configured UI origins only.

It decrypts for whoever can reach it: it binds loopback by default, can require a bearer token (the UI's
"pass access token" option) and can pin the namespace (``X-Namespace``). Standard library only.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from tempomem.codec import AesGcmCodec, CodecError

log = logging.getLogger("tempomem.codec_server")

MAX_BODY_BYTES = 32 * 1024 * 1024  # a page of history events; Temporal caps one payload at 2 MiB by default
ALLOWED_HEADERS = "content-type,x-namespace,authorization"


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL (what a browser sends as ``Origin``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return f"{parts.scheme}://{parts.netloc}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "tempomem-codec"
    sys_version = ""

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s - " + format, self.address_string(), *args)

    # -- helpers ---------------------------------------------------------------------------------------
    def _route(self) -> str | None:
        path = urlsplit(self.path).path.rstrip("/")
        prefix = self.server.path_prefix
        for op in ("encode", "decode"):
            if path == f"{prefix}/{op}":
                return op
        return None

    def _cors(self) -> None:
        origin = self.headers.get("Origin")
        if origin and origin in self.server.origins:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")

    def _send(self, status: int, body: bytes, *, extra: Iterable[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self._cors()
        for name, value in extra:
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode("utf-8"))

    def _origin_refused(self) -> bool:
        origin = self.headers.get("Origin")
        return origin is not None and origin not in self.server.origins

    # -- verbs -----------------------------------------------------------------------------------------
    def do_OPTIONS(self) -> None:
        if self._route() is None:
            self._error(HTTPStatus.NOT_FOUND, "unknown path; use /encode or /decode")
            return
        if self._origin_refused():
            self._error(HTTPStatus.FORBIDDEN, "origin not allowed")
            return
        self._send(
            HTTPStatus.NO_CONTENT,
            b"",
            extra=[
                ("Access-Control-Allow-Methods", "POST, OPTIONS"),
                ("Access-Control-Allow-Headers", ALLOWED_HEADERS),
                ("Access-Control-Max-Age", "600"),
            ],
        )

    def do_GET(self) -> None:
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "use POST /encode or POST /decode")

    def do_POST(self) -> None:
        op = self._route()
        if op is None:
            self._drain_and_error(HTTPStatus.NOT_FOUND, "unknown path; use /encode or /decode")
            return
        if self._origin_refused():
            self._drain_and_error(HTTPStatus.FORBIDDEN, "origin not allowed")
            return
        token = self.server.auth_token
        if token is not None:
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode("utf-8"), f"Bearer {token}".encode()):
                self._drain_and_error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
                return
        namespace = self.server.namespace
        if namespace is not None and self.headers.get("X-Namespace", namespace) != namespace:
            self._drain_and_error(HTTPStatus.FORBIDDEN, f"this codec server serves namespace {namespace!r}")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes")
            return
        body = self.rfile.read(length)
        try:
            request = json_format.Parse(body, Payloads())
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"body is not a Payloads JSON object: {exc}")
            return
        fn: Callable[[Sequence[Payload]], list[Payload]] = (
            self.server.codec.encode_many if op == "encode" else self.server.codec.decode_many
        )
        try:
            result = fn(request.payloads)
        except CodecError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return
        self._send(HTTPStatus.OK, json_format.MessageToJson(Payloads(payloads=result)).encode("utf-8"))

    def _drain_and_error(self, status: int, message: str) -> None:
        # Answer without reading a possibly large body; the connection cannot be reused after that.
        self.close_connection = True
        self._error(status, message)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    codec: AesGcmCodec
    origins: frozenset[str]
    namespace: str | None
    auth_token: str | None
    path_prefix: str


class CodecServer:
    """Serve ``codec`` on ``host:port`` (port 0 = pick one). Use as a context manager or ``serve_forever``."""

    def __init__(
        self,
        codec: AesGcmCodec,
        *,
        host: str = "127.0.0.1",
        port: int = 8888,
        origins: Iterable[str] = ("http://localhost:8233",),
        namespace: str | None = None,
        auth_token: str | None = None,
        path_prefix: str = "",
    ) -> None:
        self._httpd = _Server((host, port), _Handler)
        self._httpd.codec = codec
        self._httpd.origins = frozenset(origin_of(o) for o in origins)
        self._httpd.namespace = namespace
        self._httpd.auth_token = auth_token or None
        self._httpd.path_prefix = "/" + path_prefix.strip("/") if path_prefix.strip("/") else ""
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self._httpd.server_address[0]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{self.port}{self._httpd.path_prefix}"

    def serve_forever(self) -> None:
        """Serve on this thread until ``shutdown_serving`` is called from another one."""
        try:
            self._httpd.serve_forever()
        finally:
            self._httpd.server_close()

    def shutdown_serving(self) -> None:
        self._httpd.shutdown()

    def start(self) -> CodecServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tempomem-codec", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() would wait forever on a loop that never ran
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> CodecServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- command line (registered by tempomem.cli.build_parser) ------------------------------------------------
