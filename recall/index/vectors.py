"""Vectors in LanceDB and the per-process snapshot of a generation's vector table: what a search
reads without reopening the dataset while its version is unchanged, and the known database states."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from tempomem.recall import connections, scoring
from tempomem.recall.index.schema import LANCE_DIR, LANCE_TABLE, sql_str
from tempomem.recall.search import Candidate


class VectorSnapshot:
    """All (id, vector) rows of one LanceDB table version: the loaded matrix plus rows this process's
    own upserts appended, with the rows they replaced or removed marked ``dead``."""

    def __init__(
        self,
        version: tuple[int, ...],
        ids: list[str],
        base: np.ndarray,
        tail: np.ndarray | None = None,
        n_tail: int = 0,
        row_of: dict[str, int] | None = None,
        dead: frozenset[int] = frozenset(),
    ) -> None:
        self.version = version
        self.ids = ids
        # Rows [0, len(base)) live in ``base`` (as loaded, possibly read-only Arrow memory, never copied:
        # 150 MB at 100k rows); rows appended by this process's upserts follow in ``tail``.
        self.base = base
        self.tail = tail if tail is not None else np.zeros((0, base.shape[1]), np.float32)
        self.n_tail = n_tail
        self.n = len(base) + n_tail
        self.row_of = row_of if row_of is not None else {rid: i for i, rid in enumerate(ids)}
        self.dead = dead

    @classmethod
    def load(cls, version: tuple[int, ...], ids: list[str], matrix: np.ndarray) -> VectorSnapshot:
        return cls(version, ids, np.ascontiguousarray(matrix, dtype=np.float32))

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        n_base = len(self.base)
        if not self.n_tail or (len(rows) and int(rows.max()) < n_base):
            return self.base[rows]
        out = np.empty((len(rows), self.base.shape[1]), np.float32)
        in_base = rows < n_base
        out[in_base] = self.base[rows[in_base]]
        out[~in_base] = self.tail[rows[~in_base] - n_base]
        return out

    def top(self, query_vec: np.ndarray, k: int) -> np.ndarray:
        k = min(k, self.n - len(self.dead))
        if k <= 0:
            return np.zeros(0, np.int64)
        if k == self.n:
            return np.arange(self.n)
        scores = self.base @ query_vec
        if self.n_tail:
            scores = np.concatenate([scores, self.tail[: self.n_tail] @ query_vec])
        if self.dead:
            scores[np.fromiter(self.dead, np.int64)] = -np.inf
        return np.argpartition(-scores, k - 1)[:k]

    def patched(
        self, version: tuple[int, ...], dropped: set[str], ids: list[str], vectors: np.ndarray
    ) -> VectorSnapshot:
        """Shares ``base`` and the ``tail`` buffer (each snapshot reads only its own ``n_tail`` rows), so
        this process's upsert costs O(changed rows) plus the id maps, never a copy of the matrix."""
        dead = set(self.dead)
        row_of = dict(self.row_of)
        for rid in dropped:
            row = row_of.pop(rid, None)
            if row is not None:
                dead.add(row)
        n_tail = self.n_tail + len(ids)
        tail = self.tail
        if n_tail > len(tail):
            tail = np.empty((max(n_tail, 2 * len(tail) + 64), self.base.shape[1]), np.float32)
            tail[: self.n_tail] = self.tail[: self.n_tail]
        tail[self.n_tail : n_tail] = vectors
        for offset, rid in enumerate(ids):
            row_of[rid] = self.n + offset
        return VectorSnapshot(version, self.ids + ids, self.base, tail, n_tail, row_of, frozenset(dead))


VECTOR_SNAPSHOTS: dict[str, VectorSnapshot] = {}  # generation dir → latest snapshot seen here


VECTOR_LOCK = threading.Lock()


# Generation dir → (manifest hint, table version seen under it): see ``hinted_version``.
VECTOR_HINTS: dict[str, tuple[tuple[object, ...], tuple[int, ...]]] = {}


READ_TABLES: dict[str, tuple[tuple[int, int], Any]] = {}  # generation dir → (dataset folder id, table)


def read_table(gen_dir: Path) -> Any:
    """The generation's LanceDB table for searches, opened once per process (1-3 ms an open) with
    strict read consistency, so every read still sees the latest version any process committed."""
    try:
        st = os.stat(gen_dir / LANCE_DIR)
    except FileNotFoundError:
        return None
    ident = (st.st_ino, st.st_mtime_ns)
    key = str(gen_dir)
    with VECTOR_LOCK:
        cached = READ_TABLES.get(key)
    if cached is not None and cached[0] == ident:
        return cached[1]
    import lancedb

    try:
        table = lancedb.connect(str(gen_dir / LANCE_DIR), read_consistency_interval=timedelta(0)).open_table(
            LANCE_TABLE
        )
    except (FileNotFoundError, ValueError):
        return None
    with VECTOR_LOCK:
        for other in [k for k in READ_TABLES if Path(k).parent == gen_dir.parent and k != key]:
            del READ_TABLES[other]  # one generation per index folder
        READ_TABLES[key] = (ident, table)
    return table


def table_version(table: Any) -> int | None:
    """The table's version, or None without a table or when LanceDB cannot say (never masks the error
    that is already on its way out of an upsert)."""
    if table is None:
        return None
    try:
        return int(table.version)
    except Exception:  # LanceDB raises several types; the caller only leaves a manifest field out
        return None


def vector_version(gen_dir: Path, table: Any) -> tuple[int, ...]:
    # The version alone could repeat if the index folder is deleted and gen-<n> rebuilt: add the
    # identity of the dataset folder, which is created anew with every generation. Not its ctime:
    # ``privatise`` chmods the folder after every upsert, which would look like another writer.
    st = os.stat(gen_dir / LANCE_DIR)
    return (int(table.version), st.st_ino, st.st_mtime_ns)


def patch_vector_snapshot(
    gen_dir: Path,
    before: tuple[int, ...],
    after: tuple[int, ...],
    dropped: set[str],
    ids: list[str],
    vectors: np.ndarray,
) -> None:
    """After this process's own upsert (under the write lock): move a snapshot of version ``before``
    to ``after`` in memory instead of re-reading the whole table on the next search."""
    key = str(gen_dir)
    fresh = np.asarray(vectors, dtype=np.float32)
    with VECTOR_LOCK:
        snap = VECTOR_SNAPSHOTS.get(key)
        if snap is None or snap.version != before or fresh.shape != (len(ids), snap.base.shape[1]):
            VECTOR_SNAPSHOTS.pop(key, None)
            return
        VECTOR_SNAPSHOTS[key] = snap.patched(after, dropped, ids, fresh)


HINT_KEYS = ("generation", "written_at", "source_digest", "rows", "vectors_version")


def vector_hint(manifest: dict[str, Any] | None) -> tuple[object, ...] | None:
    """What names the vector table's state in the manifest: every writer rewrites it after changing the
    table (``written_at`` and the digest change, and an upsert records ``vectors_version``)."""
    if not manifest or "written_at" not in manifest:
        return None
    return tuple(manifest.get(k) for k in HINT_KEYS)


def remember_vector_hint(gen_dir: Path, manifest: dict[str, Any], version: tuple[int, ...]) -> None:
    hint = vector_hint(manifest)
    if hint is not None:
        with VECTOR_LOCK:
            VECTOR_HINTS[str(gen_dir)] = (hint, version)


def forget_vector_hint(gen_dir: Path) -> None:
    with VECTOR_LOCK:
        VECTOR_HINTS.pop(str(gen_dir), None)


def hinted_version(gen_dir: Path, table: Any, manifest: dict[str, Any] | None) -> tuple[int, ...]:
    """The table's version as last seen under this manifest, else asked of LanceDB (~0.6 ms through its
    event loop). Sound because the manifest was read before the table: a table change the manifest does
    not show yet was made by a write still in flight, which rewrites the manifest when it is done."""
    hint = vector_hint(manifest)
    if hint is not None:
        with VECTOR_LOCK:
            seen = VECTOR_HINTS.get(str(gen_dir))
        if seen is not None and seen[0] == hint:
            return seen[1]
    version = vector_version(gen_dir, table)
    if hint is not None:
        with VECTOR_LOCK:
            for other in [k for k in VECTOR_HINTS if Path(k).parent == gen_dir.parent and k != str(gen_dir)]:
                del VECTOR_HINTS[other]
            VECTOR_HINTS[str(gen_dir)] = (hint, version)
    return version


def vector_snapshot(
    gen_dir: Path, table: Any, dim: int, manifest: dict[str, Any] | None = None
) -> VectorSnapshot:
    key = str(gen_dir)
    version = hinted_version(gen_dir, table, manifest)
    with VECTOR_LOCK:
        snap = VECTOR_SNAPSHOTS.get(key)
        if snap is not None and snap.version == version:
            return snap
    data = table.to_arrow().select(["id", "vector"])
    snap = VectorSnapshot.load(version, data.column("id").to_pylist(), vectors_of(data, dim))
    with VECTOR_LOCK:
        # Keep one snapshot per index root: a newer generation replaces the older one.
        for other in [k for k in VECTOR_SNAPSHOTS if Path(k).parent == gen_dir.parent and k != key]:
            del VECTOR_SNAPSHOTS[other]
        VECTOR_SNAPSHOTS[key] = snap
    return snap


# Database path → (file identity, ``meta``) as last read here: while the identity is unchanged the state
# is, so a search needs no connection to learn it (``MemoryIndex._lexical``).
STATES: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}


STATES_LOCK = threading.Lock()


def remember_state(db: Path, file_identity: tuple[int, ...] | None, meta: dict[str, str]) -> None:
    if file_identity is None or "source_digest" not in meta:
        return
    with STATES_LOCK:
        folder = db.parent.parent
        for other in [k for k in STATES if Path(k).parent.parent == folder and k != str(db)]:
            del STATES[other]  # one generation per index folder
        STATES[str(db)] = (file_identity, dict(meta))


def known_state_of(db: Path) -> tuple[tuple[object, ...], dict[str, str]] | None:
    """The state key and ``meta`` of ``db`` if its file has not moved since they were read here."""
    with STATES_LOCK:
        seen = STATES.get(str(db))
    if seen is None:
        return None
    file_identity = connections.identity(db)
    if file_identity != seen[0]:
        return None
    return state_key(file_identity, seen[1]), seen[1]


def meta_of(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT key, value FROM meta").fetchall())


def state_key(file_identity: tuple[int, ...] | None, meta: dict[str, str]) -> tuple[object, ...]:
    """Names one state of the FTS tables: every writer changes the digest (and the file) in the
    transaction that changes them."""
    return (file_identity, int(meta.get("fts_seq") or 0), meta.get("rows"), meta["source_digest"])


def id_filter(ids: Sequence[str]) -> str:
    return f"id IN ({', '.join(sql_str(i) for i in ids)})"


def record_words(c: Candidate) -> frozenset[str]:
    c.terms = c.terms or scoring.record_terms(c.text, c.entities)
    return c.terms.words


def fixed_list(matrix: np.ndarray, dim: int) -> pa.FixedSizeListArray:
    flat = pa.array(np.ascontiguousarray(matrix, dtype=np.float32).reshape(-1), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, dim)


def lance_batch(ids: Sequence[str], matrix: np.ndarray, hashes: Sequence[str], dim: int) -> pa.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("content_hash", pa.string()),
        ]
    )
    return pa.table(
        {"id": list(ids), "vector": fixed_list(matrix, dim), "content_hash": list(hashes)}, schema=schema
    )


def vectors_of(table: pa.Table, dim: int) -> np.ndarray:
    column = table.column("vector").combine_chunks()
    if len(column) == 0:
        return np.zeros((0, dim), np.float32)
    values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return values.reshape(len(column), dim)
