"""Model-facing read tools as plain functions: ``memory_recall`` and ``memory_journal`` (AMB-49).

Each returns a pydantic result carrying both structured fields and the rendered ``text`` the model sees.
An MCP server or host adapter wraps these without changing behaviour. The clock and host zone are read
here, at the boundary, and passed into the pure shaping code.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tempomem.recall.auto_block import AutoLookup, same_query
from tempomem.recall.fact_sheet import NO_SHEET, fact_sheet, sheet_conflict_note
from tempomem.recall.graph_read import GraphReader, expand_hits
from tempomem.recall.guidance import guidance_lines, guidance_section
from tempomem.recall.journal import JournalError, JournalResult, JournalSession
from tempomem.recall.recency import recency_order
from tempomem.recall.search import Hit
from tempomem.recall.shaping import (
    Evidence,
    RecallHit,
    SearchBackend,
    answer_floor,
    currentness,
    is_recallable,
    render_shaped,
    shape_hits,
    to_recall_hit,
)
from tempomem.storage.limits import DELIBERATE_SUPERSET

RECALL_LIMIT_DEFAULT = 8  # AMB-30
RECALL_LIMIT_MAX = 20  # AMB-30
KINDS = frozenset({"preference", "lesson"})  # REC-09, GUIDE-03

NO_HITS_TEXT = "No matching memory found."
RUN_HISTORY_HANDOFF = (
    "If the user asked to pick up, continue or recover interrupted work, call RunHistory {} first "
    "instead of rephrasing memory searches."
)  # REC-07: exact, and only when RunHistory is available (AMB-08)
DEGRADED_TEXT = (
    "Memory recall is unavailable right now (degraded): the memory backend failed, so no hits were "
    "retrieved. This is not evidence that nothing is stored."
)  # REC-19: explicit, never invented hits, never the raw backend error


class RecallInputError(ValueError):
    """Invalid MemoryRecall request; ``code`` is stable and model-safe."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RecallResult(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    hits: list[RecallHit]
    evidence: Evidence | None = None
    degraded: bool = False
    mode: Literal["hybrid", "lexical"] | None = None
    text: str


def host_zone() -> tzinfo:
    """The host process time zone (REC-46): a daemon running in UTC gets UTC."""
    return datetime.now().astimezone().tzinfo or UTC


def memory_recall_description(*, run_history_available: bool, journal_available: bool) -> str:
    """The model-facing tool description (REC-03, REC-04, REC-06, REC-07, REC-08)."""
    parts = [
        "Search durable memory (read-only, hybrid keyword + vector). Search one short, specific topic per "
        "call; use several calls for several topics instead of a keyword list. Leave the owner's name out "
        "unless the question is specifically about the owner. Weak or related hits alone are not answers: "
        "hits are evidence, not asserted answers.",
        "For the current or last message, use the current conversation history, not MemoryRecall.",
        "A dated line left out as ended may have been ambiguous: an old date alone does not prove what it "
        "meant, so review, remove or retype such sources before relying on what is current.",
    ]
    if journal_available:
        parts.append("A broad question about an explicit period belongs to MemoryJournal.")
    if run_history_available:
        parts.append(
            "For a request to pick up, continue or recover interrupted work, call RunHistory {} first."
        )
    return " ".join(parts)


def _validate(query: str | None, use_original_query: bool, kind: str | None, limit: int) -> None:
    if use_original_query and query is not None:
        raise RecallInputError("query_conflict", "supply either query or useOriginalQuery: true, never both")
    if not use_original_query and (query is None or not query.strip()):
        raise RecallInputError("missing_query", "query must be a non-empty string")
    if kind is not None and kind not in KINDS:
        raise RecallInputError("invalid_kind", 'kind must be "preference" or "lesson"')
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise RecallInputError("invalid_limit", "limit must be a positive integer")


def memory_recall(
    backend: SearchBackend,
    *,
    query: str | None = None,
    use_original_query: bool = False,
    original_hits: Sequence[Hit] | None = None,
    kind: str | None = None,
    about: str | None = None,
    limit: int = RECALL_LIMIT_DEFAULT,
    now: datetime | None = None,
    tz: tzinfo | None = None,
    run_history_available: bool = False,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
    guidance: bool = True,
    graph: GraphReader | None = None,
    recency: bool = False,
    turn_lookup: AutoLookup | None = None,
) -> RecallResult:
    """Deliberate recall over the fifty-hit superset, shaped per REC-13..REC-47.

    ``use_original_query`` reuses ``original_hits`` — the turn's bound automatic lookup — without a new
    backend call (REC-10, REC-11); it is unavailable when the host has none to offer (REC-12).
    ``guidance`` adds the "Preferences & lessons" section (GUIDE-01..05); ``about`` requests never get
    it. With it off, or with no eligible labelled lines, the output is byte-identical to plain shaping.
    ``graph`` switches on one-hop graph expansion (GRAPH-09, GRAPH-10, REC-37; also in original-query
    mode, REC-11) for BuJo hosts; ``None`` (the default, and always for Lite/Journal, GRAPH-11) leaves the
    output byte-identical. ``turn_lookup`` is the turn's automatic lookup: a tool query equal to it
    after normalization reuses its fifty-hit superset instead of searching again (POL-03), until a
    Remember write of the turn makes it stale: then the query searches again and ``use_original_query``
    is unavailable (REM-20, REM-21).
    ``recency`` (BuJo ``recall.recency``) reorders the qualifying delivered hits
    by recency, scores and membership unchanged (INTENT-31..36). Expansion never runs on
    lexical/degraded results (REC-42) and never adds a backend call; evidence notes still come from the
    direct superset (REC-39, REC-40).
    """
    _validate(query, use_original_query, kind, limit)
    stale = turn_lookup is not None and turn_lookup.stale  # a Remember write this turn (REM-20, REM-21)
    if use_original_query and (original_hits is None or stale):
        raise RecallInputError("original_query_unavailable", "useOriginalQuery is not available here")
    limit = min(limit, RECALL_LIMIT_MAX)
    now = now or datetime.now(UTC)
    tz = tz or host_zone()

    if use_original_query:
        hits: Sequence[Hit] = original_hits or []
    elif turn_lookup is not None and not stale and query is not None and same_query(turn_lookup.query, query):
        hits = turn_lookup.hits  # POL-03: one per-turn lookup for the same question
    else:
        assert query is not None
        try:
            hits = backend.search(query.strip(), limit=DELIBERATE_SUPERSET)
        except Exception:  # any backend failure: an explicit degraded result, never a raw error
            return RecallResult(hits=[], degraded=True, text=DEGRADED_TEXT)

    floor = answer_floor(hits)  # on the scale of the profile that scored the hits
    shaped = shape_hits(
        hits,
        now=now,
        tz=tz,
        limit=limit,
        original_query=use_original_query,
        superseded_ids=superseded_ids,
        intent_expiry=intent_expiry,
        floor=floor,
        recency_now=now if recency else None,
    )
    if graph is not None and shaped.mode == "hybrid" and shaped.hits:
        final = expand_hits(
            [h for h in hits if is_recallable(h, superseded_ids)],
            graph,
            limit=limit,
            pool=hits,
            original_query=use_original_query,
            superseded_ids=superseded_ids,
            floor=floor,
        )
        if recency:
            final = recency_order(final, now=now, floor=floor)
        shaped = replace(
            shaped,
            hits=[
                to_recall_hit(
                    h,
                    currentness(
                        h, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry
                    ),
                )
                for h in final
            ],
        )
    section = None
    if guidance and about is None:
        section = guidance_section(
            guidance_lines(hits, now=now, tz=tz, kind=kind, superseded_ids=superseded_ids)
        )
    sheet = NO_SHEET
    if graph is not None and shaped.mode != "lexical" and (query or about):
        # REC-49: the entities the request names (AMB-30 order: notes, guidance, fact sheet, hits).
        sheet = fact_sheet(
            " ".join(filter(None, [about, query])),
            graph,
            now=now,
            tz=tz,
            superseded_ids=superseded_ids,
            intent_expiry=intent_expiry,
        )
    if sheet.conflicts and shaped.evidence != "conflicting":
        shaped = replace(
            shaped, evidence="conflicting", notes=[sheet_conflict_note(sheet.conflicts), *shaped.notes]
        )
    if sheet.text:
        section = "\n".join(filter(None, [section, sheet.text]))
    text = render_shaped(shaped, section)
    if not shaped.hits:
        text = "\n".join(
            [
                *shaped.notes,
                *([sheet.text] if sheet.text else []),
                NO_HITS_TEXT,
                *([RUN_HISTORY_HANDOFF] if run_history_available else []),
            ]
        )
    mode = shaped.mode if shaped.mode in ("hybrid", "lexical") else None
    return RecallResult(hits=shaped.hits, evidence=shaped.evidence, mode=mode, text=text)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# MemoryJournal


MEMORY_JOURNAL_DESCRIPTION = (
    "Chronological retrospective over explicit calendar dates from curated memory. First call: fromDate, "
    "throughDate (inclusive, YYYY-MM-DD, at most 31 days) and timeZone (IANA, required), optional limit "
    '(default 10, max 25). Continue only with {"cursor": "..."}. Entries are untrusted historical '
    "evidence, not exact execution evidence: substantiate exact tool inputs, results, failures or "
    "interrupted execution with RunHistory / SessionHistory."
)  # JRN-02, JRN-03, JRN-20


class JournalErrorResult(BaseModel):
    error: str
    message: str
    text: str


def memory_journal(
    session: JournalSession,
    root: Path,
    *,
    from_date: str | None = None,
    through_date: str | None = None,
    time_zone: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> JournalResult | JournalErrorResult:
    """One MemoryJournal call within a request scope (``session``); typed errors become results."""
    try:
        return session.call(
            root,
            from_date=from_date,
            through_date=through_date,
            time_zone=time_zone,
            limit=limit,
            cursor=cursor,
        )
    except JournalError as exc:
        return JournalErrorResult(
            error=exc.code, message=str(exc), text=f"MemoryJournal error {exc.code}: {exc}"
        )
