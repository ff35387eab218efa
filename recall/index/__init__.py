"""The recall index: DuckDB FTS + LanceDB vectors in generations rebuilt from canonical Markdown.

Layout (AMB-33)::

    <root>/index/CURRENT                 "gen-<n>", switched atomically
    <root>/index/gen-<n>/fts.duckdb      memories table + static FTS index (AMB-32)
    <root>/index/gen-<n>/vectors/        LanceDB dataset (id, vector, content_hash); absent on Lite
    <root>/index/gen-<n>/manifest.json   generation, embedding identity, source digest, rows
    <root>/index/vector-cache/<key>.parquet   sha256(text) → vector, per embedding identity
    <root>/index/.write.lock             writers serialise on this flock
    <root>/index/.gate                   writer-preferring turnstile in front of DuckDB's file lock

Only ``daily/`` is ever indexed; ``audit/`` never is (REC-52, TIER-07). Readers never hold a DuckDB
connection between calls and open read-only, so a worker can upsert while a CLI searches (AMB-34).

Modules: ``schema`` (the on-disk contract), ``vectors`` (LanceDB and the per-process vector snapshot),
``access`` (generations, the gate, connections), ``build`` (vector cache, rebuild, upsert) and ``query``
(search); ``MemoryIndex`` is the class they make together.
"""

from tempomem.recall.index.query import MemoryIndex
from tempomem.recall.index.schema import (
    CURRENT,
    DB_NAME,
    MANIFEST,
    IndexBusyError,
    RebuildReport,
    RebuildShrinkError,
    content_hash,
    fts_extension_path,
)
from tempomem.recall.search import Hit

__all__ = [
    "CURRENT",
    "DB_NAME",
    "MANIFEST",
    "Hit",
    "IndexBusyError",
    "MemoryIndex",
    "RebuildReport",
    "RebuildShrinkError",
    "content_hash",
    "fts_extension_path",
]
