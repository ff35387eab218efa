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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from recall import scoring
from recall.embedding import EmbeddingError, EmbeddingIdentity, EmbeddingProvider
from recall.profiles import RecallProfile, resolve_profile
from recall.search import Candidate, Hit, rank
from storage.fsio import atomic_write, ensure_private_dir, exclusive_lock, read_private_file
from storage.limits import DELIBERATE_SUPERSET, DIR_MODE, FILE_MODE
from storage.markdown import Bullet, iter_bullets

SCHEMA_VERSION = 1
DAILY_FOLDER = "daily"
DB_NAME = "fts.duckdb"
LANCE_DIR = "vectors"
LANCE_TABLE = "vectors"
MANIFEST = "manifest.json"
CURRENT = "CURRENT"
CACHE_DIR = "vector-cache"
LOCK_NAME = ".write.lock"
GATE_NAME = ".gate"
EXCLUDED_STATUSES = frozenset({"dropped"})  # AMB-28: dropped lines are never recallable
BUSY_TIMEOUT_SECONDS = 3.0
_GEN_RE = re.compile(r"^gen-(\d+)$")

_DUCKDB_CONFIG = {
    # Never reach for the network: the FTS extension is loaded from the installed package file.
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}

_COLUMNS = (
    "id",
    "day",
    "text",
    "recorded",
    "type",
    "status",
    "source_session",
    "path",
    "signifier",
    "due",
    "valid_from",
    "valid_to",
    "labels",
    "entities",
    "src",
    "attr",
    "replaceable",
    "insight",
    "content_hash",
    "row_digest",
    "seq",
)
_CREATE_MEMORIES = """
CREATE TABLE memories (
    id VARCHAR PRIMARY KEY, day VARCHAR, text VARCHAR, recorded VARCHAR, type VARCHAR, status VARCHAR,
    source_session VARCHAR, path VARCHAR, signifier VARCHAR, due VARCHAR, valid_from VARCHAR,
    valid_to VARCHAR, labels VARCHAR, entities VARCHAR[], src VARCHAR, attr VARCHAR, replaceable BOOLEAN,
    insight BOOLEAN, content_hash VARCHAR, row_digest VARCHAR, seq BIGINT
)
"""
_ARROW_SCHEMA = pa.schema(
    [
        pa.field(name, pa.list_(pa.string()))
        if name == "entities"
        else pa.field(name, pa.bool_())
        if name in ("replaceable", "insight")
        else pa.field(name, pa.int64())
        if name == "seq"
        else pa.field(name, pa.string())
        for name in _COLUMNS
    ]
)


class IndexBusyError(Exception):
    """The index database stayed locked by another process for longer than the busy timeout."""


class RebuildReport(BaseModel):
    generation: int
    rows: int
    embedded: int  # rows whose vector was computed by this rebuild
    cached: int  # rows whose vector came from the cache or the previous generation
    seconds: float


def fts_extension_path() -> Path:
    """The FTS extension file shipped by ``duckdb-extension-fts`` for this DuckDB version."""
    import duckdb_extension_fts

    base = Path(duckdb_extension_fts.__file__).parent / "extensions"
    exact = base / f"v{duckdb.__version__}" / "fts.duckdb_extension"
    if exact.is_file():
        return exact
    found = sorted(base.glob("v*/fts.duckdb_extension"))
    if not found:
        raise FileNotFoundError(f"no fts.duckdb_extension under {base}")
    return found[-1]


_VERIFIED_EXTENSION: tuple[str, int, int, int, int] | None = None


def _file_identity(path: Path) -> tuple[str, int, int, int, int]:
    st = os.stat(path)
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _extension_state() -> tuple[Path, bool]:
    """The FTS file, and whether DuckDB already verified its signature in this process.

    Why: a signed LOAD re-checks the 11 MB file's signature on every connection (~55 ms here), and we
    may not keep connections open. The first LOAD per process is verified by DuckDB; later connections
    load the very same file (same inode, size and mtime) without re-verifying it.
    """
    path = fts_extension_path()
    return path, _VERIFIED_EXTENSION is not None and _file_identity(path) == _VERIFIED_EXTENSION


def _mark_verified(path: Path) -> None:
    global _VERIFIED_EXTENSION
    _VERIFIED_EXTENSION = _file_identity(path)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sql_str(value: str) -> str:
    """A SQL string literal. Why literals, not ``?`` parameters: DuckDB's Python binding probes for
    optional packages (pandas, polars …) on every string/list parameter, ~10-30 ms per statement here.
    Standard SQL strings have no backslash escapes, so doubling quotes is a complete escape."""
    return "'" + value.replace("'", "''") + "'"


def _sql_in(values: Iterable[str]) -> str:
    items = [_sql_str(v) for v in values]
    return f"({', '.join(items)})" if items else "(NULL)"


def _is_lock_conflict(exc: BaseException) -> bool:
    msg = str(exc)
    return "lock" in msg.lower() or "different configuration" in msg


def _privatise(path: Path) -> None:
    """DuckDB and Lance create files with the process umask: tighten to 0700 dirs / 0600 files."""
    for dirpath, dirnames, filenames in os.walk(path):
        os.chmod(dirpath, DIR_MODE)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, FILE_MODE)
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, DIR_MODE)


def _row(day: str, bullet: Bullet) -> dict[str, Any]:
    fields = asdict(bullet)
    row: dict[str, Any] = {
        "id": bullet.id,
        "day": day,
        "text": bullet.text,
        "recorded": bullet.recorded,
        "type": bullet.type,
        "status": bullet.status,
        "source_session": bullet.source_session,
        "path": f"{DAILY_FOLDER}/{day}.md",
        "signifier": bullet.signifier,
        "due": bullet.due,
        "valid_from": bullet.valid_from,
        "valid_to": bullet.valid_to,
        "labels": bullet.labels,
        "entities": list(bullet.entities),
        "src": bullet.src,
        "attr": bullet.attr,
        "replaceable": bool(bullet.replaceable),
        "insight": bool(bullet.insight),
        "content_hash": content_hash(bullet.text),
    }
    fields["day"] = day
    # Any change of any field (status, validity …) must reach the index on upsert, not only text changes.
    row["row_digest"] = hashlib.sha256(
        json.dumps(fields, sort_keys=True, default=list).encode("utf-8")
    ).hexdigest()
    return row


def _source_digest(pairs: Sequence[tuple[str, str]]) -> str:
    """Digest of the indexed (id, row digest) set: equal digests mean equal indexed content."""
    h = hashlib.sha256()
    for rid, digest in sorted(pairs):
        h.update(f"{rid}\t{digest}\n".encode())
    return h.hexdigest()


class MemoryIndex:
    """Recall index over ``<root>/daily``. ``embedder=None`` is the Lite tier: FTS only, never embeds."""

    def __init__(self, root: Path, embedder: EmbeddingProvider | None) -> None:
        self.root = Path(root)
        self.embedder = embedder
        self.index_dir = self.root / "index"

    # -- generations --------------------------------------------------------------------------------

    @property
    def identity(self) -> EmbeddingIdentity | None:
        return self.embedder.identity if self.embedder is not None else None

    def active_generation(self) -> int | None:
        """The generation named by CURRENT, or None when there is no usable index."""
        try:
            name = (self.index_dir / CURRENT).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        m = _GEN_RE.match(name)
        if not m or not (self.index_dir / name / MANIFEST).is_file():
            return None
        return int(m.group(1))

    def generation_dir(self, generation: int) -> Path:
        return self.index_dir / f"gen-{generation}"

    def manifest(self, generation: int | None = None) -> dict[str, Any] | None:
        gen = self.active_generation() if generation is None else generation
        if gen is None:
            return None
        try:
            return json.loads(read_private_file(self.generation_dir(gen) / MANIFEST))
        except FileNotFoundError:
            return None

    def _identity_matches(self, manifest: dict[str, Any] | None) -> bool:
        if manifest is None:
            return False
        ident = self.identity
        if ident is None:
            return True  # Lite reads only the FTS part of any generation
        return manifest.get("embedding") == ident.as_dict()

    @contextlib.contextmanager
    def _write_lock(self) -> Iterator[None]:
        ensure_private_dir(self.index_dir)
        with exclusive_lock(self.index_dir / LOCK_NAME):
            yield

    # -- DuckDB -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _gate(self, *, exclusive: bool) -> Iterator[None]:
        """Writer-preferring turnstile in front of DuckDB's own file lock.

        Why: DuckDB allows many read-only processes or one writer. A busy reader loop would starve a
        writer forever, so a writer holds ``.gate`` exclusively while it is inside the database and
        readers only pass through it (take it shared and let go at once) before opening read-only.
        """
        ensure_private_dir(self.index_dir)
        fd = os.open(self.index_dir / GATE_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
            delay = 0.002
            while True:
                try:
                    fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise IndexBusyError("the index is being written by another process") from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
            if not exclusive:
                fcntl.flock(fd, fcntl.LOCK_UN)
            yield
        finally:
            os.close(fd)  # releases an exclusive flock

    @contextlib.contextmanager
    def _connect(
        self, db: Path, *, read_only: bool, gate: bool = True
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open, LOAD fts from the package file, yield, close; retry lock conflicts up to ~3 s.

        ``gate=False`` only for a generation nobody else can see yet (a rebuild in progress).
        """
        with self._gate(exclusive=not read_only) if gate else contextlib.nullcontext():
            deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
            delay = 0.005
            while True:
                ext, verified = _extension_state()
                config = {**_DUCKDB_CONFIG, "allow_unsigned_extensions": True} if verified else _DUCKDB_CONFIG
                try:
                    con = duckdb.connect(str(db), read_only=read_only, config=config)
                    break
                except (duckdb.IOException, duckdb.ConnectionException) as exc:
                    if not _is_lock_conflict(exc):
                        raise
                    if time.monotonic() >= deadline:
                        raise IndexBusyError(f"{db} is locked by another process") from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
            try:
                con.execute(f"LOAD {_sql_str(str(ext))}")
                if not verified:
                    _mark_verified(ext)
                yield con
            finally:
                con.close()

    @staticmethod
    def _rebuild_fts(con: duckdb.DuckDBPyConnection) -> None:
        # The FTS index is static (AMB-32): rebuild it in the same write critical section, then move the
        # watermark so readers know every row up to it is covered.
        con.execute(
            "PRAGMA create_fts_index('memories', 'id', 'text', stemmer='porter', stopwords='english', "
            "overwrite=1)"
        )
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('fts_seq', "
            "(SELECT CAST(coalesce(max(seq), 0) AS VARCHAR) FROM memories))"
        )

    # -- vectors ------------------------------------------------------------------------------------

    def _cache_path(self, ident: EmbeddingIdentity) -> Path:
        return self.index_dir / CACHE_DIR / f"{ident.key()}.parquet"

    def _load_cache(self, ident: EmbeddingIdentity) -> dict[str, np.ndarray]:
        cache: dict[str, np.ndarray] = {}
        path = self._cache_path(ident)
        if path.is_file():
            table = pq.read_table(io.BytesIO(read_private_file(path)))
            vectors = _vectors_of(table, ident.dim)
            cache.update(zip(table.column("hash").to_pylist(), vectors, strict=True))
        # The active generation holds vectors added by upsert since the last rebuild: reuse those too.
        manifest = self.manifest()
        if manifest is not None and manifest.get("embedding") == ident.as_dict():
            table = self._lance_table(self.generation_dir(int(manifest["generation"])))
            if table is not None:
                data = table.to_arrow().select(["content_hash", "vector"])
                vectors = _vectors_of(data, ident.dim)
                cache.update(zip(data.column("content_hash").to_pylist(), vectors, strict=True))
        return cache

    def _write_cache(self, ident: EmbeddingIdentity, vectors: dict[str, np.ndarray]) -> None:
        ensure_private_dir(self.index_dir / CACHE_DIR)
        hashes = sorted(vectors)
        matrix = np.stack([vectors[h] for h in hashes]) if hashes else np.zeros((0, ident.dim), np.float32)
        table = pa.table({"hash": hashes, "vector": _fixed_list(matrix, ident.dim)})
        buf = io.BytesIO()
        pq.write_table(table, buf)
        atomic_write(self._cache_path(ident), buf.getvalue())

    @staticmethod
    def _lance_table(gen_dir: Path) -> Any:
        path = gen_dir / LANCE_DIR
        if not path.is_dir():
            return None
        import lancedb

        db = lancedb.connect(str(path))
        try:
            return db.open_table(LANCE_TABLE)
        except (FileNotFoundError, ValueError):
            return None

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        assert self.embedder is not None
        vectors = np.asarray(self.embedder.embed(list(texts)), dtype=np.float32)
        dim = self.embedder.identity.dim
        if vectors.shape != (len(texts), dim):
            raise EmbeddingError(f"embedder returned shape {vectors.shape}, expected ({len(texts)}, {dim})")
        return vectors

    # -- rebuild ------------------------------------------------------------------------------------

    def rebuild(self) -> RebuildReport:
        """Build a complete new generation from ``daily/`` and activate it atomically."""
        with self._write_lock():
            return self._rebuild_locked()

    def _read_source(self) -> list[dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        for day, bullet in iter_bullets(self.root, DAILY_FOLDER):
            rows.pop(bullet.id, None)  # a later occurrence of an id wins (date order)
            rows[bullet.id] = _row(day, bullet)
        return [r for r in rows.values() if r["status"] not in EXCLUDED_STATUSES]

    def _rebuild_locked(self) -> RebuildReport:
        started = time.perf_counter()
        rows = self._read_source() if (self.root / DAILY_FOLDER).is_dir() else []
        for seq, row in enumerate(rows, start=1):
            row["seq"] = seq

        ident = self.identity
        matrix: np.ndarray | None = None
        embedded = cached = 0
        known: dict[str, np.ndarray] = {}
        if ident is not None:
            known = self._load_cache(ident)
            missing = list(dict.fromkeys(r["content_hash"] for r in rows if r["content_hash"] not in known))
            cached = sum(r["content_hash"] in known for r in rows)
            embedded = len(rows) - cached
            if missing:
                text_of = {r["content_hash"]: r["text"] for r in rows}
                fresh = self._embed([text_of[h] for h in missing])
                known.update(zip(missing, fresh, strict=True))
            matrix = (
                np.stack([known[r["content_hash"]] for r in rows])
                if rows
                else np.zeros((0, ident.dim), np.float32)
            )

        existing = [int(m.group(1)) for p in self.index_dir.iterdir() if (m := _GEN_RE.match(p.name))]
        generation = max(existing, default=0) + 1
        gen_dir = self.generation_dir(generation)
        ensure_private_dir(gen_dir)

        with self._connect(gen_dir / DB_NAME, read_only=False, gate=False) as con:
            con.execute(_CREATE_MEMORIES)
            con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            con.execute("INSERT INTO meta VALUES ('fts_seq', '0')")
            if rows:
                arrow_rows = pa.Table.from_pylist(rows, schema=_ARROW_SCHEMA)
                con.register("incoming", arrow_rows)
                con.execute(f"INSERT INTO memories SELECT {', '.join(_COLUMNS)} FROM incoming")
                con.unregister("incoming")
            self._rebuild_fts(con)

        if ident is not None and matrix is not None:
            import lancedb

            db = lancedb.connect(str(gen_dir / LANCE_DIR))
            db.create_table(
                LANCE_TABLE,
                data=_lance_batch(
                    [r["id"] for r in rows], matrix, [r["content_hash"] for r in rows], ident.dim
                ),
            )
            # Keep only vectors of live text so the cache stays bounded by the store size.
            self._write_cache(ident, {r["content_hash"]: known[r["content_hash"]] for r in rows})

        digest = _source_digest([(r["id"], r["row_digest"]) for r in rows])
        self._write_manifest(gen_dir, generation, len(rows), digest, ident.as_dict() if ident else None)
        _privatise(gen_dir)
        atomic_write(self.index_dir / CURRENT, f"gen-{generation}\n".encode())
        # Old generations go only after activation; a reader still inside one retries on the new one.
        for p in self.index_dir.iterdir():
            m = _GEN_RE.match(p.name)
            if m and int(m.group(1)) != generation:
                shutil.rmtree(p, ignore_errors=True)
        return RebuildReport(
            generation=generation,
            rows=len(rows),
            embedded=embedded,
            cached=cached,
            seconds=round(time.perf_counter() - started, 6),
        )

    def _write_manifest(
        self, gen_dir: Path, generation: int, rows: int, digest: str, embedding: dict[str, Any] | None
    ) -> None:
        key = EmbeddingIdentity(**embedding).key() if embedding is not None else None
        manifest = {
            "schema": SCHEMA_VERSION,
            "generation": generation,
            "embedding": embedding,
            "embedding_key": key,
            "source_digest": digest,
            "rows": rows,
            "written_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        atomic_write(gen_dir / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())

    def source_digest(self) -> str:
        """Digest of what a rebuild would index now (compare with the manifest to detect staleness)."""
        rows = self._read_source() if (self.root / DAILY_FOLDER).is_dir() else []
        return _source_digest([(r["id"], r["row_digest"]) for r in rows])

    # -- upsert -------------------------------------------------------------------------------------

    def upsert(self, items: Sequence[tuple[str, Bullet]]) -> int:
        """Add or update lines in the ACTIVE generation so they are searchable at once (REM-02).

        Idempotent by id: returns how many rows were added, changed or removed (0 on a replay). A line
        whose status became ``dropped`` is removed. If embedding fails the rows stay searchable
        lexically (REC-32) and ``EmbeddingError`` is raised; the next rebuild fills the vectors.
        """
        with self._write_lock():
            generation = self.active_generation()
            if generation is None or not self._identity_matches(self.manifest(generation)):
                self._rebuild_locked()  # the Markdown is canonical: the rebuild may already hold items
                generation = self.active_generation()
                assert generation is not None
            return self._upsert_locked(generation, items)

    def _upsert_locked(self, generation: int, items: Sequence[tuple[str, Bullet]]) -> int:
        incoming: dict[str, dict[str, Any]] = {}
        for day, bullet in items:
            incoming.pop(bullet.id, None)
            incoming[bullet.id] = _row(day, bullet)
        if not incoming:
            return 0
        gen_dir = self.generation_dir(generation)
        ident = self.identity
        with self._connect(gen_dir / DB_NAME, read_only=False) as con:
            stored = {
                rid: (digest, chash)
                for rid, digest, chash in con.execute(
                    f"SELECT id, row_digest, content_hash FROM memories WHERE id IN {_sql_in(incoming)}"
                ).fetchall()
            }
            removed = [
                rid for rid, r in incoming.items() if r["status"] in EXCLUDED_STATUSES and rid in stored
            ]
            changed = [
                r
                for rid, r in incoming.items()
                if r["status"] not in EXCLUDED_STATUSES and stored.get(rid, ("", ""))[0] != r["row_digest"]
            ]
            (max_seq,) = con.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()  # type: ignore[misc]
            for offset, row in enumerate(changed, start=1):
                row["seq"] = max_seq + offset
            if changed or removed:
                con.execute("BEGIN")
                con.execute(
                    f"DELETE FROM memories WHERE id IN {_sql_in(removed + [r['id'] for r in changed])}"
                )
                if changed:
                    con.register("incoming", pa.Table.from_pylist(changed, schema=_ARROW_SCHEMA))
                    con.execute(f"INSERT INTO memories SELECT {', '.join(_COLUMNS)} FROM incoming")
                    con.unregister("incoming")
                con.execute("COMMIT")
                self._rebuild_fts(con)
            pairs = con.execute("SELECT id, row_digest FROM memories").fetchall()
        new_text = {r["id"] for r in changed if stored.get(r["id"], ("", ""))[1] != r["content_hash"]}

        manifest = self.manifest(generation) or {}
        healed = 0
        try:
            if ident is not None and manifest.get("embedding") == ident.as_dict():
                table = self._lance_table(gen_dir)
                if table is not None:
                    healed = self._upsert_vectors(table, incoming, removed, new_text, ident.dim)
        finally:
            # Keep the generation's own identity: a Lite caller may upsert into a hybrid generation.
            if changed or removed:
                self._write_manifest(
                    gen_dir, generation, len(pairs), _source_digest(pairs), manifest.get("embedding")
                )
                _privatise(gen_dir)
        return len(removed) + len(changed) + healed

    def _upsert_vectors(
        self,
        table: Any,
        incoming: dict[str, dict[str, Any]],
        removed: list[str],
        new_text: set[str],
        dim: int,
    ) -> int:
        """Replace vectors of changed text, drop removed ones, and fill any still missing (after an
        embedding outage) so a replayed upsert heals the index. Returns the count of healed rows."""
        live = [rid for rid, r in incoming.items() if r["status"] not in EXCLUDED_STATUSES]
        present = set()
        if live:
            res = table.search().where(_id_filter(live)).select(["id"]).limit(len(live)).to_arrow()
            present = set(res.column("id").to_pylist())
        healed = [rid for rid in live if rid not in present and rid not in new_text]
        stale = removed + sorted(new_text & present)
        if stale:
            table.delete(_id_filter(stale))
        to_embed = [incoming[rid] for rid in live if rid in new_text or rid in healed]
        if to_embed:
            vectors = self._embed([r["text"] for r in to_embed])  # EmbeddingError propagates
            batch = _lance_batch(
                [r["id"] for r in to_embed], vectors, [r["content_hash"] for r in to_embed], dim
            )
            table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(batch)
        return len(healed)

    # -- search -------------------------------------------------------------------------------------

    def search(
        self, query: str, *, limit: int = 8, profile: RecallProfile | str | None = None
    ) -> list[Hit]:
        """Hybrid (embedding-first) or, on Lite / embedding outage, lexical recall over the index.

        ``profile`` (a ``RecallProfile`` or its name) only orders the candidate pool; ``None`` is
        ``recall.profiles.DEFAULT_PROFILE`` for the embedder it was calibrated with, else the reference.
        """
        chosen = resolve_profile(profile, self.identity)
        candidates, hybrid = self.candidates(query, pool=max(chosen.pool, limit))
        return rank(query, candidates, limit=limit, profile=chosen, hybrid=hybrid)

    def candidates(self, query: str, *, pool: int = DELIBERATE_SUPERSET) -> tuple[list[Candidate], bool]:
        """The candidate pool of a search (BM25 top-``pool`` ∪ vector top-``pool`` ∪ rows newer than the
        FTS watermark), each with its BM25 rank/score and stored-vector cosine; and whether it is a
        hybrid pool (False on Lite or an embedding outage)."""
        if not query.strip() or pool <= 0:
            return [], False
        for _attempt in range(3):
            generation = self.active_generation()
            if generation is None or not self._identity_matches(self.manifest(generation)):
                if not (self.root / DAILY_FOLDER).is_dir() and generation is None:
                    return [], False  # empty store
                with self._write_lock():
                    generation = self.active_generation()
                    if generation is None or not self._identity_matches(self.manifest(generation)):
                        self._rebuild_locked()
                        generation = self.active_generation()
                assert generation is not None
            try:
                return self._gather(generation, query, pool)
            except (OSError, duckdb.Error, RuntimeError, ValueError):
                # A rebuild activated a new generation and removed ours mid-read: retry on the new one.
                if self.active_generation() == generation and self.generation_dir(generation).is_dir():
                    raise
        raise IndexBusyError("the index kept changing generations during search")

    def _embed_query(self, query: str) -> np.ndarray:
        """Embedders with asymmetric prompts (e5: "query: " vs "passage: ") offer ``embed_query``."""
        assert self.embedder is not None
        embed_query = getattr(self.embedder, "embed_query", None)
        if embed_query is None:
            return self._embed([query])[0]
        vector = np.asarray(embed_query(query), dtype=np.float32).reshape(-1)
        if vector.shape != (self.embedder.identity.dim,):
            raise EmbeddingError(f"embedder returned query shape {vector.shape}")
        return vector

    def _gather(self, generation: int, query: str, pool: int) -> tuple[list[Candidate], bool]:
        gen_dir = self.generation_dir(generation)
        query_vec: np.ndarray | None = None
        if self.embedder is not None:
            try:
                query_vec = self._embed_query(query)
            except EmbeddingError:
                query_vec = None  # temporary outage: degrade to lexical evidence (REC-32)

        # Vector retriever first (LanceDB readers never block writers).
        vec_hits: dict[str, tuple[int, float]] = {}
        stored_vectors: dict[str, np.ndarray] = {}
        table = self._lance_table(gen_dir) if query_vec is not None else None
        if query_vec is not None and table is not None:
            res = (
                table.search(query_vec, vector_column_name="vector")
                .distance_type("dot")
                .limit(pool)
                .select(["id", "vector", "_distance"])
                .to_arrow()
            )
            ids = res.column("id").to_pylist()
            vecs = _vectors_of(res, query_vec.shape[0])
            cos = vecs @ query_vec if len(ids) else np.zeros(0, np.float32)
            order = sorted(range(len(ids)), key=lambda i: (-float(cos[i]), ids[i]))
            for rank, i in enumerate(order, start=1):
                vec_hits[ids[i]] = (rank, float(cos[i]))
                stored_vectors[ids[i]] = vecs[i]

        query_words = scoring.word_tokens(query)
        with self._connect(gen_dir / DB_NAME, read_only=True) as con:
            bm25: list[tuple[str, float]] = []
            try:
                bm25 = con.execute(
                    "SELECT id, score FROM (SELECT id, fts_main_memories.match_bm25(id, "
                    f"{_sql_str(query.replace(chr(0), ' '))}) AS score FROM memories) "
                    f"WHERE score IS NOT NULL ORDER BY score DESC, id LIMIT {int(pool)}"
                ).fetchall()
                watermark = int(con.execute("SELECT value FROM meta WHERE key = 'fts_seq'").fetchone()[0])  # type: ignore[index]
            except duckdb.CatalogException:
                watermark = 0  # FTS index never built (crash mid-write): scan everything lexically
            wanted = list(dict.fromkeys([i for i, _ in bm25] + list(vec_hits)))
            rows = con.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM memories WHERE id IN {_sql_in(wanted)} "
                f"OR seq > {int(watermark)}"
            ).fetchall()
        records = {r[0]: dict(zip(_COLUMNS, r, strict=True)) for r in rows}

        bm25_rank = {rid: (rank, score) for rank, (rid, score) in enumerate(bm25, start=1)}
        candidates: list[Candidate] = []
        for rid, row in records.items():
            in_pool = rid in bm25_rank or rid in vec_hits
            c = Candidate(
                id=rid,
                text=str(row["text"]),
                row=row,
                entities=tuple(row["entities"] or ()),
                bm25_rank=bm25_rank[rid][0] if rid in bm25_rank else None,
                bm25_score=bm25_rank[rid][1] if rid in bm25_rank else None,
                vector_rank=vec_hits[rid][0] if rid in vec_hits else None,
                cosine=vec_hits[rid][1] if rid in vec_hits else None,
            )
            # A row newer than the FTS watermark is a candidate only on lexical evidence (AMB-32).
            if not in_pool and scoring.lexical_overlap(query_words, _record_words(c)) <= 0:
                continue
            candidates.append(c)

        if query_vec is None or table is None:
            return candidates, False

        # Every candidate is scored by its STORED vector (REC-24): fetch those BM25 found but the
        # vector retriever did not return.
        missing = [c.id for c in candidates if c.id not in stored_vectors]
        if missing:
            res = (
                table.search()
                .where(_id_filter(missing))
                .select(["id", "vector"])
                .limit(len(missing))
                .to_arrow()
            )
            vecs = _vectors_of(res, query_vec.shape[0])
            for rid, vec in zip(res.column("id").to_pylist(), vecs, strict=True):
                stored_vectors[rid] = vec
        for c in candidates:
            if c.cosine is None and c.id in stored_vectors:
                c.cosine = float(stored_vectors[c.id] @ query_vec)
        return candidates, True


def _id_filter(ids: Sequence[str]) -> str:
    return f"id IN ({', '.join(_sql_str(i) for i in ids)})"


def _record_words(c: Candidate) -> frozenset[str]:
    c.terms = c.terms or scoring.record_terms(c.text, c.entities)
    return c.terms.words


def _fixed_list(matrix: np.ndarray, dim: int) -> pa.FixedSizeListArray:
    flat = pa.array(np.ascontiguousarray(matrix, dtype=np.float32).reshape(-1), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, dim)


def _lance_batch(ids: Sequence[str], matrix: np.ndarray, hashes: Sequence[str], dim: int) -> pa.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("content_hash", pa.string()),
        ]
    )
    return pa.table(
        {"id": list(ids), "vector": _fixed_list(matrix, dim), "content_hash": list(hashes)}, schema=schema
    )


def _vectors_of(table: pa.Table, dim: int) -> np.ndarray:
    column = table.column("vector").combine_chunks()
    if len(column) == 0:
        return np.zeros((0, dim), np.float32)
    values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return values.reshape(len(column), dim)
