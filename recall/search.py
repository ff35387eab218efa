"""Candidate ranking for recall: embedding-first hybrid and lexical-only modes (REC-23..REC-33).

Retrieval (DuckDB BM25, LanceDB vectors) lives in ``recall.index``; this module only turns a candidate
pool into ordered ``Hit``s, deterministically (ties broken by id), so a rebuild ranks identically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from tempomem.recall import scoring
from tempomem.recall.profiles import RecallProfile

Mode = Literal["hybrid", "lexical", "bm25", "vector"]


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
    # The profile that produced ``score`` (hybrid rankings only): the shaping floors follow its scale
    # (``recall.profiles.scored_by``). Never serialised; None (hand-made, graph-derived, lexical) = reference.
    profile: RecallProfile | None = Field(default=None, exclude=True, repr=False)
    # The score before conversation context, for a profile whose floors compare it (``floor_on``):
    # neighbour and context boosts grow with how many related lines a store holds, not with how well
    # the line matches, so on that scale a floor means the same in a small store as in a large one.
    evidence: float | None = Field(default=None, exclude=True, repr=False)

    @property
    def floor_score(self) -> float:
        """What evidence floors compare: ``evidence`` when the scoring profile set it, else ``score``."""
        return self.score if self.evidence is None else self.evidence


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


# Fetches the lines at the given (day, seq) positions that exist, as candidates scored by their stored
# vector and BM25 against the same query (``MemoryIndex.gather``). Positions with no line are skipped.
ContextLines = Callable[[Sequence[tuple[str, int]]], list[Candidate]]


def _hit(
    c: Candidate,
    score: float,
    mode: Mode,
    profile: RecallProfile | None = None,
    evidence: float | None = None,
) -> Hit:
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
        profile=profile,
        evidence=evidence,
    )


def _terms(c: Candidate) -> scoring.RecordTerms:
    if c.terms is None:
        c.terms = scoring.record_terms(c.text, c.entities)
    return c.terms


def rank_hybrid(
    query: str, candidates: Sequence[Candidate], *, limit: int, profile: RecallProfile | None = None
) -> list[Hit]:
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
    return [_hit(c, s, "hybrid", profile) for s, c in scored[:limit]]


def rank_lexical(query: str, candidates: Sequence[Candidate], *, limit: int) -> list[Hit]:
    """Lite / degraded mode: term overlap first, BM25 as the tie-breaker (REC-32)."""
    query_words = scoring.word_tokens(query)
    scored = [(scoring.lexical_score(query_words, _terms(c)), c) for c in candidates]
    scored.sort(
        key=lambda sc: (-sc[0], -(sc[1].bm25_score if sc[1].bm25_score is not None else -1e9), sc[1].id)
    )
    return [_hit(c, s, "lexical") for s, c in scored[:limit]]


def rank_tuned(
    query: str,
    candidates: Sequence[Candidate],
    *,
    limit: int,
    profile: RecallProfile,
    context: ContextLines | None = None,
) -> list[Hit]:
    """Embedding-first like the reference, plus the tuned profile's bounded levers (see recall.profiles)::

    score = semantic(cos ≥ floor) + lexical_weight × bm25 / best_bm25 + anchors(numeric, names,
            session dates) + temporal_bonus [time question × time evidence] + tie-breakers
            (+ neighbour context − question_penalty [the line asks] + speaker_bonus [a named speaker's])

    With ``context`` and ``profile.context_seeds``, the lines within the neighbour distance of the
    best-scoring candidates join the pool (scored the same way, against the same best BM25) before
    neighbour context is added."""
    vocabulary = (
        scoring.name_vocabulary((c.text for c in candidates), (e for c in candidates for e in c.entities))
        if profile.name_anchor_bonus
        else frozenset()
    )
    anchors = scoring.query_anchors(query, vocabulary)
    months = scoring.month_anchors(query) if profile.session_date_anchors else ()
    query_words = scoring.word_tokens(query)
    temporal = profile.temporal_bonus > 0 and scoring.is_temporal_query(query)
    best_bm25 = max((c.bm25_score for c in candidates if c.bm25_score is not None), default=0.0)

    def score(c: Candidate) -> float:
        terms = _terms(c)
        if c.cosine is not None:
            evidence = c.cosine if c.cosine >= profile.semantic_floor else 0.0
        else:
            evidence = scoring.lexical_overlap(query_words, terms.words)  # waiting for its vector (REC-32)
        if profile.lexical_weight and c.bm25_score is not None and best_bm25 > 0:
            evidence += profile.lexical_weight * max(0.0, c.bm25_score) / best_bm25
        bonus = scoring.tuned_anchor_bonus(
            anchors,
            months,
            terms,
            str(c.row.get("day") or ""),
            numeric_bonus=profile.numeric_anchor_bonus,
            name_bonus=profile.name_anchor_bonus,
            session_dates=profile.session_date_anchors,
        )
        if temporal and scoring.has_time_evidence(c.text, terms):
            bonus += profile.temporal_bonus
        ties = profile.rrf_weight * scoring.rrf(c.bm25_rank, c.vector_rank, k=profile.rrf_k)
        return evidence + bonus + ties + profile.salience_weight * c.salience

    scored = [(score(c), c) for c in candidates]
    weights = profile.neighbour_weights()
    if context is not None and profile.context_seeds and weights:
        wanted = context_positions(scored, profile.context_seeds, len(weights))
        scored += [(score(c), c) for c in context(wanted)]
    before = {id(c): s for s, c in scored} if profile.floor_on == "evidence" else {}
    if weights:
        scored = scoring.with_neighbours(scored, weights)
    if profile.question_penalty or profile.speaker_bonus:
        # After the neighbours read the scores: a question lends its full match to its reply.
        scored = [(s + _line_terms(c.text, query_words, profile), c) for s, c in scored]
    scored.sort(key=lambda sc: (-sc[0], sc[1].id))
    return [_hit(c, s, "hybrid", profile, before.get(id(c))) for s, c in scored[:limit]]


def _line_terms(text: str, query_words: set[str], profile: RecallProfile) -> float:
    """What the line's own form adds to its final score: − question_penalty when it asks, +
    speaker_bonus when someone the query names says it."""
    out = 0.0
    if profile.question_penalty and scoring.is_question_line(text):
        out -= profile.question_penalty
    if profile.speaker_bonus and scoring.spoken_by_named(text, query_words):
        out += profile.speaker_bonus
    return out


def context_positions(
    scored: Sequence[tuple[float, Candidate]], seeds: int, distance: int
) -> list[tuple[str, int]]:
    """The (day, seq) positions within ``distance`` of the ``seeds`` best candidates that no candidate
    holds, nearest seed first (ties by id, so the order is deterministic)."""
    held = {_position(c) for _, c in scored}
    out: list[tuple[str, int]] = []
    for _, c in sorted(scored, key=lambda sc: (-sc[0], sc[1].id))[:seeds]:
        pos = _position(c)
        if pos is None:
            continue
        day, seq = pos
        for d in range(1, distance + 1):
            for near in ((day, seq - d), (day, seq + d)):
                if near[1] > 0 and near not in held:
                    held.add(near)
                    out.append(near)
    return out


def _position(c: Candidate) -> tuple[str, int] | None:
    seq = c.row.get("seq")
    return (str(c.row.get("day") or ""), seq) if isinstance(seq, int) else None


def rank_single(
    candidates: Sequence[Candidate], *, limit: int, retriever: Literal["bm25", "vector"]
) -> list[Hit]:
    """One retriever alone (bench baselines): its own order, candidates it did not return go last."""
    if retriever == "bm25":
        pool = [c for c in candidates if c.bm25_score is not None]
        pool.sort(key=lambda c: (-(c.bm25_score or 0.0), c.id))
        return [_hit(c, float(c.bm25_score or 0.0), "bm25") for c in pool[:limit]]
    pool = [c for c in candidates if c.cosine is not None]
    pool.sort(key=lambda c: (-(c.cosine or 0.0), c.id))
    return [_hit(c, float(c.cosine or 0.0), "vector") for c in pool[:limit]]


def rank(
    query: str,
    candidates: Sequence[Candidate],
    *,
    limit: int,
    profile: RecallProfile,
    hybrid: bool,
    context: ContextLines | None = None,
) -> list[Hit]:
    """Order a candidate pool with ``profile``. ``hybrid=False`` (Lite, embedding outage) is always the
    lexical mode (REC-32), whatever the profile. ``context`` fetches lines the pool does not hold (the
    tuned ranker's context lines; ``MemoryIndex.gather`` provides it)."""
    if not hybrid:
        if profile.ranker == "bm25":
            return rank_single(candidates, limit=limit, retriever="bm25")
        return rank_lexical(query, candidates, limit=limit)
    if profile.ranker == "reference":
        return rank_hybrid(query, candidates, limit=limit, profile=profile)
    if profile.ranker in ("bm25", "vector"):
        return rank_single(candidates, limit=limit, retriever=profile.ranker)
    return rank_tuned(query, candidates, limit=limit, profile=profile, context=context)
