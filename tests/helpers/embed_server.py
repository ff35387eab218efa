"""A tiny real HTTP embedding server (Ollama /api/embed, OpenAI-style /v1/embeddings) on loopback, with
deterministic vectors: a fake behind a real protocol boundary for remote embedding providers."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")
    return np.random.default_rng(seed).normal(size=dim).round(6).tolist()


class EmbedServer:
    """A tiny real HTTP server speaking Ollama /api/embed and OpenAI-style /v1/embeddings."""

    def __init__(self) -> None:
        self.dim = 8
        # What the server answers for a request's texts (the ``embeddings`` list, or each ``embedding``),
        # and how long it waits first: tests of malformed or slow providers replace them.
        self.vectors: Callable[[list[str]], Any] = lambda texts: [fake_vector(t, self.dim) for t in texts]
        self.delay = 0.0
        self.body: Any = None  # when set, the whole JSON answer instead of the provider's shape
        self.requests: list[tuple[str, dict[str, Any], str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, body, self.headers.get("Authorization")))
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = server.vectors(inputs)
                time.sleep(server.delay)
                if self.path == "/api/embed":
                    payload: Any = {"model": body["model"], "embeddings": vectors}
                elif self.path == "/v1/embeddings":
                    # Out of order on purpose: clients must sort by index.
                    data = [
                        {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
                    ]
                    payload = {"object": "list", "data": data[::-1], "model": body["model"]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                if server.body is not None:
                    payload = server.body
                raw = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
