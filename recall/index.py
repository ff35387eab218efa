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
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from tempomem.recall import connections, fts, row_snapshot, scoring
from tempomem.recall.embedding import EmbeddingError, EmbeddingIdentity, EmbeddingProvider
from tempomem.recall.profiles import RecallProfile, resolve_profile
from tempomem.recall.search import Candidate, Hit, rank
from tempomem.storage.fsio import atomic_write, ensure_private_dir, exclusive_lock, read_private_file
from tempomem.storage.limits import DELIBERATE_SUPERSET, DIR_MODE, FILE_MODE
from tempomem.storage.markdown import Bullet, damaged_bullets, iter_bullets

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
# How long a writer lets announced waiters in before it takes the gate again (connections.let_waiters_in).
WRITER_YIELD_SECONDS = 1.0
WAL_CHECKPOINT_BYTES = 2 * 1024 * 1024
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
    damaged: list[str] = []  # "daily/<day>.md:<line>" of bullets whose metadata does not parse (kept)


class RebuildShrinkError(Exception):
    """A rebuild would drop most memories of the active index; nothing was changed."""


SHRINK_GUARD_MIN_ROWS = 8  # below this, a big relative drop is ordinary editing


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
    """A quoted literal for values this code owns (the extension path, hex digests, and the id filter
    LanceDB takes as text, which has no parameters). Text from memory always goes as a ``?`` parameter."""
    if any(ord(ch) < 32 for ch in value):
        raise ValueError("control character in a SQL literal")
    return "'" + value.replace("'", "''") + "'"


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


_FLAT = (str, int, float, bool, type(None))


def _fields_of(bullet: Bullet) -> dict[str, Any]:
    """``asdict(bullet)`` without its recursive deep copy (~50 µs a line, seconds per 100k rebuild):
    equal to it whenever every field is a scalar or a tuple of scalars, as Bullet's are."""
    out = {f.name: getattr(bullet, f.name) for f in dataclass_fields(bullet)}
    for value in out.values():
        if not isinstance(value, _FLAT) and not (
            isinstance(value, tuple) and all(isinstance(v, _FLAT) for v in value)
        ):
            return asdict(bullet)
    return out


def _row(day: str, bullet: Bullet) -> dict[str, Any]:
    fields = _fields_of(bullet)
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


_DIGEST_MOD = 1 << 256


def _pair_hash(rid: str, digest: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{rid}\t{digest}\n".encode()).digest(), "big")


def _digest_hex(total: int) -> str:
    return f"{total % _DIGEST_MOD:064x}"


def _source_digest(pairs: Iterable[tuple[str, str]]) -> str:
    """Digest of the indexed (id, row digest) set: equal digests mean equal indexed content.

    A sum of per-row hashes mod 2^256, so an upsert updates it from the rows it changes instead of
    re-reading the whole table (kept in ``meta`` in the same transaction as the rows)."""
    return _digest_hex(sum(_pair_hash(rid, digest) for rid, digest in pairs))


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
    def _gate(
        self, *, exclusive: bool, announcement: connections.Announcement | None = None
    ) -> Iterator[bool]:
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
            waited = False
            while True:
                try:
                    fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waited:
                        # Someone writes or waits to: let go of our cached read-only connections, which
                        # would otherwise hold DuckDB's file lock against that writer.
                        connections.drop(self.index_dir)
                        if announcement is not None:
                            announcement.announce()  # a writer in a loop lets us in (let_waiters_in)
                    waited = True
                    if time.monotonic() >= deadline:
                        raise IndexBusyError("the index is being written by another process") from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
            if not exclusive:
                fcntl.flock(fd, fcntl.LOCK_UN)
            yield not waited
        finally:
            os.close(fd)  # releases an exclusive flock

    @contextlib.contextmanager
    def _connect(
        self, db: Path, *, read_only: bool, gate: bool = True
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open, LOAD fts from the package file, yield, close; retry lock conflicts up to ~3 s.

        ``gate=False`` only for a generation nobody else can see yet (a rebuild in progress). A write
        leaves its connection open as this process's anchor (``connections``): while it lives, reads and
        writes here attach to the open database instead of opening the file again.
        """
        want = self.index_dir / connections.WANT_NAME
        if not read_only:
            # DuckDB: one configuration per file and process, so cached read-only handles must go.
            connections.drop(self.index_dir, anchors=False)
            if gate:
                connections.let_waiters_in(want, WRITER_YIELD_SECONDS)
        announcement = connections.Announcement(want)
        with (
            announcement,
            self._gate(exclusive=not read_only, announcement=announcement if read_only else None)
            if gate
            else contextlib.nullcontext(False) as passed,
        ):
            config = connections.anchored(db) if gate and passed else None
            if config is not None:
                yield from self._attached(db, config)
                return
            cacheable = read_only and gate
            cached = connections.acquire(db) if cacheable and passed else None
            if cached is not None:
                try:
                    yield cached
                finally:
                    connections.release(db, cached)
                return
            ext, verified = _extension_state()
            config = {**_DUCKDB_CONFIG, "allow_unsigned_extensions": True} if verified else _DUCKDB_CONFIG
            con = self._open(db, read_only=read_only, config=config, announcement=announcement)
            try:
                con.execute(f"LOAD {_sql_str(str(ext))}")
                if not verified:
                    _mark_verified(ext)
                if gate and not read_only:
                    # Small writes stay in the WAL instead of checkpointing the whole FTS index on every
                    # close (~0.5 s at 100k rows); DuckDB checkpoints once the WAL outgrows the threshold.
                    # Both are instance-wide, so connections attached to the anchor inherit them.
                    con.execute("PRAGMA disable_checkpoint_on_shutdown")
                    con.execute(f"SET checkpoint_threshold = '{WAL_CHECKPOINT_BYTES}B'")
                yield con
            except BaseException:
                con.close()
                raise
            if cacheable:
                connections.release(db, con)  # kept open for the next call, or closed
            elif gate and not read_only:
                connections.keep_anchor(db, con, config, self.index_dir / connections.WANT_NAME)
            else:
                con.close()

    def _attached(self, db: Path, config: dict[str, Any]) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the database this process's anchor keeps open (no file open, no WAL replay)."""
        con = self._open(db, read_only=False, config=config)
        try:
            yield con
        finally:
            con.close()

    def _open(
        self,
        db: Path,
        *,
        read_only: bool,
        config: dict[str, Any],
        announcement: connections.Announcement | None = None,
    ) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        delay = 0.005
        with connections.Announcement(self.index_dir / connections.WANT_NAME) as own:
            waiting = announcement or own
            while True:
                try:
                    con = duckdb.connect(str(db), read_only=read_only, config=config)
                    waiting.withdraw()  # in: stop asking others to let go
                    return con
                except (duckdb.IOException, duckdb.ConnectionException) as exc:
                    if not _is_lock_conflict(exc):
                        raise
                    if time.monotonic() >= deadline:
                        raise IndexBusyError(f"{db} is locked by another process") from exc
                    # Tell a process that keeps the file open as its anchor to let go of it.
                    waiting.announce()
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)

    @staticmethod
    def _rebuild_fts(con: duckdb.DuckDBPyConnection) -> None:
        # The FTS index is static (AMB-32): rebuild it in the same write critical section, then move the
        # watermark so readers know every row up to it is covered.
        con.execute(
            "PRAGMA create_fts_index('memories', 'id', 'text', stemmer='porter', stopwords='english', "
            "overwrite=1)"
        )
        MemoryIndex._move_watermark(con)

    @staticmethod
    def _stored_digest(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
        """(rows, digest sum) of ``memories`` as kept in ``meta``; computed once for older databases."""
        kept = dict(
            con.execute("SELECT key, value FROM meta WHERE key IN ('rows', 'source_digest')").fetchall()
        )
        if "rows" in kept and "source_digest" in kept:
            return int(kept["rows"]), int(kept["source_digest"], 16)
        pairs = con.execute("SELECT id, row_digest FROM memories").fetchall()
        return len(pairs), sum(_pair_hash(rid, digest) for rid, digest in pairs)

    @staticmethod
    def _store_digest(
        con: duckdb.DuckDBPyConnection, rows: int, digest: str, *, watermark: bool = False
    ) -> None:
        """Keep (rows, digest) in ``meta``; ``watermark`` also moves ``fts_seq`` in the same statement."""
        values = [f"('rows', '{int(rows)}')", f"('source_digest', {_sql_str(digest)})"]
        if watermark:
            values.append("('fts_seq', (SELECT CAST(coalesce(max(seq), 0) AS VARCHAR) FROM memories))")
        con.execute(f"INSERT OR REPLACE INTO meta VALUES {', '.join(values)}")

    @staticmethod
    def _move_watermark(con: duckdb.DuckDBPyConnection) -> None:
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

    def rebuild(self, *, force: bool = False) -> RebuildReport:
        """Build a complete new generation from ``daily/`` and activate it atomically.

        Refuses (``RebuildShrinkError``, nothing changed) when the new generation would hold fewer than
        half the memories of the active one, unless ``force``: a hand-edited or half-restored ``daily/``
        must not silently replace a working index.
        """
        with self._write_lock():
            if not force:
                self._refuse_shrink()
            report = self._rebuild_locked()
        return report.model_copy(update={"damaged": damaged_bullets(self.root, DAILY_FOLDER)})

    def _refuse_shrink(self) -> None:
        active = self.active_generation()
        manifest = self.manifest(active) if active is not None else None
        before = int((manifest or {}).get("rows") or 0)
        if before < SHRINK_GUARD_MIN_ROWS:
            return
        after = len(self._read_source()) if (self.root / DAILY_FOLDER).is_dir() else 0
        if after * 2 < before:
            damaged = damaged_bullets(self.root, DAILY_FOLDER)
            raise RebuildShrinkError(
                f"rebuild would keep {after} of the active index's {before} memories "
                f"({len(damaged)} damaged bullet(s) in daily/); fix the Markdown or force the rebuild"
            )

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
        reused = self._copy_active_if_current(rows)
        if reused is not None:
            return RebuildReport(
                generation=reused,
                rows=len(rows),
                embedded=0,
                cached=len(rows) if ident is not None else 0,
                seconds=round(time.perf_counter() - started, 6),
            )
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

        generation = self._next_generation()
        gen_dir = self.generation_dir(generation)
        ensure_private_dir(gen_dir)

        with self._connect(gen_dir / DB_NAME, read_only=False, gate=False) as con:
            con.execute(_CREATE_MEMORIES)
            con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            con.execute("INSERT INTO meta VALUES ('fts_seq', '0')")
            self._store_digest(con, len(rows), _source_digest((r["id"], r["row_digest"]) for r in rows))
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
        self._activate(generation)
        return RebuildReport(
            generation=generation,
            rows=len(rows),
            embedded=embedded,
            cached=cached,
            seconds=round(time.perf_counter() - started, 6),
        )

    def _next_generation(self) -> int:
        existing = [int(m.group(1)) for p in self.index_dir.iterdir() if (m := _GEN_RE.match(p.name))]
        return max(existing, default=0) + 1

    def _activate(self, generation: int) -> None:
        atomic_write(self.index_dir / CURRENT, f"gen-{generation}\n".encode())
        connections.drop(self.index_dir)
        # Old generations go only after activation; a reader still inside one retries on the new one.
        for p in self.index_dir.iterdir():
            m = _GEN_RE.match(p.name)
            if m and int(m.group(1)) != generation:
                shutil.rmtree(p, ignore_errors=True)

    def _copy_active_if_current(self, rows: list[dict[str, Any]]) -> int | None:
        """Second-rebuild fast path: when the active generation already holds exactly ``rows`` — same
        source digest in its manifest and in its database (written with the rows), the same seq order a
        fresh build assigns, a complete FTS index and, for an embedder, one vector per row of this
        identity — copy its files as the new generation instead of rebuilding (caller holds the lock)."""
        manifest = self.manifest()
        ident = self.identity
        if manifest is None or manifest.get("embedding") != (ident.as_dict() if ident is not None else None):
            return None
        digest = _source_digest((r["id"], r["row_digest"]) for r in rows)
        if manifest.get("source_digest") != digest:
            return None
        old = self.generation_dir(int(manifest["generation"]))
        try:
            with self._connect(old / DB_NAME, read_only=True) as con:
                meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
                if meta.get("source_digest") != digest or meta.get("fts_seq") != str(len(rows)):
                    return None
                if not fts.has_index(con):
                    return None
                seqs = dict(con.execute("SELECT id, seq FROM memories").fetchall())
        except (OSError, duckdb.Error):
            return None
        if seqs != {r["id"]: r["seq"] for r in rows}:
            return None
        if ident is not None:
            table = self._lance_table(old)
            if table is None or table.count_rows() != len(rows):
                return None
        generation = self._next_generation()
        gen_dir = self.generation_dir(generation)
        try:
            # No writer can be inside ``old``: they all hold the write lock, as our caller does.
            shutil.copytree(old, gen_dir, ignore=shutil.ignore_patterns(MANIFEST))
        except OSError:
            shutil.rmtree(gen_dir, ignore_errors=True)
            return None
        self._write_manifest(gen_dir, generation, len(rows), digest, manifest.get("embedding"))
        _privatise(gen_dir)
        self._activate(generation)
        return generation

    def _write_manifest(
        self,
        gen_dir: Path,
        generation: int,
        rows: int,
        digest: str,
        embedding: dict[str, Any] | None,
        vectors_version: int | None = None,
    ) -> dict[str, Any]:
        key = EmbeddingIdentity(**embedding).key() if embedding is not None else None
        manifest: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "generation": generation,
            "embedding": embedding,
            "embedding_key": key,
            "source_digest": digest,
            "rows": rows,
            "written_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        if vectors_version is not None:
            # Written after every change of the vector table, so readers can trust an unchanged manifest
            # to mean an unchanged table (``_vector_hint``) instead of asking LanceDB on every search.
            manifest["vectors_version"] = vectors_version
        atomic_write(gen_dir / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
        return manifest

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
        db = gen_dir / DB_NAME
        with self._connect(db, read_only=False) as con:
            file_before = connections.identity(db)
            # One round trip for what the change needs to know: the stored rows, the highest seq and
            # the kept digest (DuckDB statements cost ~1 ms each; an upsert used to make twenty).
            stored: dict[str, tuple[str, str]] = {}
            max_seq = 0
            kept: dict[str, str] = {}
            for kind, a, b, c in con.execute(
                "SELECT 'row', id, row_digest, content_hash FROM memories WHERE id IN "
                f"{fts.in_list(incoming)} UNION ALL "
                "SELECT 'seq', CAST(coalesce(max(seq), 0) AS VARCHAR), NULL, NULL FROM memories UNION ALL "
                "SELECT 'meta', key, value, NULL FROM meta WHERE key IN ('rows', 'source_digest', 'fts_seq')",
                list(incoming),
            ).fetchall():
                if kind == "row":
                    stored[a] = (b, c)
                elif kind == "seq":
                    max_seq = int(a)
                else:
                    kept[a] = b
            removed = [
                rid for rid, r in incoming.items() if r["status"] in EXCLUDED_STATUSES and rid in stored
            ]
            changed = [
                r
                for rid, r in incoming.items()
                if r["status"] not in EXCLUDED_STATUSES and stored.get(rid, ("", ""))[0] != r["row_digest"]
            ]
            if "rows" in kept and "source_digest" in kept:
                n_rows, total = int(kept["rows"]), int(kept["source_digest"], 16)
            else:
                n_rows, total = self._stored_digest(con)
            for rid in removed:
                n_rows -= 1
                total -= _pair_hash(rid, stored[rid][0])
            for r in changed:
                if r["id"] in stored:
                    total -= _pair_hash(r["id"], stored[r["id"]][0])
                else:
                    n_rows += 1
                total += _pair_hash(r["id"], r["row_digest"])
            digest = _digest_hex(total)
            for offset, row in enumerate(changed, start=1):
                row["seq"] = max_seq + offset
            if changed or removed:
                con.execute("BEGIN")
                gone = removed + [r["id"] for r in changed]
                con.execute(f"DELETE FROM memories WHERE id IN {fts.in_list(gone)}", gone)
                if changed:
                    con.register("incoming", pa.Table.from_pylist(changed, schema=_ARROW_SCHEMA))
                    con.execute(f"INSERT INTO memories SELECT {', '.join(_COLUMNS)} FROM incoming")
                    con.unregister("incoming")
                indexed = fts.has_index(con)
                delta = None
                if indexed:
                    # Same transaction as the rows: the FTS index never lags behind them (AMB-32).
                    delta = fts.apply_changes(
                        con, removed + [r["id"] for r in changed], [r["id"] for r in changed]
                    )
                self._store_digest(con, n_rows, digest, watermark=indexed)
                con.execute("COMMIT")
                if not indexed:
                    self._rebuild_fts(con)
                elif delta is not None and "source_digest" in kept:
                    # Move this process's snapshots along with the write instead of reloading them; the
                    # rows are read back so they hold exactly what a reload would read.
                    before = _state_key(file_before, kept)
                    meta_after, file_after = _meta(con), connections.identity(db)
                    after = _state_key(file_after, meta_after)
                    _remember_state(db, file_after, meta_after)
                    fts.patch_snapshot(str(db), before, after, delta)
                    ids = [r["id"] for r in changed]
                    written = con.execute(
                        f"SELECT {', '.join(_COLUMNS)} FROM memories WHERE id IN {fts.in_list(ids)}", ids
                    ).fetchall()
                    row_snapshot.patch(str(db), before, after, written, removed)
        new_text = {r["id"] for r in changed if stored.get(r["id"], ("", ""))[1] != r["content_hash"]}

        manifest = self.manifest(generation) or {}
        healed = 0
        table = None
        try:
            if ident is not None and manifest.get("embedding") == ident.as_dict():
                table = self._lance_table(gen_dir)
                if table is not None:
                    healed = self._upsert_vectors(table, incoming, removed, new_text, ident.dim, gen_dir)
        finally:
            # Also after a heal, or when a crash left the table ahead of the manifest: readers key their
            # vector snapshot on the manifest.
            version = _table_version(table)
            if changed or removed or (version is not None and manifest.get("vectors_version") != version):
                # Keep the generation's own identity: a Lite caller may upsert into a hybrid generation.
                written = self._write_manifest(
                    gen_dir, generation, int(n_rows), str(digest), manifest.get("embedding"), version
                )
                _privatise(gen_dir)
                if table is not None:
                    _remember_vector_hint(gen_dir, written, _vector_version(gen_dir, table))
        return len(removed) + len(changed) + healed

    def _upsert_vectors(
        self,
        table: Any,
        incoming: dict[str, dict[str, Any]],
        removed: list[str],
        new_text: set[str],
        dim: int,
        gen_dir: Path,
    ) -> int:
        """Replace vectors of changed text, drop removed ones, and fill any still missing (after an
        embedding outage) so a replayed upsert heals the index. Returns the count of healed rows."""
        live = [rid for rid, r in incoming.items() if r["status"] not in EXCLUDED_STATUSES]
        before = _vector_version(gen_dir, table)
        with _VECTOR_LOCK:
            snap = _VECTOR_SNAPSHOTS.get(str(gen_dir))
        if snap is not None and snap.version == before:
            present = {rid for rid in live if rid in snap.row_of}  # this process's view is current
        elif live:
            res = table.search().where(_id_filter(live)).select(["id"]).limit(len(live)).to_arrow()
            present = set(res.column("id").to_pylist())
        else:
            present = set()
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
            # Stale rows were deleted above, so every id in the batch is absent: a plain append does,
            # at a third of merge_insert's cost, what the merge would.
            table.add(batch)
        if stale or to_embed:
            ids = [r["id"] for r in to_embed]
            fresh = vectors if to_embed else np.zeros((0, dim), np.float32)
            after = _vector_version(gen_dir, table)
            _patch_vector_snapshot(gen_dir, before, after, set(stale) | set(ids), ids, fresh)
        return len(healed)

    # -- search -------------------------------------------------------------------------------------

    def provenance(self) -> dict[str, str | None] | None:
        """``id → source session`` of every row of the active generation; None before the first one.
        What strict health compares with the Markdown provenance (PROV-14)."""
        generation = self.active_generation()
        if generation is None:
            return None
        with self._connect(self.generation_dir(generation) / DB_NAME, read_only=True) as con:
            return dict(con.execute("SELECT id, source_session FROM memories").fetchall())

    def search(self, query: str, *, limit: int = 8, profile: RecallProfile | str | None = None) -> list[Hit]:
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
            manifest = self.manifest(generation) if generation is not None else None
            if generation is None or not self._identity_matches(manifest):
                if not (self.root / DAILY_FOLDER).is_dir() and generation is None:
                    return [], False  # empty store
                with self._write_lock():
                    generation = self.active_generation()
                    if generation is None or not self._identity_matches(self.manifest(generation)):
                        self._rebuild_locked()
                        generation = self.active_generation()
                assert generation is not None
                manifest = self.manifest(generation)
            try:
                return self._gather(generation, query, pool, manifest)
            except (OSError, duckdb.Error, RuntimeError, ValueError):
                # A rebuild activated a new generation and removed ours mid-read: retry on the new one.
                if self.active_generation() == generation and self.generation_dir(generation).is_dir():
                    raise
        raise IndexBusyError("the index kept changing generations during search")

    def _lexical(
        self, db: Path, text: str, pool: int, vector_ids: list[str]
    ) -> tuple[list[tuple[str, float]], list[tuple[Any, ...]]]:
        """The BM25 top-``pool`` and the rows of every candidate (those, the vector hits and the rows
        newer than the FTS watermark).

        When this process holds copies of the database's current state (its file identity has not
        moved since they were read) and the query's terms can be derived locally, no connection is
        opened at all: a DuckDB connection and its two statements cost more than the whole ranking.
        A writer changes the file identity with every commit, so a moved identity means the slow path.
        """
        terms = fts.local_query_terms(text)
        known = _known_state(db) if terms is not None else None
        if known is not None and terms is not None:
            key, meta = known
            bm = fts.cached_snapshot(str(db), key)
            held = row_snapshot.cached(str(db), key)
            if bm is not None and held is not None:
                bm25 = bm.top(terms, pool)
                wanted = list(dict.fromkeys([i for i, _ in bm25] + vector_ids))
                return bm25, held.rows(wanted, newer_than=int(meta.get("fts_seq") or 0))
        with self._connect(db, read_only=True) as con:
            bm25: list[tuple[str, float]] = []
            before = connections.identity(db)
            meta = _meta(con)
            file_identity = connections.identity(db)
            if before == file_identity:
                _remember_state(db, file_identity, meta)
            watermark = int(meta.get("fts_seq") or 0)
            # Every writer changes the digest (and the file) in the transaction that changes the rows and
            # the FTS tables, so this key names one state of them: read both from in-memory copies.
            key = _state_key(file_identity, meta) if "source_digest" in meta else None
            try:
                if key is not None:
                    bm25 = fts.snapshot(str(db), key, con).top(fts.query_terms(con, text), pool)
                else:
                    bm25 = con.execute(fts.bm25_sql(pool), [text]).fetchall()
            except duckdb.CatalogException:
                watermark = 0  # FTS index never built (crash mid-write): scan everything lexically
            wanted = list(dict.fromkeys([i for i, _ in bm25] + vector_ids))
            if key is not None:
                held = row_snapshot.snapshot(str(db), key, con, _COLUMNS)
                return bm25, held.rows(wanted, newer_than=watermark)
            # Two selections, not one OR: the id list is a key lookup, the tail a zone-map pruned scan.
            return bm25, con.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM memories WHERE id IN {fts.in_list(wanted)} UNION ALL "
                f"SELECT {', '.join(_COLUMNS)} FROM memories WHERE seq > {int(watermark)}",
                wanted,
            ).fetchall()

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

    def _gather(
        self, generation: int, query: str, pool: int, manifest: dict[str, Any] | None = None
    ) -> tuple[list[Candidate], bool]:
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
        table = _read_table(gen_dir) if query_vec is not None else None
        snapshot: _VectorSnapshot | None = None
        if query_vec is not None and table is not None:
            # Exact top-``pool`` by dot product, as LanceDB's flat scan, over a per-process float32 copy
            # of the table that is reloaded whenever the table's version moves (any writer, any process).
            snapshot = _vector_snapshot(gen_dir, table, query_vec.shape[0], manifest)
            top = snapshot.top(query_vec, pool)
            ids = [snapshot.ids[i] for i in top]
            vecs = snapshot.vectors(top)
            cos = vecs @ query_vec if len(ids) else np.zeros(0, np.float32)
            order = sorted(range(len(ids)), key=lambda i: (-float(cos[i]), ids[i]))
            for rank, i in enumerate(order, start=1):
                vec_hits[ids[i]] = (rank, float(cos[i]))
                stored_vectors[ids[i]] = vecs[i]

        query_words = scoring.word_tokens(query)
        bm25, rows = self._lexical(gen_dir / DB_NAME, query.replace(chr(0), " "), pool, list(vec_hits))
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
        assert snapshot is not None
        for c in candidates:
            if c.id not in stored_vectors and (row := snapshot.row_of.get(c.id)) is not None:
                stored_vectors[c.id] = snapshot.vectors(np.array([row]))[0]
        if any(c.id not in stored_vectors for c in candidates):
            # A row without a vector: in flight, an embedding outage, or a table a crashed writer left
            # ahead of its manifest. Ask LanceDB itself next time instead of trusting the manifest.
            _forget_vector_hint(gen_dir)
        for c in candidates:
            if c.cosine is None and c.id in stored_vectors:
                c.cosine = float(stored_vectors[c.id] @ query_vec)
        return candidates, True


class _VectorSnapshot:
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
    def load(cls, version: tuple[int, ...], ids: list[str], matrix: np.ndarray) -> _VectorSnapshot:
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
    ) -> _VectorSnapshot:
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
        return _VectorSnapshot(version, self.ids + ids, self.base, tail, n_tail, row_of, frozenset(dead))


_VECTOR_SNAPSHOTS: dict[str, _VectorSnapshot] = {}  # generation dir → latest snapshot seen here
_VECTOR_LOCK = threading.Lock()
# Generation dir → (manifest hint, table version seen under it): see ``_hinted_version``.
_VECTOR_HINTS: dict[str, tuple[tuple[object, ...], tuple[int, ...]]] = {}


_READ_TABLES: dict[str, tuple[tuple[int, int], Any]] = {}  # generation dir → (dataset folder id, table)


def _read_table(gen_dir: Path) -> Any:
    """The generation's LanceDB table for searches, opened once per process (1-3 ms an open) with
    strict read consistency, so every read still sees the latest version any process committed."""
    try:
        st = os.stat(gen_dir / LANCE_DIR)
    except FileNotFoundError:
        return None
    ident = (st.st_ino, st.st_mtime_ns)
    key = str(gen_dir)
    with _VECTOR_LOCK:
        cached = _READ_TABLES.get(key)
    if cached is not None and cached[0] == ident:
        return cached[1]
    import lancedb

    try:
        table = lancedb.connect(str(gen_dir / LANCE_DIR), read_consistency_interval=timedelta(0)).open_table(
            LANCE_TABLE
        )
    except (FileNotFoundError, ValueError):
        return None
    with _VECTOR_LOCK:
        for other in [k for k in _READ_TABLES if Path(k).parent == gen_dir.parent and k != key]:
            del _READ_TABLES[other]  # one generation per index folder
        _READ_TABLES[key] = (ident, table)
    return table


def _table_version(table: Any) -> int | None:
    """The table's version, or None without a table or when LanceDB cannot say (never masks the error
    that is already on its way out of an upsert)."""
    if table is None:
        return None
    try:
        return int(table.version)
    except Exception:  # LanceDB raises several types; the caller only leaves a manifest field out
        return None


def _vector_version(gen_dir: Path, table: Any) -> tuple[int, ...]:
    # The version alone could repeat if the index folder is deleted and gen-<n> rebuilt: add the
    # identity of the dataset folder, which is created anew with every generation. Not its ctime:
    # ``_privatise`` chmods the folder after every upsert, which would look like another writer.
    st = os.stat(gen_dir / LANCE_DIR)
    return (int(table.version), st.st_ino, st.st_mtime_ns)


def _patch_vector_snapshot(
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
    with _VECTOR_LOCK:
        snap = _VECTOR_SNAPSHOTS.get(key)
        if snap is None or snap.version != before or fresh.shape != (len(ids), snap.base.shape[1]):
            _VECTOR_SNAPSHOTS.pop(key, None)
            return
        _VECTOR_SNAPSHOTS[key] = snap.patched(after, dropped, ids, fresh)


_HINT_KEYS = ("generation", "written_at", "source_digest", "rows", "vectors_version")


def _vector_hint(manifest: dict[str, Any] | None) -> tuple[object, ...] | None:
    """What names the vector table's state in the manifest: every writer rewrites it after changing the
    table (``written_at`` and the digest change, and an upsert records ``vectors_version``)."""
    if not manifest or "written_at" not in manifest:
        return None
    return tuple(manifest.get(k) for k in _HINT_KEYS)


def _remember_vector_hint(gen_dir: Path, manifest: dict[str, Any], version: tuple[int, ...]) -> None:
    hint = _vector_hint(manifest)
    if hint is not None:
        with _VECTOR_LOCK:
            _VECTOR_HINTS[str(gen_dir)] = (hint, version)


def _forget_vector_hint(gen_dir: Path) -> None:
    with _VECTOR_LOCK:
        _VECTOR_HINTS.pop(str(gen_dir), None)


def _hinted_version(gen_dir: Path, table: Any, manifest: dict[str, Any] | None) -> tuple[int, ...]:
    """The table's version as last seen under this manifest, else asked of LanceDB (~0.6 ms through its
    event loop). Sound because the manifest was read before the table: a table change the manifest does
    not show yet was made by a write still in flight, which rewrites the manifest when it is done."""
    hint = _vector_hint(manifest)
    if hint is not None:
        with _VECTOR_LOCK:
            seen = _VECTOR_HINTS.get(str(gen_dir))
        if seen is not None and seen[0] == hint:
            return seen[1]
    version = _vector_version(gen_dir, table)
    if hint is not None:
        with _VECTOR_LOCK:
            for other in [k for k in _VECTOR_HINTS if Path(k).parent == gen_dir.parent and k != str(gen_dir)]:
                del _VECTOR_HINTS[other]
            _VECTOR_HINTS[str(gen_dir)] = (hint, version)
    return version


def _vector_snapshot(
    gen_dir: Path, table: Any, dim: int, manifest: dict[str, Any] | None = None
) -> _VectorSnapshot:
    key = str(gen_dir)
    version = _hinted_version(gen_dir, table, manifest)
    with _VECTOR_LOCK:
        snap = _VECTOR_SNAPSHOTS.get(key)
        if snap is not None and snap.version == version:
            return snap
    data = table.to_arrow().select(["id", "vector"])
    snap = _VectorSnapshot.load(version, data.column("id").to_pylist(), _vectors_of(data, dim))
    with _VECTOR_LOCK:
        # Keep one snapshot per index root: a newer generation replaces the older one.
        for other in [k for k in _VECTOR_SNAPSHOTS if Path(k).parent == gen_dir.parent and k != key]:
            del _VECTOR_SNAPSHOTS[other]
        _VECTOR_SNAPSHOTS[key] = snap
    return snap


# Database path → (file identity, ``meta``) as last read here: while the identity is unchanged the state
# is, so a search needs no connection to learn it (``MemoryIndex._lexical``).
_STATES: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}
_STATES_LOCK = threading.Lock()


def _remember_state(db: Path, file_identity: tuple[int, ...] | None, meta: dict[str, str]) -> None:
    if file_identity is None or "source_digest" not in meta:
        return
    with _STATES_LOCK:
        folder = db.parent.parent
        for other in [k for k in _STATES if Path(k).parent.parent == folder and k != str(db)]:
            del _STATES[other]  # one generation per index folder
        _STATES[str(db)] = (file_identity, dict(meta))


def _known_state(db: Path) -> tuple[tuple[object, ...], dict[str, str]] | None:
    """The state key and ``meta`` of ``db`` if its file has not moved since they were read here."""
    with _STATES_LOCK:
        seen = _STATES.get(str(db))
    if seen is None:
        return None
    file_identity = connections.identity(db)
    if file_identity != seen[0]:
        return None
    return _state_key(file_identity, seen[1]), seen[1]


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT key, value FROM meta").fetchall())


def _state_key(file_identity: tuple[int, ...] | None, meta: dict[str, str]) -> tuple[object, ...]:
    """Names one state of the FTS tables: every writer changes the digest (and the file) in the
    transaction that changes them."""
    return (file_identity, int(meta.get("fts_seq") or 0), meta.get("rows"), meta["source_digest"])


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
