"""Candidate ranking for recall: embedding-first hybrid and lexical-only modes (REC-23..REC-33).

Retrieval (DuckDB BM25, LanceDB vectors) lives in ``recall.index``; this module only turns a candidate
pool into ordered ``Hit``s, deterministically (ties broken by id), so a rebuild ranks identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from recall import scoring

Mode = Literal["hybrid", "lexical"]


class Hit(BaseModel):
    id: str
    text: str
    day: str
    recorded: str
    type: str
    status: str
    score: float
    cosine: float | None = None
    bm25_rank: int | None = None
    vector_rank: int | None = None
    mode: Mode
    # Extra record fields for currentness, attribution and provenance filters (REC-43, AUTO-13, AUTO-28).
    source_session: str | None = None
    due: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    labels: str | None = None
    entities: tuple[str, ...] = ()
    src: str | None = None
    attr: str | None = None
    insight: bool = False
    path: str | None = None


@dataclass
class Candidate:
    """One record in the candidate pool, with what each retriever said about it."""

    id: str
    text: str
    row: dict[str, object]  # the record's stored fields (day, recorded, type, status, …)
    entities: tuple[str, ...] = ()
    bm25_rank: int | None = None  # 1-based
    bm25_score: float | None = None
    vector_rank: int | None = None  # 1-based
    cosine: float | None = None  # stored-vector cosine to the query; None = no vector yet
    salience: float = 0.0  # not stored yet in daily Markdown: 0 for now (AMB-31 tie-breaker)
    terms: scoring.RecordTerms | None = field(default=None, repr=False)


def _hit(c: Candidate, score: float, mode: Mode) -> Hit:
    r = c.row
    return Hit(
        id=c.id,
        text=c.text,
        day=str(r.get("day") or ""),
        recorded=str(r.get("recorded") or ""),
        type=str(r.get("type") or ""),
        status=str(r.get("status") or ""),
        score=score,
        cosine=c.cosine,
        bm25_rank=c.bm25_rank,
        vector_rank=c.vector_rank,
        mode=mode,
        source_session=r.get("source_session"),  # type: ignore[arg-type]
        due=r.get("due"),  # type: ignore[arg-type]
        valid_from=r.get("valid_from"),  # type: ignore[arg-type]
        valid_to=r.get("valid_to"),  # type: ignore[arg-type]
        labels=r.get("labels"),  # type: ignore[arg-type]
        entities=c.entities,
        src=r.get("src"),  # type: ignore[arg-type]
        attr=r.get("attr"),  # type: ignore[arg-type]
        insight=bool(r.get("insight") or False),
        path=r.get("path"),  # type: ignore[arg-type]
    )


def _terms(c: Candidate) -> scoring.RecordTerms:
    if c.terms is None:
        c.terms = scoring.record_terms(c.text, c.entities)
    return c.terms


def rank_hybrid(query: str, candidates: Sequence[Candidate], *, limit: int) -> list[Hit]:
    """Embedding-first scoring of every candidate from either retriever (REC-24)."""
    vocabulary = scoring.name_vocabulary(
        (c.text for c in candidates), (e for c in candidates for e in c.entities)
    )
    anchors = scoring.query_anchors(query, vocabulary)
    query_words = scoring.word_tokens(query)
    scored = [
        (
            scoring.hybrid_score(
                cosine=c.cosine,
                anchors=anchors,
                terms=_terms(c),
                query_words=query_words,
                bm25_rank=c.bm25_rank,
                vector_rank=c.vector_rank,
                salience=c.salience,
            ),
            c,
        )
        for c in candidates
    ]
    scored.sort(key=lambda sc: (-sc[0], sc[1].id))
    return [_hit(c, s, "hybrid") for s, c in scored[:limit]]


def rank_lexical(query: str, candidates: Sequence[Candidate], *, limit: int) -> list[Hit]:
    """Lite / degraded mode: term overlap first, BM25 as the tie-breaker (REC-32)."""
    query_words = scoring.word_tokens(query)
    scored = [(scoring.lexical_score(query_words, _terms(c)), c) for c in candidates]
    scored.sort(
        key=lambda sc: (-sc[0], -(sc[1].bm25_score if sc[1].bm25_score is not None else -1e9), sc[1].id)
    )
    return [_hit(c, s, "lexical") for s, c in scored[:limit]]
