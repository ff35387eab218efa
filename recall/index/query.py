"""Reading the index: lexical (BM25) and vector candidates from the active generation, fused and scored
by the recall profile; provenance by id for health."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from tempomem.recall import connections, fts, row_snapshot, scoring
from tempomem.recall.embedding import EmbeddingError
from tempomem.recall.index.build import IndexBuild
from tempomem.recall.index.context_lines import context_lines
from tempomem.recall.index.held_state import held_state
from tempomem.recall.index.schema import COLUMNS, DAILY_FOLDER, DB_NAME, IndexBusyError
from tempomem.recall.index.vectors import (
    VectorSnapshot,
    forget_vector_hint,
    meta_of,
    read_table,
    record_words,
    remember_state,
    state_key,
    vector_snapshot,
)
from tempomem.recall.profiles import RecallProfile, resolve_profile
from tempomem.recall.search import Candidate, ContextLines, Hit, rank
from tempomem.storage.limits import DELIBERATE_SUPERSET


@dataclass(frozen=True)
class Gathered:
    """A search's candidate pool: hybrid (False on Lite or an embedding outage), and for a hybrid pool
    the fetcher of context lines from the same generation."""

    candidates: list[Candidate]
    hybrid: bool
    context: ContextLines | None = None


class MemoryIndex(IndexBuild):
    """The recall index: build, upsert and query (``MemoryIndex(root, embedder)``; ``None`` is Lite)."""

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

        ``profile`` (a ``RecallProfile`` or its name) orders the candidate pool (and may add context
        lines to it); ``None`` is ``recall.profiles.DEFAULT_PROFILE`` for the embedder it was calibrated
        with, else the reference.
        """
        chosen = resolve_profile(profile, self.identity)
        found = self.gather(query, pool=max(chosen.pool, limit))
        return rank(
            query, found.candidates, limit=limit, profile=chosen, hybrid=found.hybrid, context=found.context
        )

    def candidates(self, query: str, *, pool: int = DELIBERATE_SUPERSET) -> tuple[list[Candidate], bool]:
        """The candidate pool of a search (BM25 top-``pool`` ∪ vector top-``pool`` ∪ rows newer than the
        FTS watermark), each with its BM25 rank/score and stored-vector cosine; and whether it is a
        hybrid pool (False on Lite or an embedding outage)."""
        found = self.gather(query, pool=pool)
        return found.candidates, found.hybrid

    def gather(self, query: str, *, pool: int = DELIBERATE_SUPERSET) -> Gathered:
        """``candidates`` plus, for a hybrid pool, the fetcher of context lines from the same generation
        (``recall.search.rank``'s ``context``)."""
        if not query.strip() or pool <= 0:
            return Gathered([], False)
        for _attempt in range(3):
            generation = self.active_generation()
            manifest = self.manifest(generation) if generation is not None else None
            if generation is None or not self._identity_matches(manifest):
                if not (self.root / DAILY_FOLDER).is_dir() and generation is None:
                    return Gathered([], False)  # empty store
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
        copies = held_state(db, text)
        if copies is not None:
            bm25 = copies.bm25.top(copies.terms, pool)
            wanted = list(dict.fromkeys([i for i, _ in bm25] + vector_ids))
            return bm25, copies.rows.rows(wanted, newer_than=int(copies.meta.get("fts_seq") or 0))
        with self._connect(db, read_only=True) as con:
            bm25: list[tuple[str, float]] = []
            before = connections.identity(db)
            meta = meta_of(con)
            file_identity = connections.identity(db)
            if before == file_identity:
                remember_state(db, file_identity, meta)
            watermark = int(meta.get("fts_seq") or 0)
            # Every writer changes the digest (and the file) in the transaction that changes the rows and
            # the FTS tables, so this key names one state of them: read both from in-memory copies.
            key = state_key(file_identity, meta) if "source_digest" in meta else None
            try:
                if key is not None:
                    bm25 = fts.snapshot(str(db), key, con).top(fts.query_terms(con, text), pool)
                else:
                    bm25 = con.execute(fts.bm25_sql(pool), [text]).fetchall()
            except duckdb.CatalogException:
                watermark = 0  # FTS index never built (crash mid-write): scan everything lexically
            wanted = list(dict.fromkeys([i for i, _ in bm25] + vector_ids))
            if key is not None:
                held = row_snapshot.snapshot(str(db), key, con, COLUMNS)
                return bm25, held.rows(wanted, newer_than=watermark)
            # Two selections, not one OR: the id list is a key lookup, the tail a zone-map pruned scan.
            return bm25, con.execute(
                f"SELECT {', '.join(COLUMNS)} FROM memories WHERE id IN {fts.in_list(wanted)} UNION ALL "
                f"SELECT {', '.join(COLUMNS)} FROM memories WHERE seq > {int(watermark)}",
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
    ) -> Gathered:
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
        table = read_table(gen_dir) if query_vec is not None else None
        snapshot: VectorSnapshot | None = None
        if query_vec is not None and table is not None:
            # Exact top-``pool`` by dot product, as LanceDB's flat scan, over a per-process float32 copy
            # of the table that is reloaded whenever the table's version moves (any writer, any process).
            snapshot = vector_snapshot(gen_dir, table, query_vec.shape[0], manifest)
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
        records = {r[0]: dict(zip(COLUMNS, r, strict=True)) for r in rows}

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
            if not in_pool and scoring.lexical_overlap(query_words, record_words(c)) <= 0:
                continue
            candidates.append(c)

        if query_vec is None or table is None:
            return Gathered(candidates, False)

        # Every candidate is scored by its STORED vector (REC-24): fetch those BM25 found but the
        # vector retriever did not return.
        assert snapshot is not None
        for c in candidates:
            if c.id not in stored_vectors and (row := snapshot.row_of.get(c.id)) is not None:
                stored_vectors[c.id] = snapshot.vectors(np.array([row]))[0]
        if any(c.id not in stored_vectors for c in candidates):
            # A row without a vector: in flight, an embedding outage, or a table a crashed writer left
            # ahead of its manifest. Ask LanceDB itself next time instead of trusting the manifest.
            forget_vector_hint(gen_dir)
        for c in candidates:
            if c.cosine is None and c.id in stored_vectors:
                c.cosine = float(stored_vectors[c.id] @ query_vec)
        held = frozenset(c.id for c in candidates)
        vec, snap, text = query_vec, snapshot, query.replace(chr(0), " ")

        def context(positions: Sequence[tuple[str, int]]) -> list[Candidate]:
            try:
                return context_lines(self._connect, gen_dir / DB_NAME, snap, vec, text, positions, held)
            except (OSError, duckdb.Error):
                # A rebuild removed this generation meanwhile: the pool still answers, without context.
                return []

        return Gathered(candidates, True, context)
