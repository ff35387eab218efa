"""The explicit MemoryRecall fact sheet (REC-49, GUIDE-05, GUIDE-13, REC-38, INTENT-19, AMB-27, AMB-30).

Hand-made ``graph.jsonl`` and ``daily/`` files under tmp_path written with the real storage writers; the
search backend returns fixed hybrid hits so the rest of the result is exact.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from tempomem.recall.fact_sheet import FACT_SHEET_HEADING, MAX_ROWS, fact_sheet, sheet_conflict_note
from tempomem.recall.graph_read import GraphReader
from tempomem.recall.search import Hit
from tempomem.recall.tools import NO_HITS_TEXT, memory_recall
from tests.helpers.labelled_graph import SECRET_SESSION, fact, line, write

NOW = datetime(2026, 9, 10, 12, 0, tzinfo=UTC)


def sheet(reader: GraphReader, query: str, **kw: object) -> str:
    return fact_sheet(query, reader, now=NOW, tz=UTC, **kw).text  # type: ignore[arg-type]


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        return list(self.hits)


HIT = Hit(
    id="h-1",
    text="Morgan likes tea.",
    day="2026-09-06",
    recorded="2026-09-06T10:00:00.000Z",
    type="fact",
    status="open",
    score=0.81,
    mode="hybrid",
    source_session="web:t",
    entities=("person:morgan",),
)


def test_REC49_keys_drop_other_and_values_are_text(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan speaks two languages.", [fact("other:languages", ["Polish", "Spanish"])]),
            line("Morgan's desk.", [fact("other:desk", {"floor": 3, "window": True})]),
        ],
    )
    text = sheet(reader, "What languages does Morgan speak?")
    assert text == "\n".join(
        [
            FACT_SHEET_HEADING,
            "Morgan:",
            "- desk: floor: 3; window: yes (you said, recorded 2026-09-06)",
            "- languages: Polish, Spanish (you said, recorded 2026-09-06)",
        ]
    )
    assert "other:" not in text and "[" not in text and '"' not in text and "{" not in text


def test_REC49_entity_driven_any_type_by_name_or_ref(tmp_path: Path) -> None:
    reader = write(
        tmp_path, [line("Acme is in Lisbon.", [fact("city", "Lisbon", subject="org:acme")], "org:acme")]
    )
    assert "Acme:\n- city: Lisbon" in sheet(reader, "where is acme based?")
    assert "Acme:\n- city: Lisbon" in sheet(reader, "org:acme")
    assert sheet(reader, "where is Acmes based?") == ""  # word boundaries (AMB-56)
    assert sheet(reader, "") == ""


def test_REC38_conflicting_current_values_are_shown_and_noted(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan works at Acme.", [fact("employer", "Acme")], recorded="2026-09-01T10:00:00.000Z"),
            line(
                "Morgan works at Globex.", [fact("employer", "Globex")], recorded="2026-09-05T10:00:00.000Z"
            ),
        ],
    )
    result = memory_recall(Backend([HIT]), query="Morgan's employer", now=NOW, tz=UTC, graph=reader)
    assert result.evidence == "conflicting"
    assert result.text.splitlines()[0].startswith(
        "Conflicting values: the fact sheet holds different current"
    )
    assert "- employer: Globex (you said, recorded 2026-09-05, conflicting)" in result.text
    assert "- employer: Acme (you said, recorded 2026-09-01, conflicting)" in result.text


def test_INTENT19_superseded_and_ended_rows_stay_as_history(tmp_path: Path) -> None:
    old = line(
        "Morgan worked at Initech.",
        [fact("employer", "Initech")],
        id="c-old",
        status="invalidated",
        recorded="2026-01-02T10:00:00.000Z",
    )
    new = line("Morgan works at Acme.", [fact("employer", "Acme")], recorded="2026-09-01T10:00:00.000Z")
    gone = line(
        "Morgan's visa.", [fact("visa", "B1", validTo="2026-08-31")], recorded="2026-03-01T10:00:00.000Z"
    )
    event = line(
        "Morgan's trip.",
        [fact("trip", "Rome")],
        type="event",
        due="2026-09-01",
        recorded="2026-08-01T10:00:00.000Z",
    )
    reader = write(tmp_path, [old, new, gone, event])
    text = sheet(reader, "Morgan", superseded_ids={"c-old"})
    assert "- employer: Acme (you said, recorded 2026-09-01)" in text
    assert "- employer: Initech (you said, recorded 2026-01-02, superseded)" in text
    assert "- visa: B1 (you said, recorded 2026-03-01, ended 2026-08-31)" in text  # the label's own end
    assert "- trip: Rome (you said, recorded 2026-08-01, ended 2026-09-01)" in text  # the line's end
    assert text.index("Acme") < text.index("Initech")  # current first, then history
    result = memory_recall(
        Backend([HIT]), query="Morgan", now=NOW, tz=UTC, graph=reader, superseded_ids={"c-old"}
    )
    assert result.evidence is None  # history never conflicts with the current value


def test_REC14_dropped_and_forgotten_lines_never_appear(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan likes tea.", [fact("drink", "tea")]),
            line("Morgan likes coffee.", [fact("drink", "coffee")], signifier="[-]", status="dropped"),
            line("Morgan likes juice.", [fact("drink", "juice")], status="invalidated", id="c-forgot"),
        ],
    )
    text = sheet(reader, "Morgan", superseded_ids=set())  # no edge: an invalidation is a forget (AMB-28)
    assert "tea" in text and "coffee" not in text and "juice" not in text


def test_PROV19_no_ids_or_provenance(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")], id="c-secret-id")])
    text = sheet(reader, "person:morgan")
    assert "tea" in text
    for secret in (SECRET_SESSION, "thread-secret", "c-secret-id", "person:morgan", "user:owner"):
        assert secret not in text


def test_sheet_is_bounded(tmp_path: Path) -> None:
    reader = write(
        tmp_path, [line(f"fact {i}", [fact(f"key {i:02d}", f"v{i}")]) for i in range(MAX_ROWS + 5)]
    )
    assert len(sheet(reader, "Morgan").splitlines()) == 2 + MAX_ROWS


def test_AMB30_order_notes_guidance_sheet_hits_and_no_graph_is_unchanged(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")])])
    backend = Backend([HIT])
    on = memory_recall(backend, query="Morgan", now=NOW, tz=UTC, graph=reader)
    nobody = memory_recall(backend, query="likes tea", now=NOW, tz=UTC, graph=reader)  # names no entity
    assert FACT_SHEET_HEADING not in nobody.text
    assert on.hits == nobody.hits  # GUIDE-05: the hits are unchanged by the sheet
    sheet_text = sheet(reader, "Morgan")
    assert on.text == sheet_text + "\n" + nobody.text  # the sheet comes before the hits
    plain = memory_recall(backend, query="Morgan", now=NOW, tz=UTC)  # Lite/Journal: no graph, as before
    assert FACT_SHEET_HEADING not in plain.text and plain.text.startswith("0.810 ")


def test_about_request_gets_the_sheet_of_that_entity(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")])])
    result = memory_recall(
        Backend([HIT]), query="drinks", about="person:morgan", now=NOW, tz=UTC, graph=reader
    )
    assert "Morgan:\n- drink: tea" in result.text


def test_REC49_conflict_note_renders_values_as_text() -> None:
    hits = [
        HIT.model_copy(update={"id": f"h{i}", "labels": json.dumps([fact("other:languages", value)])})
        for i, value in enumerate([["Polish"], ["Spanish", "Czech"]])
    ]
    result = memory_recall(Backend(hits), query="languages", now=NOW, tz=UTC)
    assert result.evidence == "conflicting"
    note = result.text.splitlines()[0]
    assert "for languages: Polish / Spanish, Czech." in note and "[" not in note and '"' not in note


def _at(day: str) -> str:
    return f"2026-{day}T10:00:00.000Z"


def test_REC49_REC38_INTENT19_the_whole_sheet_of_two_entities(tmp_path: Path) -> None:
    """Exact text: a dropped line ahead of the rest skips only itself; keys in case-insensitive order,
    one key's scopes apart (no conflict), a conflict newest first, a repeated value once with its latest
    recording, history newest first after the current value; the note counts the other conflicts."""
    lines = [
        line("Morgan likes coffee.", [fact("drink", "coffee")], signifier="[-]", status="dropped"),
        line("Morgan works at Acme.", [fact("employer", "Acme")], recorded=_at("09-01")),
        line("Morgan works at Globex.", [fact("employer", "Globex")], recorded=_at("09-05")),
        line("Morgan plays chess.", [fact("Hobby", "chess")], recorded=_at("09-02")),
        line("Morgan has a cat.", [fact("pet", "cat")], recorded=_at("09-03")),
        line("Morgan has a Cat.", [fact("pet", "Cat")], recorded=_at("09-04")),
        line(
            "Morgan lived in Oslo.",
            [fact("home", "Oslo")],
            id="c-h1",
            status="invalidated",
            recorded=_at("01-01"),
        ),
        line(
            "Morgan lived in Bergen.",
            [fact("home", "Bergen")],
            id="c-h2",
            status="invalidated",
            recorded=_at("02-01"),
        ),
        line("Morgan lives in Lisbon.", [fact("home", "Lisbon")], recorded=_at("09-06")),
        line(
            "Morgan eats vegan at home.", [fact("diet", "vegan", scope="user:owner")], recorded=_at("09-06")
        ),
        line(
            "Morgan eats vegetarian at work.",
            [fact("diet", "vegetarian", scope="team:work")],
            recorded=_at("09-06"),
        ),
        line("Acme is big.", [fact("size", "big", subject="org:acme")], "org:acme", recorded=_at("09-01")),
        line(
            "Acme is small.", [fact("size", "small", subject="org:acme")], "org:acme", recorded=_at("09-02")
        ),
    ]
    result = fact_sheet(
        "Morgan and Acme", write(tmp_path, lines), now=NOW, tz=UTC, superseded_ids={"c-h1", "c-h2"}
    )
    assert result.text.splitlines() == [
        FACT_SHEET_HEADING,
        "Morgan:",
        "- diet: vegetarian (you said, recorded 2026-09-06)",
        "- diet: vegan (you said, recorded 2026-09-06)",
        "- employer: Globex (you said, recorded 2026-09-05, conflicting)",
        "- employer: Acme (you said, recorded 2026-09-01, conflicting)",
        "- Hobby: chess (you said, recorded 2026-09-02)",
        "- home: Lisbon (you said, recorded 2026-09-06)",
        "- home: Bergen (you said, recorded 2026-02-01, superseded)",
        "- home: Oslo (you said, recorded 2026-01-01, superseded)",
        "- pet: Cat (you said, recorded 2026-09-04)",
        "Acme:",
        "- size: small (you said, recorded 2026-09-02, conflicting)",
        "- size: big (you said, recorded 2026-09-01, conflicting)",
    ]
    assert [(c.subject, c.key, c.scope, c.values) for c in result.conflicts] == [
        ("person:morgan", "employer", "user:owner", ("Globex", "Acme")),
        ("org:acme", "size", "user:owner", ("small", "big")),
    ]
    assert sheet_conflict_note(result.conflicts) == (
        "Conflicting values: the fact sheet holds different current values for employer: Globex / Acme "
        "(and 1 more). Weigh them; do not pick one silently."
    )
    assert sheet_conflict_note(result.conflicts[1:]) == (
        "Conflicting values: the fact sheet holds different current values for size: small / big. "
        "Weigh them; do not pick one silently."
    )


def test_sheet_rows_are_shared_by_the_entities_in_order(tmp_path: Path) -> None:
    """MAX_ROWS covers all entities: the first takes what it has, the next the rest, a third none."""
    morgan = [line(f"m {i}", [fact(f"m{i:02d}", "x")]) for i in range(MAX_ROWS - 4)]
    acme = [line(f"a {i}", [fact(f"a{i:02d}", "y", subject="org:acme")], "org:acme") for i in range(10)]
    result = sheet(
        write(tmp_path, morgan + acme, {"person:morgan": "Morgan", "person:ana": "Ana"}), "Morgan, Acme, Ana"
    )
    rows = result.splitlines()
    assert len(rows) == 1 + 2 + MAX_ROWS
    assert rows[1] == "Morgan:" and rows[MAX_ROWS - 2] == "Acme:" and rows[-1].startswith("- a03: y")


# --------------------------------------------------------------------------------------------------
# memory_recall hands each of its arguments to every part of the result: the hits (with and without
# graph expansion), the guidance section and the fact sheet. Each check below differs from what the
# part gives with that argument left at its default.

KIRITIMATI = ZoneInfo("Pacific/Kiritimati")  # UTC+14: NOW (noon UTC on 09-10) is already 09-11 there


def _hit(hid: str, score: float, **kw: object) -> Hit:
    return HIT.model_copy(update={"id": hid, "score": score, "text": f"line {hid}", **kw})


def _currentness(result: object) -> dict[str, str | None]:
    return {h.id: h.currentness for h in result.hits}  # type: ignore[attr-defined]


def test_REC43_REC48_REC14_memory_recall_passes_zone_supersession_and_intent_expiry_to_the_hits(
    tmp_path: Path,
) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")])])
    hits = [
        _hit("h-forgot", 0.82, status="invalidated"),  # no supersession edge: a forget (AMB-28)
        _hit("h-visa", 0.81, valid_to="2026-09-10"),  # a date: current through the host's local day
        _hit("h-note", 0.80, type="note", due="2026-09-01"),  # ends only under intentExpiry
        _hit("h-sup", 0.80),
    ]
    expected = {"h-visa": "ended", "h-note": "ended", "h-sup": "superseded"}
    for graph in (None, reader):  # plain shaping, and the expansion path that recomputes currentness
        result = memory_recall(
            Backend(hits), query="tea", limit=3, now=NOW, tz=KIRITIMATI, graph=graph,
            superseded_ids={"h-sup"}, intent_expiry=True,
        )  # fmt: skip
        assert _currentness(result) == expected, graph
    defaults = memory_recall(Backend(hits), query="tea", limit=3, now=NOW, tz=UTC)
    assert _currentness(defaults) == {"h-forgot": "superseded", "h-visa": "current", "h-note": "current"}


def test_REC45_memory_recall_defaults_to_an_aware_now_in_the_host_zone() -> None:
    hits = [
        _hit("h-naive", 0.81, valid_to="2999-01-01T00:00:00"),  # a naive end is read in the host zone
        _hit("h-aware", 0.80, valid_to="2999-01-01T00:00:00Z"),
        _hit("h-past", 0.80, valid_to="2000-01-01"),
        _hit("h-note", 0.80, type="note", due="2000-01-01"),  # intentExpiry is off by default
    ]
    result = memory_recall(Backend(hits), query="tea")
    assert _currentness(result) == {
        "h-naive": "current",
        "h-aware": "current",
        "h-past": "ended",
        "h-note": "current",
    }


def _guidance(hid: str, score: float, kind: str, **kw: object) -> Hit:
    label = [{"kind": kind, "scope": "user:owner", "key": f"k-{hid}", "value": "v"}]
    return _hit(hid, score, labels=json.dumps(label), **kw)


def test_GUIDE02_GUIDE03_memory_recall_passes_kind_zone_and_supersession_to_the_guidance_section() -> None:
    hits = [
        _guidance("g-pref", 0.81, "preference"),
        _guidance("g-lesson", 0.80, "lesson"),
        _guidance("g-ended", 0.80, "preference", valid_to="2026-09-10"),  # ended in Kiritimati only
        _guidance("g-sup", 0.80, "preference"),
    ]

    def section(**kw: object) -> list[str]:
        text = memory_recall(Backend(hits), query="tea", now=NOW, **kw).text  # type: ignore[arg-type]
        return [ln for ln in text.splitlines() if ln.startswith("- ")]

    assert section(tz=UTC) == [
        "- preference (user): line g-pref",
        "- lesson (user): line g-lesson",
        "- preference (user): line g-ended",
        "- preference (user): line g-sup",
    ]
    assert section(tz=KIRITIMATI, superseded_ids={"g-sup"}) == [
        "- preference (user): line g-pref",
        "- lesson (user): line g-lesson",
    ]
    assert section(tz=UTC, kind="lesson") == ["- lesson (user): line g-lesson"]


def test_REC49_INTENT19_memory_recall_passes_zone_supersession_and_intent_expiry_to_the_fact_sheet(
    tmp_path: Path,
) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan likes tea.", [fact("drink", "tea")]),
            line("Morgan's visa.", [fact("visa", "B1", validTo="2026-09-10")]),
            line("Morgan will call.", [fact("call", "Friday")], type="note", due="2026-09-01"),
            line("Morgan likes juice.", [fact("juice", "yes")], status="invalidated", id="c-gone"),
        ],
    )
    args: dict[str, object] = {"tz": KIRITIMATI, "superseded_ids": set(), "intent_expiry": True}
    expected = fact_sheet("Morgan", reader, now=NOW, **args).text  # type: ignore[arg-type]
    assert "ended 2026-09-10" in expected and "ended 2026-09-01" in expected and "juice" not in expected
    result = memory_recall(Backend([HIT]), query="Morgan", now=NOW, graph=reader, **args)  # type: ignore[arg-type]
    assert result.text.startswith(expected + "\n")


def test_REC49_an_empty_recall_still_shows_the_fact_sheet(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")])])
    result = memory_recall(Backend([]), query="Morgan", now=NOW, tz=UTC, graph=reader)
    assert result.text == sheet(reader, "Morgan") + "\n" + NO_HITS_TEXT
    assert result.hits == []


def test_REC42_lexical_results_get_no_fact_sheet_and_report_their_mode(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")])])
    lexical = memory_recall(
        Backend([HIT.model_copy(update={"mode": "lexical"})]), query="Morgan", now=NOW, tz=UTC, graph=reader
    )
    assert FACT_SHEET_HEADING not in lexical.text and lexical.mode == "lexical"
    vector = memory_recall(Backend([HIT.model_copy(update={"mode": "vector"})]), query="x", now=NOW, tz=UTC)
    assert vector.mode is None and vector.text.startswith("0.810 ")  # neither hybrid nor lexical


def test_AMB30_guidance_and_fact_sheet_are_one_section_on_consecutive_lines(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan likes tea.", [fact("drink", "tea")])])
    pref = _guidance("g-pref", 0.81, "preference")
    result = memory_recall(Backend([pref]), query="Morgan", now=NOW, tz=UTC, graph=reader)
    assert result.text.startswith(
        "\n".join(["Preferences & lessons:", "- preference (user): line g-pref", sheet(reader, "Morgan")])
        + "\n0.810 "
    )


def test_REC38_conflicting_hits_keep_their_own_note_when_the_sheet_conflicts_too(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan works at Acme.", [fact("employer", "Acme")], recorded="2026-09-01T10:00:00.000Z"),
            line("Morgan works at Globex.", [fact("employer", "Globex")]),
        ],
    )
    hits = [
        _hit(f"h{i}", 0.81, labels=json.dumps([fact("employer", value)]))
        for i, value in enumerate(["Acme", "Initech"])
    ]
    result = memory_recall(Backend(hits), query="Morgan", now=NOW, tz=UTC, graph=reader)
    assert result.evidence == "conflicting"
    notes = [ln for ln in result.text.splitlines() if ln.startswith("Conflicting values")]
    assert notes == [result.text.splitlines()[0]]  # one note, the hits' own (REC-39)
    assert "Acme / Initech" in notes[0]
