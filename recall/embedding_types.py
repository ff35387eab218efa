"""What every embedding provider shares: its identity, its protocol, its error, L2 normalisation.

Kept apart from the providers so an optional provider (``e5_embedder``) and the factory in ``embedding``
both import it without importing each other.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


class EmbeddingError(Exception):
    """The embedding provider failed or answered something unusable (maps to ``embedding_unavailable``)."""


@dataclass(frozen=True)
class EmbeddingIdentity:
    """What produced a vector. Vectors from different identities are never mixed or reused."""

    provider: str
    model: str
    dim: int

    def key(self) -> str:
        # Short and filesystem/SQL-safe; stable across processes and Python versions (no hash()).
        raw = f"{self.provider}\x00{self.model}\x00{self.dim}".encode()
        return f"{self.provider}-{self.dim}-{hashlib.sha256(raw).hexdigest()[:12]}"

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "dim": self.dim}


@runtime_checkable
class EmbeddingProvider(Protocol):
    identity: EmbeddingIdentity

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 array of shape (len(texts), identity.dim) with L2-normalised rows."""
        ...


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    # A zero vector stays zero rather than becoming NaN (cosine 0 = no semantic evidence).
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class RememberedEmbeddings:
    """An embedder that embeds each text once for as long as it lives (one reconciliation: the
    close-candidate search embeds a memory's text, then the commit's index upsert embeds the same text;
    issue #15 item 1). It also takes what ``embed_ahead`` embedded in this process (a model stage, run in
    parallel, embeds the memories its turn will reconcile). Only for symmetric embedders: one with
    ``embed_query`` (e5) embeds a query differently from a stored text, so ``remembered`` returns it
    unwrapped."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.identity = inner.identity
        self._vectors: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        ahead = _taken_ahead(self.identity, missing)
        self._vectors.update(ahead)
        missing = [t for t in missing if t not in ahead]
        if missing:
            fresh = np.asarray(self.inner.embed(missing), dtype=np.float32)
            if fresh.shape != (len(missing), self.identity.dim):  # the caller reports a wrong shape
                return fresh
            self._vectors.update(zip(missing, fresh, strict=True))
        if not texts:
            return np.zeros((0, self.identity.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


def remembered(embedder: EmbeddingProvider | None) -> EmbeddingProvider | None:
    """``embedder`` wrapped in ``RememberedEmbeddings`` when that is exact (see there), else itself."""
    return RememberedEmbeddings(embedder) if _symmetric(embedder) else embedder


def _symmetric(embedder: EmbeddingProvider | None) -> bool:
    """A query is embedded as a stored text is (no ``embed_query``): its vectors may be reused."""
    return embedder is not None and getattr(embedder, "embed_query", None) is None


# Vectors embedded ahead of the reconciliation that needs them, by (embedder identity, text); each is
# taken once. Bounded, oldest first out: a turn that never reconciles leaves its few vectors to age out.
_AHEAD: OrderedDict[tuple[EmbeddingIdentity, str], np.ndarray] = OrderedDict()
_AHEAD_MAX = 512
_AHEAD_LOCK = threading.Lock()


def embed_ahead(embedder: EmbeddingProvider | None, texts: Sequence[str]) -> None:
    """Embed ``texts`` now, for this process's next ``RememberedEmbeddings`` of the same embedder.
    Errors are left to the reconciliation, which embeds again."""
    if embedder is None or not _symmetric(embedder) or not texts:
        return
    try:
        vectors = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    except Exception:  # only a head start: a model stage never fails for it
        return
    if vectors.shape != (len(texts), embedder.identity.dim):
        return
    with _AHEAD_LOCK:
        for text, vector in zip(texts, vectors, strict=True):
            _AHEAD.pop((embedder.identity, text), None)
            _AHEAD[(embedder.identity, text)] = vector
        while len(_AHEAD) > _AHEAD_MAX:
            _AHEAD.popitem(last=False)


def _taken_ahead(identity: EmbeddingIdentity, texts: Sequence[str]) -> dict[str, np.ndarray]:
    if not texts:
        return {}
    with _AHEAD_LOCK:
        return {t: v for t in texts if (v := _AHEAD.pop((identity, t), None)) is not None}
