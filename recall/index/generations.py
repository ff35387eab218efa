"""A generation's files and connections: which generation is active, its manifest, the write lock, the
writer-preferring gate in front of DuckDB's file lock, and connections that load FTS from the package."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from tempomem.recall import connections
from tempomem.recall.embedding import EmbeddingIdentity, EmbeddingProvider
from tempomem.recall.index import schema
from tempomem.recall.index.schema import (
    CURRENT,
    DAILY_FOLDER,
    DUCKDB_CONFIG,
    GATE_NAME,
    GEN_RE,
    LOCK_NAME,
    MANIFEST,
    SCHEMA_VERSION,
    WAL_CHECKPOINT_BYTES,
    WRITER_YIELD_SECONDS,
    IndexBusyError,
    digest_of_rows,
    extension_state,
    is_lock_conflict,
    mark_verified,
    pair_hash,
    sql_str,
)
from tempomem.storage.fsio import atomic_write, ensure_private_dir, exclusive_lock, read_private_file
from tempomem.storage.instants import format_instant
from tempomem.storage.limits import FILE_MODE


class IndexAccess:
    """Recall index over ``<root>/daily``. ``embedder=None`` is the Lite tier: FTS only, never embeds."""

    def __init__(self, root: Path, embedder: EmbeddingProvider | None) -> None:
        self.root = Path(root)
        self.embedder = embedder
        self.index_dir = self.root / "index"

    @property
    def identity(self) -> EmbeddingIdentity | None:
        return self.embedder.identity if self.embedder is not None else None

    def active_generation(self) -> int | None:
        """The generation named by CURRENT, or None when there is no usable index."""
        try:
            name = (self.index_dir / CURRENT).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        m = GEN_RE.match(name)
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
            deadline = time.monotonic() + schema.BUSY_TIMEOUT_SECONDS
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
            ext, verified = extension_state()
            config = {**DUCKDB_CONFIG, "allow_unsigned_extensions": True} if verified else DUCKDB_CONFIG
            con = self._open(db, read_only=read_only, config=config, announcement=announcement)
            try:
                con.execute(f"LOAD {sql_str(str(ext))}")
                if not verified:
                    mark_verified(ext)
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
        deadline = time.monotonic() + schema.BUSY_TIMEOUT_SECONDS
        delay = 0.005
        with connections.Announcement(self.index_dir / connections.WANT_NAME) as own:
            waiting = announcement or own
            while True:
                try:
                    con = duckdb.connect(str(db), read_only=read_only, config=config)
                    waiting.withdraw()  # in: stop asking others to let go
                    return con
                except (duckdb.IOException, duckdb.ConnectionException) as exc:
                    if not is_lock_conflict(exc):
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
        IndexAccess._move_watermark(con)

    @staticmethod
    def _stored_digest(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
        """(rows, digest sum) of ``memories`` as kept in ``meta``; computed once for older databases."""
        kept = dict(
            con.execute("SELECT key, value FROM meta WHERE key IN ('rows', 'source_digest')").fetchall()
        )
        if "rows" in kept and "source_digest" in kept:
            return int(kept["rows"]), int(kept["source_digest"], 16)
        pairs = con.execute("SELECT id, row_digest FROM memories").fetchall()
        return len(pairs), sum(pair_hash(rid, digest) for rid, digest in pairs)

    @staticmethod
    def _store_digest(
        con: duckdb.DuckDBPyConnection,
        rows: int,
        digest: str,
        *,
        watermark: bool = False,
        max_seq: int | None = None,
    ) -> None:
        """Keep (rows, digest) in ``meta``; ``watermark`` also moves ``fts_seq`` in the same statement,
        to ``max_seq`` when the caller knows the highest seq (saves a scan), else to the table's."""
        values = [f"('rows', '{int(rows)}')", f"('source_digest', {sql_str(digest)})"]
        if watermark and max_seq is not None:
            values.append(f"('fts_seq', '{int(max_seq)}')")
        elif watermark:
            values.append("('fts_seq', (SELECT CAST(coalesce(max(seq), 0) AS VARCHAR) FROM memories))")
        con.execute(f"INSERT OR REPLACE INTO meta VALUES {', '.join(values)}")

    @staticmethod
    def _move_watermark(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('fts_seq', "
            "(SELECT CAST(coalesce(max(seq), 0) AS VARCHAR) FROM memories))"
        )

    def _next_generation(self) -> int:
        existing = [int(m.group(1)) for p in self.index_dir.iterdir() if (m := GEN_RE.match(p.name))]
        return max(existing, default=0) + 1

    def _activate(self, generation: int) -> None:
        atomic_write(self.index_dir / CURRENT, f"gen-{generation}\n".encode())
        connections.drop(self.index_dir)
        # Old generations go only after activation; a reader still inside one retries on the new one.
        for p in self.index_dir.iterdir():
            m = GEN_RE.match(p.name)
            if m and int(m.group(1)) != generation:
                shutil.rmtree(p, ignore_errors=True)

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
            "written_at": format_instant(datetime.now(UTC)),
        }
        if vectors_version is not None:
            # Written after every change of the vector table, so readers can trust an unchanged manifest
            # to mean an unchanged table (``vector_hint``) instead of asking LanceDB on every search.
            manifest["vectors_version"] = vectors_version
        atomic_write(gen_dir / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
        return manifest

    def source_digest(self) -> str:
        """Digest of what a rebuild would index now (compare with the manifest to detect staleness)."""
        rows = self._read_source() if (self.root / DAILY_FOLDER).is_dir() else []
        return digest_of_rows([(r["id"], r["row_digest"]) for r in rows])
