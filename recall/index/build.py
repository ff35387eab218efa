"""Writing the index: a rebuild into a new generation activated atomically (with its shrink guard), and
incremental upserts that keep the FTS index, the vectors and the digest in step. Embeddings are reused
from the vector cache (``vector_cache``) and the active generation."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from tempomem.recall import connections, fts, row_snapshot
from tempomem.recall.embedding import EmbeddingError, EmbeddingIdentity
from tempomem.recall.index import vector_cache
from tempomem.recall.index.generations import IndexAccess
from tempomem.recall.index.schema import (
    ARROW_SCHEMA,
    COLUMNS,
    CREATE_MEMORIES,
    DAILY_FOLDER,
    DB_NAME,
    EXCLUDED_STATUSES,
    LANCE_DIR,
    LANCE_TABLE,
    MANIFEST,
    SHRINK_GUARD_MIN_ROWS,
    RebuildReport,
    RebuildShrinkError,
    digest_hex,
    digest_of_rows,
    pair_hash,
    privatise,
    row_of,
)
from tempomem.recall.index.vectors import (
    VECTOR_LOCK,
    VECTOR_SNAPSHOTS,
    id_filter,
    lance_batch,
    meta_of,
    patch_vector_snapshot,
    remember_state,
    remember_vector_hint,
    state_key,
    table_version,
    vector_version,
    vectors_of,
)
from tempomem.storage.fsio import ensure_private_dir
from tempomem.storage.markdown import Bullet, damaged_bullets, iter_bullets

# Rows written per Arrow batch by a rebuild: bounds its peak memory (bench/cost_curves.py) without a
# measurable cost in time.
REBUILD_CHUNK_ROWS = 50_000


class IndexBuild(IndexAccess):
    """The index with its writers (``rebuild``, ``upsert``)."""

    def _load_cache(self, ident: EmbeddingIdentity) -> dict[str, np.ndarray]:
        """The cached vectors of ``ident``: the cache file, and the vectors upsert added to the active
        generation since the last rebuild."""
        cache = vector_cache.read(self.index_dir, ident)
        manifest = self.manifest()
        if manifest is not None and manifest.get("embedding") == ident.as_dict():
            table = self._lance_table(self.generation_dir(int(manifest["generation"])))
            if table is not None:
                data = table.to_arrow().select(["content_hash", "vector"])
                vectors = vectors_of(data, ident.dim)
                cache.update(zip(data.column("content_hash").to_pylist(), vectors, strict=True))
        return cache

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
            rows[bullet.id] = row_of(day, bullet)
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
        have_vectors = False
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
            have_vectors = True

        generation = self._next_generation()
        gen_dir = self.generation_dir(generation)
        ensure_private_dir(gen_dir)

        with self._connect(gen_dir / DB_NAME, read_only=False, gate=False) as con:
            con.execute(CREATE_MEMORIES)
            con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            con.execute("INSERT INTO meta VALUES ('fts_seq', '0')")
            self._store_digest(con, len(rows), digest_of_rows((r["id"], r["row_digest"]) for r in rows))
            # In chunks: an Arrow copy of every row at once raised the peak (bench/cost_curves.py).
            for start in range(0, len(rows), REBUILD_CHUNK_ROWS):
                part = rows[start : start + REBUILD_CHUNK_ROWS]
                arrow_rows = pa.Table.from_pylist(part, schema=ARROW_SCHEMA)
                con.register("incoming", arrow_rows)
                con.execute(f"INSERT INTO memories SELECT {', '.join(COLUMNS)} FROM incoming")
                con.unregister("incoming")
            self._rebuild_fts(con)

        if ident is not None and have_vectors:
            import lancedb

            db = lancedb.connect(str(gen_dir / LANCE_DIR))
            table = None
            # The same chunks, so no full vector matrix is ever stacked beside the cache (1.5 KB a memory).
            for start in range(0, max(len(rows), 1), REBUILD_CHUNK_ROWS):
                chunk = rows[start : start + REBUILD_CHUNK_ROWS]
                matrix = (
                    np.stack([known[r["content_hash"]] for r in chunk])
                    if chunk
                    else np.zeros((0, ident.dim), np.float32)
                )
                ids, hashes = [r["id"] for r in chunk], [r["content_hash"] for r in chunk]
                batch = lance_batch(ids, matrix, hashes, ident.dim)
                if table is None:
                    table = db.create_table(LANCE_TABLE, data=batch)
                else:
                    table.add(batch)
            # Keep only vectors of live text so the cache stays bounded by the store size.
            vector_cache.write(
                self.index_dir, ident, {r["content_hash"]: known[r["content_hash"]] for r in rows}
            )

        digest = digest_of_rows([(r["id"], r["row_digest"]) for r in rows])
        self._write_manifest(gen_dir, generation, len(rows), digest, ident.as_dict() if ident else None)
        privatise(gen_dir)
        self._activate(generation)
        return RebuildReport(
            generation=generation,
            rows=len(rows),
            embedded=embedded,
            cached=cached,
            seconds=round(time.perf_counter() - started, 6),
        )

    def _copy_active_if_current(self, rows: list[dict[str, Any]]) -> int | None:
        """Second-rebuild fast path: when the active generation already holds exactly ``rows`` — same
        source digest in its manifest and in its database (written with the rows), the same seq order a
        fresh build assigns, a complete FTS index and, for an embedder, one vector per row of this
        identity — copy its files as the new generation instead of rebuilding (caller holds the lock)."""
        manifest = self.manifest()
        ident = self.identity
        if manifest is None or manifest.get("embedding") != (ident.as_dict() if ident is not None else None):
            return None
        digest = digest_of_rows((r["id"], r["row_digest"]) for r in rows)
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
        privatise(gen_dir)
        self._activate(generation)
        return generation

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
            incoming[bullet.id] = row_of(day, bullet)
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
            indexed = False
            for kind, a, b, c in con.execute(
                "SELECT 'row', id, row_digest, content_hash FROM memories WHERE id IN "
                f"{fts.in_list(incoming)} UNION ALL "
                "SELECT 'seq', CAST(coalesce(max(seq), 0) AS VARCHAR), NULL, NULL FROM memories UNION ALL "
                f"SELECT 'fts', CAST(({fts.INDEX_COUNT_SQL}) AS VARCHAR), NULL, NULL UNION ALL "
                "SELECT 'meta', key, value, NULL FROM meta WHERE key IN ('rows', 'source_digest', 'fts_seq')",
                list(incoming),
            ).fetchall():
                if kind == "row":
                    stored[a] = (b, c)
                elif kind == "seq":
                    max_seq = int(a)
                elif kind == "fts":
                    indexed = a != "0"  # the write lock is held: nobody adds or drops it meanwhile
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
                total -= pair_hash(rid, stored[rid][0])
            for r in changed:
                if r["id"] in stored:
                    total -= pair_hash(r["id"], stored[r["id"]][0])
                else:
                    n_rows += 1
                total += pair_hash(r["id"], r["row_digest"])
            digest = digest_hex(total)
            for offset, row in enumerate(changed, start=1):
                row["seq"] = max_seq + offset
            if changed or removed:
                con.execute("BEGIN")
                gone = removed + [r["id"] for r in changed]
                con.execute(f"DELETE FROM memories WHERE id IN {fts.in_list(gone)}", gone)
                if changed:
                    con.register("incoming", pa.Table.from_pylist(changed, schema=ARROW_SCHEMA))
                    con.execute(f"INSERT INTO memories SELECT {', '.join(COLUMNS)} FROM incoming")
                    con.unregister("incoming")
                delta = None
                if indexed:
                    # Same transaction as the rows: the FTS index never lags behind them (AMB-32).
                    delta = fts.apply_changes(
                        con, removed + [r["id"] for r in changed], [r["id"] for r in changed]
                    )
                # New rows took the seqs above the old highest; only removals need the table's max.
                top = max_seq + len(changed) if changed else None
                self._store_digest(con, n_rows, digest, watermark=indexed, max_seq=top)
                con.execute("COMMIT")
                if not indexed:
                    self._rebuild_fts(con)
                elif delta is not None and "source_digest" in kept:
                    # Move this process's snapshots along with the write instead of reloading them; the
                    # rows are read back so they hold exactly what a reload would read.
                    before = state_key(file_before, kept)
                    meta_after, file_after = meta_of(con), connections.identity(db)
                    after = state_key(file_after, meta_after)
                    remember_state(db, file_after, meta_after)
                    fts.patch_snapshot(str(db), before, after, delta)
                    ids = [r["id"] for r in changed]
                    written = con.execute(
                        f"SELECT {', '.join(COLUMNS)} FROM memories WHERE id IN {fts.in_list(ids)}", ids
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
            version = table_version(table)
            if changed or removed or (version is not None and manifest.get("vectors_version") != version):
                # Keep the generation's own identity: a Lite caller may upsert into a hybrid generation.
                written = self._write_manifest(
                    gen_dir, generation, int(n_rows), str(digest), manifest.get("embedding"), version
                )
                privatise(gen_dir)
                if table is not None:
                    remember_vector_hint(gen_dir, written, vector_version(gen_dir, table))
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
        before = vector_version(gen_dir, table)
        with VECTOR_LOCK:
            snap = VECTOR_SNAPSHOTS.get(str(gen_dir))
        if snap is not None and snap.version == before:
            present = {rid for rid in live if rid in snap.row_of}  # this process's view is current
        elif live:
            res = table.search().where(id_filter(live)).select(["id"]).limit(len(live)).to_arrow()
            present = set(res.column("id").to_pylist())
        else:
            present = set()
        healed = [rid for rid in live if rid not in present and rid not in new_text]
        stale = removed + sorted(new_text & present)
        if stale:
            table.delete(id_filter(stale))
        to_embed = [incoming[rid] for rid in live if rid in new_text or rid in healed]
        if to_embed:
            vectors = self._embed([r["text"] for r in to_embed])  # EmbeddingError propagates
            batch = lance_batch(
                [r["id"] for r in to_embed], vectors, [r["content_hash"] for r in to_embed], dim
            )
            # Stale rows were deleted above, so every id in the batch is absent: a plain append does,
            # at a third of merge_insert's cost, what the merge would.
            table.add(batch)
        if stale or to_embed:
            ids = [r["id"] for r in to_embed]
            fresh = vectors if to_embed else np.zeros((0, dim), np.float32)
            after = vector_version(gen_dir, table)
            patch_vector_snapshot(gen_dir, before, after, set(stale) | set(ids), ids, fresh)
        return len(healed)
