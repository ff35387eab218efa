"""Deliberate-recall result shaping (REC-13..REC-47, PROV-16/17, AMB-28/30/57) and the memory_recall tool.

Pure tests use hand-made ``Hit``s with a fixed ``now`` and zone; a few integration tests run the real
index (DuckDB FTS + LanceDB + MiniLM) under tmp_path.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tempomem.recall.search import Hit
from tempomem.recall.shaping import (
    CONFLICT_PREFIX,
    INSUFFICIENT_PREFIX,
    SOURCE_UNKNOWN,
    Conflict,
    conflict_note,
    currentness,
    find_conflicts,
    render_hit_line,
    render_shaped,
    shape_hits,
    tail_cut,
    to_recall_hit,
    value_text,
)
from tempomem.recall.tools import (
    DEGRADED_TEXT,
    NO_HITS_TEXT,
    RUN_HISTORY_HANDOFF,
    RecallInputError,
    memory_recall,
    memory_recall_description,
)
from tempomem.storage.limits import CONFLICT_CHECK_DEPTH, DELIBERATE_FLOOR, DELIBERATE_SUPERSET, TAIL_MARGIN

NOW = datetime(2026, 7, 10, 12, 0, tzinfo=UTC)
WARSAW = ZoneInfo("Europe/Warsaw")
_N = 0


def hit(score: float, text: str | None = None, **kw: Any) -> Hit:
    global _N
    _N += 1
    data: dict[str, Any] = {
        "id": f"m{_N:04d}",
        "text": text or f"memory number {_N}",
        "day": "2026-07-06",
        "recorded": "2026-07-06T12:00:00.000Z",
        "type": "note",
        "status": "open",
        "score": score,
        "mode": "hybrid",
        "source_session": "web:thread-secret-42",
    }
    data.update(kw)
    return Hit(**data)


def label(
    key: str, value: str, *, subject: str = "person:morgan", scope: str = "agent", kind: str = "fact"
) -> str:
    return json.dumps([{"kind": kind, "scope": scope, "subject": subject, "key": key, "value": value}])


def scores(hits: list[Hit]) -> list[float]:
    return [h.score for h in hits]


# --------------------------------------------------------------------------------------------------
# Tail cut


def test_constants_match_reference() -> None:
    assert (TAIL_MARGIN, DELIBERATE_FLOOR, CONFLICT_CHECK_DEPTH, DELIBERATE_SUPERSET) == (0.15, 0.65, 8, 50)


def test_REC34_hit_exactly_margin_below_best_is_kept_and_beyond_is_dropped() -> None:
    # best below the floor, so only the margin applies
    hits = [hit(0.60), hit(0.45), hit(0.4499)]
    assert scores(tail_cut(hits)) == [0.60, 0.45]


def test_REC35_floor_applies_when_best_clears_it_and_exact_065_is_kept() -> None:
    hits = [hit(0.80), hit(0.70), hit(0.65), hit(0.6499)]
    assert scores(tail_cut(hits)) == [0.80, 0.70, 0.65]


def test_REC35_best_exactly_at_floor_clears_it() -> None:
    assert scores(tail_cut([hit(0.65), hit(0.64)])) == [0.65]


def test_REC35_floor_not_applied_when_best_is_below_it() -> None:
    assert scores(tail_cut([hit(0.6499), hit(0.55)])) == [0.6499, 0.55]


def test_REC36_best_hit_always_kept() -> None:
    assert scores(tail_cut([hit(0.10)])) == [0.10]
    assert tail_cut([]) == []


def test_REC16_backend_order_is_kept_not_resorted() -> None:
    a, b, c = hit(0.70, recorded="2026-01-01T00:00:00.000Z"), hit(0.70), hit(0.69)
    assert [h.id for h in tail_cut([a, b, c])] == [a.id, b.id, c.id]


def test_REC33_cut_runs_over_the_superset_then_limit() -> None:
    superset = [hit(0.90 - i * 0.001) for i in range(DELIBERATE_SUPERSET)]
    shaped = shape_hits(superset, now=NOW, tz=UTC, limit=8)
    assert len(shaped.hits) == 8
    assert [h.id for h in shaped.hits] == [h.id for h in superset[:8]]


# --------------------------------------------------------------------------------------------------
# Currentness


def test_REC44_invalidated_is_superseded() -> None:
    assert currentness(hit(0.7, status="invalidated"), now=NOW, tz=UTC).state == "superseded"
    assert currentness(hit(0.7), now=NOW, tz=UTC, superseded_ids={"other"}).state == "current"


def test_REC45_date_only_end_is_current_through_the_local_day() -> None:
    assert currentness(hit(0.7, valid_to="2026-07-10"), now=NOW, tz=UTC).state == "current"
    info = currentness(hit(0.7, valid_to="2026-07-09"), now=NOW, tz=UTC)
    assert (info.state, info.ended_on) == ("ended", "2026-07-09")


def test_REC46_local_day_is_the_host_zone() -> None:
    late = datetime(2026, 7, 10, 22, 30, tzinfo=UTC)  # already 2026-07-11 in Warsaw (UTC+2)
    h = hit(0.7, valid_to="2026-07-10")
    assert currentness(h, now=late, tz=UTC).state == "current"
    assert currentness(h, now=late, tz=WARSAW).state == "ended"


def test_REC45_timestamp_closes_when_its_instant_passes_keeping_its_offset() -> None:
    h = hit(0.7, valid_to="2026-07-10T14:00:00.000+02:00")  # == 12:00Z
    assert currentness(h, now=NOW, tz=UTC).state == "current"
    later = datetime(2026, 7, 10, 12, 0, 0, 1000, tzinfo=UTC)
    info = currentness(h, now=later, tz=UTC)
    assert (info.state, info.ended_on) == ("ended", "2026-07-10")


def test_REC44_INTENT27_event_due_ends_but_task_deadline_does_not() -> None:
    assert currentness(hit(0.7, type="event", due="2026-07-01"), now=NOW, tz=UTC).state == "ended"
    assert currentness(hit(0.7, type="task", due="2026-07-01"), now=NOW, tz=UTC).state == "current"


def test_REC48_INTENT26_INTENT20_note_due_is_an_end_only_under_intent_expiry() -> None:
    h = hit(0.7, type="note", due="2026-07-01")
    assert currentness(h, now=NOW, tz=UTC).state == "current"
    assert currentness(h, now=NOW, tz=UTC, intent_expiry=True).state == "ended"
    shown = to_recall_hit(h, currentness(h, now=NOW, tz=UTC, intent_expiry=True))
    assert shown.status == "open"  # INTENT-20: a passed end never closes or completes anything


def test_AUTO10_unparseable_end_is_never_inferred() -> None:
    assert currentness(hit(0.7, valid_to="next tuesday"), now=NOW, tz=UTC).state == "current"


def test_REC14_dropped_excluded_live_statuses_kept() -> None:
    hits = [hit(0.8, status=s) for s in ("open", "done", "scheduled", "migrated", "dropped")]
    shaped = shape_hits(hits, now=NOW, tz=UTC, limit=8)
    assert [h.status for h in shaped.hits] == ["open", "done", "scheduled", "migrated"]


def test_AMB28_invalidated_without_supersession_edge_is_a_forget() -> None:
    forgotten, replaced = hit(0.8, status="invalidated"), hit(0.8, status="invalidated")
    shaped = shape_hits([forgotten, replaced], now=NOW, tz=UTC, limit=8, superseded_ids={replaced.id})
    assert [(h.id, h.currentness) for h in shaped.hits] == [(replaced.id, "superseded")]


# --------------------------------------------------------------------------------------------------
# Rendering & structured fields


def test_REC15_status_prefix_exact_example() -> None:
    h = hit(0.8, "Ship the 0.9 release.", status="done", recorded="2026-07-06T12:00:00.000Z")
    line = render_hit_line(to_recall_hit(h, currentness(h, now=NOW, tz=UTC)))
    assert line == "0.800 [recorded 2026-07-06T12:00:00.000Z] [done] Ship the 0.9 release."


def test_REC15_open_record_shows_recorded_and_no_status() -> None:
    h = hit(0.81234, "Morgan prefers green tea.")
    assert render_hit_line(to_recall_hit(h, None)) == (
        "0.812 [recorded 2026-07-06T12:00:00.000Z] Morgan prefers green tea."
    )
    bare = hit(0.5, "No timestamp.", recorded="")
    assert render_hit_line(to_recall_hit(bare, None)) == "0.500 No timestamp."


def test_REC43_REC44_validity_interval_and_ended_mark() -> None:
    h = hit(0.8, "Lease at Elm St.", valid_from="2025-01-01", valid_to="2026-06-30")
    line = render_hit_line(to_recall_hit(h, currentness(h, now=NOW, tz=UTC)))
    assert line.endswith("Lease at Elm St. (valid 2025-01-01–2026-06-30; ended 2026-06-30)")
    s = hit(0.8, "Old plan.", status="invalidated")
    assert render_hit_line(to_recall_hit(s, currentness(s, now=NOW, tz=UTC))).endswith(
        "[invalidated] Old plan. (superseded)"
    )


def test_PROV16_unknown_source_is_labelled_PROV17_known_id_never_shown() -> None:
    unknown = hit(0.8, "Legacy line.", source_session=None)
    known = hit(0.79, "Known line.", source_session="web:thread-secret-42")
    result = shape_hits([unknown, known], now=NOW, tz=UTC, limit=8)
    text = render_shaped(result)
    assert f"Legacy line. ({SOURCE_UNKNOWN})" in text
    assert "Known line." in text and "Known line. (" not in text
    dumped = json.dumps([h.model_dump() for h in result.hits])
    assert "thread-secret-42" not in text and "thread-secret-42" not in dumped
    assert "source" not in dumped


def test_REC17_REC47_structured_fields_use_reference_names() -> None:
    h = hit(
        0.8,
        "Party.",
        type="event",
        status="scheduled",
        due="2026-07-20",
        valid_from="2026-07-01",
        valid_to="2026-08-01",
    )
    shaped = shape_hits([h], now=NOW, tz=UTC, limit=8)
    assert shaped.hits[0].model_dump(exclude_none=True) == {
        "id": h.id,
        "score": 0.8,
        "text": "Party.",
        "type": "event",
        "status": "scheduled",
        "createdAt": "2026-07-06T12:00:00.000Z",
        "validFrom": "2026-07-01",
        "validTo": "2026-08-01",
        "dueAt": "2026-07-20",
        "currentness": "current",
    }


def test_REC17_backend_without_optional_fields_keeps_previous_shape() -> None:
    h = hit(0.8, "x", type="", status="", recorded="", mode="lexical")
    shaped = shape_hits([h], now=NOW, tz=UTC, limit=8)
    assert shaped.hits[0].model_dump(exclude_none=True) == {"id": h.id, "score": 0.8, "text": "x"}


# --------------------------------------------------------------------------------------------------
# Evidence notes


def test_REC38_REC39_conflict_note_survives_when_cut_removes_one_value() -> None:
    top = hit(0.90, "Morgan lives in Maple Harbor.", labels=label("other:home town", "Maple Harbor"))
    fillers = [hit(0.89) for _ in range(CONFLICT_CHECK_DEPTH - 2)]
    weak = hit(0.40, "Morgan lives in Elm Creek.", labels=label("other:home town", "Elm Creek"))  # rank 8
    shaped = shape_hits([top, *fillers, weak], now=NOW, tz=UTC, limit=20)
    assert weak.id not in [h.id for h in shaped.hits]  # cut by the tail cut
    assert shaped.evidence == "conflicting"
    text = render_shaped(shaped)
    assert text.startswith(CONFLICT_PREFIX)
    assert "home town: Maple Harbor / Elm Creek" in text  # GUIDE-13: no other: namespace


def test_REC39_conflict_depth_is_the_top_eight() -> None:
    top = hit(0.90, labels=label("employer", "Acme"))
    fillers = [hit(0.89) for _ in range(CONFLICT_CHECK_DEPTH - 1)]
    ninth = hit(0.88, labels=label("employer", "Globex"))
    assert shape_hits([top, *fillers, ninth], now=NOW, tz=UTC, limit=20).evidence is None


def test_AMB57_free_text_hits_never_conflict() -> None:
    hits = [
        hit(0.9, "Morgan lives in Maple Harbor."),
        hit(0.89, "Morgan lives in Elm Creek.", labels="a b=c"),
    ]
    shaped = shape_hits(hits, now=NOW, tz=UTC, limit=8)
    assert shaped.evidence is None and not render_shaped(shaped).startswith(CONFLICT_PREFIX)


def test_REC38_only_current_distinct_values_in_one_scope_conflict() -> None:
    cur = hit(0.9, labels=label("employer", "Acme"))
    assert (
        find_conflicts(
            [cur, hit(0.8, status="invalidated", labels=label("employer", "Globex"))], now=NOW, tz=UTC
        )
        == []
    )
    assert find_conflicts([cur, hit(0.8, labels=label("employer", " ACME "))], now=NOW, tz=UTC) == []
    assert (
        find_conflicts([cur, hit(0.8, labels=label("employer", "Globex", scope="user:ann"))], now=NOW, tz=UTC)
        == []
    )
    assert (
        find_conflicts(
            [cur, hit(0.8, labels=label("employer", "Globex", subject="person:zoe"))], now=NOW, tz=UTC
        )
        == []
    )
    assert len(find_conflicts([cur, hit(0.8, labels=label("employer", "Globex"))], now=NOW, tz=UTC)) == 1


def test_REC40_insufficient_below_floor_and_not_at_it() -> None:
    weak = shape_hits([hit(0.6499), hit(0.60)], now=NOW, tz=UTC, limit=8)
    assert weak.evidence == "insufficient"
    assert render_shaped(weak).startswith(INSUFFICIENT_PREFIX)
    assert shape_hits([hit(0.65)], now=NOW, tz=UTC, limit=8).evidence is None


def test_REC13_original_query_mode_keeps_list_uncut_but_adds_notes() -> None:
    hits = [hit(0.50), hit(0.10)]
    assert len(shape_hits(hits, now=NOW, tz=UTC, limit=8).hits) == 1
    shaped = shape_hits(hits, now=NOW, tz=UTC, limit=8, original_query=True)
    assert scores([h for h in hits]) == [h.score for h in shaped.hits]
    assert shaped.evidence == "insufficient"


def test_REC42_lexical_result_keeps_previous_output() -> None:
    hits = [hit(0.9, mode="lexical", valid_to="2020-01-01"), hit(0.1, mode="lexical")]
    shaped = shape_hits(hits, now=NOW, tz=UTC, limit=8)
    assert len(shaped.hits) == 2 and shaped.evidence is None and shaped.notes == []
    assert all(h.currentness is None for h in shaped.hits)
    assert "ended" not in render_shaped(shaped)


# --------------------------------------------------------------------------------------------------
# memory_recall tool


class FakeBackend:
    def __init__(self, hits: list[Hit] | None = None, error: Exception | None = None) -> None:
        self.hits = hits or []
        self.error = error
        self.calls: list[tuple[str, int]] = []

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        self.calls.append((query, limit))
        if self.error:
            raise self.error
        return self.hits[:limit]


def test_REC19_backend_failure_is_an_explicit_degraded_result() -> None:
    backend = FakeBackend(error=RuntimeError("duckdb: /home/owner/.mem/index/gen-3 corrupted"))
    result = memory_recall(backend, query="tea", now=NOW, tz=UTC)
    assert result.degraded and result.hits == [] and result.text == DEGRADED_TEXT
    assert "gen-3" not in result.model_dump_json()


def test_REC09_query_xor_original_query() -> None:
    with pytest.raises(RecallInputError) as both:
        memory_recall(FakeBackend(), query="x", use_original_query=True, original_hits=[], now=NOW, tz=UTC)
    assert both.value.code == "query_conflict"
    with pytest.raises(RecallInputError) as none:
        memory_recall(FakeBackend(), query="  ", now=NOW, tz=UTC)
    assert none.value.code == "missing_query"


@pytest.mark.parametrize(
    ("request_fields", "code", "message"),
    [
        (
            {"query": "x", "use_original_query": True, "original_hits": []},
            "query_conflict",
            "supply either query or useOriginalQuery: true, never both",
        ),
        ({}, "missing_query", "query must be a non-empty string"),
        ({"query": " \t"}, "missing_query", "query must be a non-empty string"),
        ({"query": "x", "kind": "fact"}, "invalid_kind", 'kind must be "preference" or "lesson"'),
        ({"query": "x", "limit": 0}, "invalid_limit", "limit must be a positive integer"),
        ({"query": "x", "limit": True}, "invalid_limit", "limit must be a positive integer"),
        ({"query": "x", "limit": 2.0}, "invalid_limit", "limit must be a positive integer"),
        (
            {"use_original_query": True},
            "original_query_unavailable",
            "useOriginalQuery is not available here",
        ),
    ],
)
def test_REC09_REC12_each_refusal_has_its_code_and_fixed_message(
    request_fields: dict[str, Any], code: str, message: str
) -> None:
    backend = FakeBackend([hit(0.9)])
    with pytest.raises(RecallInputError) as exc:
        memory_recall(backend, now=NOW, tz=UTC, **request_fields)
    assert (exc.value.code, str(exc.value)) == (code, message)
    assert backend.calls == []  # refused before any search


def test_REC09_GUIDE03_kinds_preference_and_lesson_are_accepted() -> None:
    for kind in ("preference", "lesson", None):
        assert memory_recall(FakeBackend([hit(0.9)]), query="tea", kind=kind, now=NOW, tz=UTC).hits


def test_REC12_original_query_unavailable_without_bound_lookup() -> None:
    with pytest.raises(RecallInputError) as exc:
        memory_recall(FakeBackend(), use_original_query=True, now=NOW, tz=UTC)
    assert exc.value.code == "original_query_unavailable"


def test_REC10_REC11_original_query_reuses_lookup_without_backend_call() -> None:
    backend = FakeBackend([hit(0.99)])
    bound = [hit(0.55), hit(0.20)]
    result = memory_recall(backend, use_original_query=True, original_hits=bound, now=NOW, tz=UTC)
    assert backend.calls == []
    assert [h.id for h in result.hits] == [h.id for h in bound]
    assert result.evidence == "insufficient"


def test_REC33_tool_searches_the_fifty_hit_superset_and_caps_limit() -> None:
    backend = FakeBackend([hit(0.9 - i * 0.001) for i in range(60)])
    result = memory_recall(backend, query="tea", limit=100, now=NOW, tz=UTC)
    assert backend.calls == [("tea", DELIBERATE_SUPERSET)]
    assert len(result.hits) == 20  # AMB-30 max


def test_REC07_empty_result_repeats_handoff_only_when_run_history_available() -> None:
    with_rh = memory_recall(FakeBackend(), query="resume", run_history_available=True, now=NOW, tz=UTC)
    assert with_rh.text == f"{NO_HITS_TEXT}\n{RUN_HISTORY_HANDOFF}"
    without = memory_recall(FakeBackend(), query="resume", now=NOW, tz=UTC)
    assert without.text == NO_HITS_TEXT


def test_REC03_REC04_REC06_REC07_REC08_tool_description() -> None:
    full = memory_recall_description(run_history_available=True, journal_available=True)
    for phrase in (
        "one short, specific topic per call",
        "owner's name out",
        "not answers",
        "hits are evidence, not asserted answers",  # REC-08
        "current conversation history",
        "MemoryJournal",
        "RunHistory {}",
    ):
        assert phrase in full
    bare = memory_recall_description(run_history_available=False, journal_available=False)
    assert "RunHistory" not in bare and "MemoryJournal" not in bare


def test_REC03_to_REC08_the_description_word_for_word() -> None:
    """The model reads this text as the tool's contract: a change to it is deliberate, so it is pinned,
    with the journal and RunHistory sentences appended in that order only when those tools exist."""
    base = (
        "Search durable memory (read-only, hybrid keyword + vector). Search one short, specific topic per "
        "call; use several calls for several topics instead of a keyword list. Leave the owner's name out "
        "unless the question is specifically about the owner. Weak or related hits alone are not answers: "
        "hits are evidence, not asserted answers. "
        "For the current or last message, use the current conversation history, not MemoryRecall. "
        "A dated line left out as ended may have been ambiguous: an old date alone does not prove what it "
        "meant, so review, remove or retype such sources before relying on what is current."
    )
    journal = " A broad question about an explicit period belongs to MemoryJournal."
    handoff = " For a request to pick up, continue or recover interrupted work, call RunHistory {} first."
    assert memory_recall_description(run_history_available=False, journal_available=False) == base
    assert memory_recall_description(run_history_available=False, journal_available=True) == base + journal
    assert memory_recall_description(run_history_available=True, journal_available=False) == base + handoff
    assert memory_recall_description(run_history_available=True, journal_available=True) == (
        base + journal + handoff
    )


# --------------------------------------------------------------------------------------------------
# Integration over a real store


@pytest.fixture(scope="module")
def real_index(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tempomem.recall.embedding import LocalMiniLMEmbedder
    from tempomem.recall.index import MemoryIndex
    from tempomem.storage.markdown import Bullet, append_bullets

    root: Path = tmp_path_factory.mktemp("mem")

    def b(i: int, text: str, **kw: Any) -> Bullet:
        return Bullet(
            signifier=kw.pop("signifier", "–"),
            text=text,
            id=f"r{i}",
            type=kw.pop("type", "note"),
            status=kw.pop("status", "open"),
            recorded=kw.pop("recorded", "2026-07-06T12:00:00.000Z"),
            **kw,
        )

    append_bullets(
        root / "daily" / "2026-07-06.md",
        "2026-07-06",
        [
            b(
                1,
                "Ship the 0.9 release of the billing service.",
                signifier="[x]",
                type="task",
                status="done",
                source_session="web:secret-thread",
            ),
            b(2, "Morgan prefers green tea in the morning.", source_session=None),
            b(3, "The billing service release was cancelled.", status="dropped"),
            b(4, "Morgan's cat is called Pixel.", source_session="web:secret-thread"),
        ],
    )
    return MemoryIndex(root, LocalMiniLMEmbedder())


def test_integration_REC15_REC14_real_index_status_prefix_and_dropped_excluded(real_index: Any) -> None:
    result = memory_recall(real_index, query="billing service release", now=NOW, tz=UTC)
    assert result.mode == "hybrid"
    ids = [h.id for h in result.hits]
    assert "r1" in ids and "r3" not in ids
    assert (
        "[recorded 2026-07-06T12:00:00.000Z] [done] Ship the 0.9 release of the billing service."
        in result.text
    )
    assert "secret-thread" not in result.text and "secret-thread" not in result.model_dump_json()


def test_integration_PROV16_real_index_unknown_source(real_index: Any) -> None:
    result = memory_recall(real_index, query="What does Morgan like to drink?", now=NOW, tz=UTC)
    assert result.hits[0].id == "r2"
    assert f"Morgan prefers green tea in the morning. ({SOURCE_UNKNOWN})" in result.text
    # Scores are ranking evidence: every delivered hit survived the tail cut relative to the best.
    best = result.hits[0].score
    assert all(best - h.score <= TAIL_MARGIN + 1e-9 for h in result.hits)


# --------------------------------------------------------------------------------------------------
# Preferences & lessons section (GUIDE-01..GUIDE-05)


def pref(kind: str = "preference", scope: str = "user:ann") -> str:
    return json.dumps([{"kind": kind, "scope": scope, "key": "drink", "value": "tea"}])


def test_GUIDE01_top_eight_and_floor_GUIDE04_omitted_when_none() -> None:
    from tempomem.recall.guidance import guidance_lines

    top = hit(0.70, "Ann prefers tea.", labels=pref())
    assert guidance_lines([top], now=NOW, tz=UTC) == ["- preference (user): Ann prefers tea."]
    assert guidance_lines([hit(0.6499, labels=pref())], now=NOW, tz=UTC) == []
    ninth = hit(0.70, "Ninth.", labels=pref())
    assert guidance_lines([*(hit(0.9) for _ in range(8)), ninth], now=NOW, tz=UTC) == []


def test_GUIDE02_scope_precedence_then_score_and_six_lines_GUIDE17_no_scope_ids() -> None:
    from tempomem.recall.guidance import guidance_lines

    agent = hit(0.95, "agent lesson", labels=pref("lesson", "agent"))
    conv = hit(0.90, "conv pref", labels=pref(scope="conversation:web:secret-thread"))
    user_low = hit(0.80, "user low", labels=pref())
    user_high = hit(0.85, "user high", labels=pref())
    lines = guidance_lines([agent, conv, user_low, user_high], now=NOW, tz=UTC)
    assert [ln.split(": ", 1)[1] for ln in lines] == ["user high", "user low", "conv pref", "agent lesson"]
    assert "secret-thread" not in "\n".join(lines)
    many = [hit(0.9, f"p{i}", labels=pref()) for i in range(8)]
    assert len(guidance_lines(many, now=NOW, tz=UTC)) == 6


def test_GUIDE03_explicit_kind_may_show_below_floor_lines() -> None:
    from tempomem.recall.guidance import guidance_lines

    weak = [hit(0.30, "weak pref", labels=pref()), hit(0.29, "weak lesson", labels=pref("lesson"))]
    assert guidance_lines(weak, now=NOW, tz=UTC) == []
    assert guidance_lines(weak, now=NOW, tz=UTC, kind="preference") == ["- preference (user): weak pref"]


def test_GUIDE01_GUIDE02_a_skipped_line_skips_only_itself_and_the_best_scope_of_a_line_wins() -> None:
    """Lines left out (dropped, forgotten, below the floor, ended) ahead of eligible ones leave the rest
    in; a line with several eligible labels shows under its most specific scope, whatever their order."""
    from tempomem.recall.guidance import guidance_lines

    both = json.dumps(
        [
            {"kind": "lesson", "scope": "agent", "key": "k", "value": "v"},
            {"kind": "preference", "scope": "conversation:web:t", "key": "k", "value": "v"},
            {"kind": "preference", "scope": "user:ann", "key": "k", "value": "v"},
            {"kind": "lesson", "scope": "agent", "key": "k2", "value": "v"},
        ]
    )
    candidates = [
        hit(0.90, "dropped", labels=pref(), status="dropped"),
        hit(0.90, "forgotten", labels=pref(), status="invalidated", id="m-forgot"),
        hit(0.50, "weak", labels=pref()),
        hit(0.90, "ended", labels=pref(), valid_to="2026-01-01"),
        hit(0.80, "kept", labels=both),
    ]
    lines = guidance_lines(candidates, now=NOW, tz=UTC, superseded_ids=set())
    assert lines == ["- preference (user): kept"]


def test_REC16_REC36_the_cut_keeps_the_backend_order_past_a_dropped_hit() -> None:
    """Hits out of score order: one beyond the margin or under the floor in the middle drops alone; of
    two equal best scores the first is the best; a best exactly at the floor applies the floor."""
    top, far, low, close = hit(0.90), hit(0.70), hit(0.64), hit(0.85)
    assert tail_cut([top, far, close]) == [top, close]
    assert tail_cut([top, low, close], margin=0.5) == [top, close]
    twin_a, twin_b = hit(0.80), hit(0.80)
    assert tail_cut([twin_a, twin_b, hit(0.60)], margin=0.19) == [twin_a, twin_b]
    at_floor, under = hit(0.65), hit(0.649)
    assert tail_cut([at_floor, under], floor=0.65) == [at_floor]


def test_REC38_conflict_note_counts_the_other_conflicts() -> None:
    c = [Conflict("person:ann", f"other:k{i}", "agent", ("a", "b")) for i in range(3)]
    assert conflict_note(c[:1]) == (
        f"{CONFLICT_PREFIX} the top results hold different current values for k0: a / b. "
        "Weigh them; do not pick one silently."
    )
    assert conflict_note(c[:2]).endswith("k0: a / b (and 1 more). Weigh them; do not pick one silently.")
    assert conflict_note(c).endswith("k0: a / b (and 2 more). Weigh them; do not pick one silently.")


def test_GUIDE13_label_values_as_text() -> None:
    assert value_text(True) == "yes" and value_text(False) == "no"
    assert value_text(["a", 2, {"x": False}]) == "a, 2, x: no"
    assert value_text("  two   words ") == "two words"


def test_GUIDE04_GUIDE05_tool_section_order_switch_and_about() -> None:
    hits = [hit(0.80, "Ann prefers tea.", labels=pref()), hit(0.79, "Plain fact.")]
    result = memory_recall(FakeBackend(hits), query="tea", now=NOW, tz=UTC)
    assert result.text.splitlines()[:2] == ["Preferences & lessons:", "- preference (user): Ann prefers tea."]
    assert result.text.splitlines()[2].startswith("0.800 [recorded")
    off = memory_recall(FakeBackend(hits), query="tea", now=NOW, tz=UTC, guidance=False)
    assert off.text == render_shaped(shape_hits(hits, now=NOW, tz=UTC, limit=8))
    about = memory_recall(FakeBackend(hits), query="tea", about="person:ann", now=NOW, tz=UTC)
    assert about.text == off.text
    plain = [hit(0.80, "No labels.")]
    assert (
        memory_recall(FakeBackend(plain), query="x", now=NOW, tz=UTC).text
        == memory_recall(FakeBackend(plain), query="x", now=NOW, tz=UTC, guidance=False).text
    )


def test_INTENT29_the_recall_description_says_an_old_date_alone_proves_nothing() -> None:
    """INTENT-29 [GUIDE]: automatic exclusion of ended dated lines does not prove what an old date meant;
    the model-facing description says to review, remove or retype ambiguous dated sources."""
    for run_history, journal in ((True, True), (False, False)):
        text = memory_recall_description(run_history_available=run_history, journal_available=journal)
        assert "an old date alone does not prove what it meant" in text
        assert "review, remove or retype such sources before relying on what is current" in text
