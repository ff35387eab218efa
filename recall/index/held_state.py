"""This process's in-memory copies of one index database's current state, when it holds them.

A search that finds both copies (the BM25 postings and the rows) for the state the database file is in
now, and whose query terms can be derived without DuckDB, opens no connection at all. A writer changes
the file identity with every commit, so a moved identity means no copies here (the caller reads DuckDB).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempomem.recall import fts, row_snapshot
from tempomem.recall.index.vectors import known_state_of


@dataclass(frozen=True)
class HeldState:
    terms: list[str]  # the query's stemmed terms, as match_bm25 derives them
    bm25: fts.Bm25Snapshot
    rows: row_snapshot.RowSnapshot
    meta: dict[str, Any]  # the database's meta table at that state


def held_state(db: Path, query: str) -> HeldState | None:
    """The copies of ``db``'s current state with ``query``'s terms, or None (read DuckDB instead)."""
    terms = fts.local_query_terms(query)
    known = known_state_of(db) if terms is not None else None
    if known is None or terms is None:
        return None
    key, meta = known
    bm = fts.cached_snapshot(str(db), key)
    held = row_snapshot.cached(str(db), key)
    if bm is None or held is None:
        return None
    return HeldState(terms, bm, held, meta)
