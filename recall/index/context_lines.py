"""Context lines of a search (issue #17): the lines next to the best candidates that no retriever
returned, fetched by position from the same generation and scored against the same query.

``recall.search.rank_tuned`` decides which positions it wants (``context_positions``); this module reads
those rows, their stored vectors and their BM25 scores. It reads from this process's in-memory copies of
the database state when it holds them (no connection), else from DuckDB, as ``MemoryIndex._lexical``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from tempomem.recall import connections, fts
from tempomem.recall.index.held_state import held_state
from tempomem.recall.index.schema import COLUMNS
from tempomem.recall.index.vectors import VectorSnapshot, meta_of, state_key
from tempomem.recall.search import Candidate

Connect = Callable[..., AbstractContextManager[duckdb.DuckDBPyConnection]]
Row = tuple[Any, ...]


def context_lines(
    connect: Connect,
    db: Path,
    vectors: VectorSnapshot,
    query_vec: np.ndarray,
    query: str,
    positions: Sequence[tuple[str, int]],
    held: frozenset[str],
) -> list[Candidate]:
    """Candidates for the lines at ``positions`` (day, seq) that exist, are not in ``held`` (the pool's
    ids) and have a stored vector, each with its cosine to ``query_vec`` and its BM25 score for ``query``
    (None when it holds no query term). A line without a stored vector yet is left out: it has no
    semantic evidence to be ranked by."""
    wanted = set(positions)
    if not wanted:
        return []
    rows, bm25 = _rows_and_scores(connect, db, sorted({seq for _, seq in wanted}), query)
    kept: list[tuple[dict[str, Any], int]] = []
    taken = set(held)
    for values in sorted(rows, key=lambda r: str(r[0])):
        row = dict(zip(COLUMNS, values, strict=True))
        rid = str(row["id"])
        if rid in taken or (str(row["day"] or ""), row["seq"]) not in wanted:
            continue
        at = vectors.row_of.get(rid)
        if at is None:
            continue
        taken.add(rid)
        kept.append((row, at))
    if not kept:
        return []
    # One matrix product for every line, as the pool's cosines are computed.
    cosines = vectors.vectors(np.array([at for _, at in kept])) @ query_vec
    out = [
        Candidate(
            id=str(row["id"]),
            text=str(row["text"]),
            row=row,
            entities=tuple(row["entities"] or ()),
            bm25_score=bm25.get(str(row["id"])),
            cosine=float(cos),
        )
        for (row, _), cos in zip(kept, cosines, strict=True)
    ]
    return out


def _rows_and_scores(
    connect: Connect, db: Path, seqs: list[int], query: str
) -> tuple[list[Row], dict[str, float]]:
    copies = held_state(db, query)
    if copies is not None:
        rows = copies.rows.at_seqs(seqs)
        return rows, copies.bm25.scores_of(copies.terms, [str(r[0]) for r in rows])
    with connect(db, read_only=True) as con:
        rows = con.execute(
            f"SELECT {', '.join(COLUMNS)} FROM memories WHERE seq IN {fts.in_list(seqs)}", seqs
        ).fetchall()
        meta = meta_of(con)
        key = state_key(connections.identity(db), meta) if "source_digest" in meta else None
        if key is None:
            return rows, {}  # an index from before the state key: context lines carry no BM25 evidence
        try:
            snap = fts.snapshot(str(db), key, con)
            return rows, snap.scores_of(fts.query_terms(con, query), [str(r[0]) for r in rows])
        except duckdb.CatalogException:
            return rows, {}  # FTS index never built (crash mid-write)
