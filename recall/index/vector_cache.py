"""The vector cache: one owner-only Parquet file per embedding identity under ``index/cache/``, content hash
→ vector, so a rebuild embeds only text it has never embedded with that model."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tempomem.recall.embedding import EmbeddingIdentity
from tempomem.recall.index.schema import CACHE_DIR
from tempomem.recall.index.vectors import fixed_list, vectors_of
from tempomem.storage.fsio import atomic_write, ensure_private_dir, read_private_file


def path(index_dir: Path, ident: EmbeddingIdentity) -> Path:
    return index_dir / CACHE_DIR / f"{ident.key()}.parquet"


def read(index_dir: Path, ident: EmbeddingIdentity) -> dict[str, np.ndarray]:
    """Content hash → vector from the cache file of ``ident`` (empty when there is none)."""
    cache: dict[str, np.ndarray] = {}
    file = path(index_dir, ident)
    if file.is_file():
        table = pq.read_table(io.BytesIO(read_private_file(file)))
        vectors = vectors_of(table, ident.dim)
        cache.update(zip(table.column("hash").to_pylist(), vectors, strict=True))
    return cache


def write(index_dir: Path, ident: EmbeddingIdentity, vectors: dict[str, np.ndarray]) -> None:
    """Replace the cache file of ``ident`` with ``vectors``, atomically and owner-only."""
    ensure_private_dir(index_dir / CACHE_DIR)
    hashes = sorted(vectors)
    matrix = np.stack([vectors[h] for h in hashes]) if hashes else np.zeros((0, ident.dim), np.float32)
    table = pa.table({"hash": hashes, "vector": fixed_list(matrix, ident.dim)})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    atomic_write(path(index_dir, ident), buf.getvalue())
