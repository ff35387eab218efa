"""Automatic person cards (GUIDE-08..GUIDE-18, AMB-40, AMB-56, PROV-19, AUTO-15).

Hand-made ``graph.jsonl`` and ``daily/`` files under tmp_path, written with the real storage writers.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tempomem.recall.auto_block import TurnGate, automatic_lookup
from tempomem.recall.graph_read import GraphReader
from tempomem.recall.person_card import (
    CARD_HEADING,
    CONFLICTING,
    PERSON_CARD_MAX_BYTES,
    age_text,
    match_people,
    person_cards,
)
from tempomem.recall.search import Hit
from tempomem.storage.graph import EntityRow
from tempomem.storage.limits import AUTO_CONTEXT_MAX_BYTES
from tests.helpers.labelled_graph import SECRET_SESSION, fact, line, write

NOW = datetime(2026, 9, 10, 12, 0, tzinfo=UTC)


def cards(reader: GraphReader, message: str, **kw: Any) -> str:
    return person_cards(message, reader, now=NOW, tz=UTC, **kw).text


HOME = line("Morgan grew up in Maple Harbor.", [fact("home town", "Maple Harbor")])
EXPECTED = f"{CARD_HEADING}\n\nMorgan:\n- home town: Maple Harbor (you said, recorded 2026-09-06)"


def rows(**names: str) -> dict[str, EntityRow]:
    return {eid: EntityRow(id=eid, name=name, type="person") for eid, name in names.items()}


@pytest.mark.parametrize(
    "message",
    ["Morgan", "¿Dónde trabaja Morgan?", "Gdzie pracuje Morgan?", "what about MORGAN", "person:morgan?"],
)
def test_GUIDE08_AMB56_exact_name_or_person_id_in_any_language(message: str) -> None:
    people = rows(**{"person:morgan": "Morgan"})
    assert [p.id for p in match_people(message, people)] == ["person:morgan"]


@pytest.mark.parametrize("message", ["Morganite is a gem", "Morga?", "MorganX", "_morgan"])
def test_AMB56_names_match_only_on_word_boundaries(message: str) -> None:
    assert match_people(message, rows(**{"person:morgan": "Morgan"})) == []


@pytest.mark.parametrize("message", ["person:morgans", "xperson:morgan", "person:morgan-b", "Person:Morgan"])
def test_AMB56_person_id_reference_is_exact(message: str) -> None:
    assert match_people(message, rows(**{"person:morgan": "Lee Morgan"})) == []


def test_AMB56_full_display_name_nfc_casefold_and_order_of_mention() -> None:
    people = rows(**{"person:lee": "Morgan Lee", "person:zoe": "Zoë"})
    assert match_people("Morgan is here", people) == []  # the full name is required
    decomposed = "Did ZOE\u0308 meet morgan lee?"  # NFC + casefold on both sides
    assert [p.id for p in match_people(decomposed, people)] == ["person:zoe", "person:lee"]


def test_AMB56_only_person_entities_get_cards(tmp_path: Path) -> None:
    reader = write(tmp_path, [HOME, line("Acme is big.", [fact("size", "big")], "org:acme")])
    assert cards(reader, "Tell me about Acme") == ""
    assert cards(reader, "org:acme") == ""


def test_GUIDE09_card_line_form(tmp_path: Path) -> None:
    reader = write(tmp_path, [HOME])
    assert cards(reader, "¿Dónde trabaja Morgan?") == EXPECTED


def test_GUIDE09_only_user_stated_or_document_facts(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan's passport says Canada.", [fact("citizenship", "Canada", "document")]),
            line("Morgan may like jazz.", [fact("music", "jazz", "assistant")]),
            line("Morgan's pet is a cat.", [fact("pet", "cat", None)], src="user"),
        ],
    )
    text = cards(reader, "Morgan")
    assert "- citizenship: Canada (from a document, recorded 2026-09-06)" in text
    assert "- pet: cat (you said, recorded 2026-09-06)" in text
    assert "jazz" not in text


def test_GUIDE09_AMB40_age_from_a_full_birth_date(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan was born 1990-09-11.", [fact("birth date", "1990-09-11")])])
    assert "- birth date: 1990-09-11 (you said, recorded 2026-09-06)\n- age: 35" in cards(reader, "Morgan")


def test_AMB40_age_rules() -> None:
    today = datetime(2026, 9, 10).date()
    assert age_text("1990-09-10", today) == "36"
    assert age_text("2025-06-20", today) == "1 year 2 months"
    assert age_text("2026-03-01", today) == "6 months"
    assert age_text("1990-09", today) is None  # partial: no age
    assert age_text("2027-01-01", today) is None


def test_GUIDE10_keys_are_never_filtered_by_the_question(tmp_path: Path) -> None:
    reader = write(tmp_path, [HOME, line("Morgan works at Acme.", [fact("employer", "Acme")])])
    text = cards(reader, "Where does Morgan work?")
    assert "- home town: Maple Harbor" in text and "- employer: Acme" in text


def test_GUIDE11_two_current_distinct_values_are_conflicting(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan works at Acme.", [fact("employer", "Acme")]),
            line("Morgan works at Globex.", [fact("employer", "Globex")]),
            line("Morgan works at  acme.", [fact("employer", "acme")]),  # same value, not a conflict
            HOME,
        ],
    )
    text = cards(reader, "Morgan")
    assert f"- employer: {CONFLICTING}" in text
    assert "Globex" not in text


def test_GUIDE11_superseded_or_ended_values_are_not_current(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            line("Morgan worked at Initech.", [fact("employer", "Initech")], status="invalidated"),
            line("Morgan was at Globex.", [fact("employer", "Globex")], valid_to="2026-01-01"),
            line("Morgan works at Acme.", [fact("employer", "Acme")]),
        ],
    )
    text = cards(reader, "Morgan")
    assert "- employer: Acme (you said, recorded 2026-09-06)" in text
    assert CONFLICTING not in text


def test_GUIDE12_first_person_wording_never_selects_the_owner_card(tmp_path: Path) -> None:
    owner = line(
        "My home town is Oakville.", [fact("home town", "Oakville", subject="person:owner")], "person:owner"
    )
    reader = write(tmp_path, [owner], {"person:owner": "Sam Owner"})
    assert cards(reader, "Where did I grow up? What is my home town?") == ""
    assert "Oakville" in cards(reader, "Where did Sam Owner grow up?")  # only the exact name selects it


def test_GUIDE13_keys_drop_other_namespace_and_values_are_text(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [line("Morgan speaks two languages.", [fact("other:languages", ["Polish", "Spanish"])])],
    )
    text = cards(reader, "Morgan")
    assert "- languages: Polish, Spanish (you said" in text
    assert "other:" not in text and "[" not in text and '"' not in text


def test_GUIDE16_intent_expiry_drops_dated_and_done_notes(tmp_path: Path) -> None:
    reader = write(
        tmp_path,
        [
            HOME,
            line("Morgan visits in October.", [fact("visit", "October")], type="note", due="2026-10-01"),
            line("Morgan's gift was bought.", [fact("gift", "bought")], type="task", status="done"),
        ],
    )
    assert "- visit: October" in cards(reader, "Morgan")
    expired = cards(reader, "Morgan", intent_expiry=True)
    assert "visit" not in expired and "gift" not in expired
    assert "home town" in expired


def test_GUIDE17_PROV19_cards_never_expose_provenance_or_ids(tmp_path: Path) -> None:
    unknown = line("Morgan likes tea.", [fact("drink", "tea")], source_session=None)
    reader = write(tmp_path, [HOME, unknown])
    text = cards(reader, "Morgan")
    assert "drink: tea" in text
    for secret in (SECRET_SESSION, "thread-secret", "source conversation", "person:morgan", HOME.id, "c-"):
        assert secret not in text


def test_GUIDE15_card_fits_its_budget_and_never_truncates_a_line(tmp_path: Path) -> None:
    many = [line(f"Morgan fact {i}.", [fact(f"key {i:02d}", "v" * 80)]) for i in range(40)]
    reader = write(tmp_path, many)
    result = person_cards("Morgan", reader, now=NOW, tz=UTC)
    assert 0 < result.byte_size <= PERSON_CARD_MAX_BYTES
    assert result.byte_size == len(result.text.encode())
    for row in result.text.splitlines()[3:]:
        assert row.endswith("(you said, recorded 2026-09-06)")  # whole lines only
    assert person_cards("Morgan", reader, now=NOW, tz=UTC, budget=60).text == ""


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        return list(self.hits)


def auto_hit(i: int, score: float = 0.80) -> Hit:
    return Hit(
        id=f"h{i}", text=f"Morgan detail {i} " + "x" * 300, day="2026-09-01",
        recorded="2026-09-01T10:00:00.000Z", type="fact", status="open", score=score, mode="hybrid",
        source_session="web:other",
    )  # fmt: skip


OWNER = TurnGate(verified_owner=True, surface="web")


def test_GUIDE15_AUTO15_whole_automatic_context_stays_within_budget(tmp_path: Path) -> None:
    many = [line(f"Morgan fact {i}.", [fact(f"key {i:02d}", "v" * 80)]) for i in range(40)]
    reader = write(tmp_path, many)
    message = "Tell me everything you know about Morgan please"
    lookup = automatic_lookup(
        Backend([auto_hit(i) for i in range(3)]), message, now=NOW, tz=UTC, gate=OWNER, cards_from=reader
    )
    assert lookup.cards.text and lookup.block.text
    assert len(lookup.context_text.encode()) <= AUTO_CONTEXT_MAX_BYTES


def test_GUIDE15_card_bytes_count_against_the_block_share(tmp_path: Path) -> None:
    many = [line(f"Morgan fact {i}.", [fact(f"key {i:02d}", "v" * 80)]) for i in range(40)]
    reader = write(tmp_path, many)
    used = 1200  # e.g. an owner profile already in the automatic context
    lookup = automatic_lookup(
        Backend([auto_hit(i) for i in range(3)]), "Tell me everything about Morgan please", now=NOW, tz=UTC,
        gate=OWNER, cards_from=reader, context_bytes_used=used,
    )  # fmt: skip
    assert lookup.cards.byte_size > 0
    assert used + len(lookup.context_text.encode()) <= AUTO_CONTEXT_MAX_BYTES
    assert len(lookup.block.line_ids) < 3  # the block gave way to the card


def test_GUIDE14_card_survives_the_short_message_gate(tmp_path: Path) -> None:
    reader = write(tmp_path, [HOME])
    lookup = automatic_lookup(
        Backend([auto_hit(1)]), "Morgan?", now=NOW, tz=UTC, gate=OWNER, cards_from=reader
    )
    assert lookup.block.suppressed == "short_message"
    assert lookup.cards.text == EXPECTED
    assert lookup.context_text == EXPECTED


@pytest.mark.parametrize(
    "gate",
    [
        TurnGate(verified_owner=False, surface="web"),
        TurnGate(verified_owner=True, surface="telegram"),
        TurnGate(verified_owner=True, surface="web", process_job_wake=True),
    ],
)
def test_GUIDE18_no_card_outside_verified_owner_turns(tmp_path: Path, gate: TurnGate) -> None:
    reader = write(tmp_path, [HOME])
    lookup = automatic_lookup(
        Backend([auto_hit(1)]), "Where is Morgan from?", now=NOW, tz=UTC, gate=gate, cards_from=reader
    )
    assert lookup.cards.text == "" and lookup.context_text == ""


def test_GUIDE08_off_switch_is_byte_identical(tmp_path: Path) -> None:
    reader = write(tmp_path, [HOME])
    hits = [auto_hit(i) for i in range(3)]
    message = "Where did Morgan grow up as a child?"
    off = automatic_lookup(Backend(hits), message, now=NOW, tz=UTC, gate=OWNER)
    off2 = automatic_lookup(Backend(hits), message, now=NOW, tz=UTC, gate=OWNER, cards_from=None)
    on = automatic_lookup(Backend(hits), message, now=NOW, tz=UTC, gate=OWNER, cards_from=reader)
    assert off.block.model_dump_json() == off2.block.model_dump_json()
    assert off.context_text.encode() == off.block.text.encode()
    assert on.context_text != off.context_text  # the switch does something when on
    alex = "Where did Alex grow up as a child?"
    nobody = automatic_lookup(Backend(hits), alex, now=NOW, tz=UTC, gate=OWNER, cards_from=reader)
    plain = automatic_lookup(Backend(hits), alex, now=NOW, tz=UTC, gate=OWNER)
    assert nobody.context_text.encode() == plain.context_text.encode()


def test_AMB40_age_uses_the_host_local_date(tmp_path: Path) -> None:
    reader = write(tmp_path, [line("Morgan's birthday.", [fact("birth date", "1990-09-11")])])
    late = datetime(2026, 9, 10, 23, 30, tzinfo=UTC)  # already 11 September in Warsaw
    assert "- age: 36" in person_cards("Morgan", reader, now=late, tz=ZoneInfo("Europe/Warsaw")).text
    assert "- age: 35" in person_cards("Morgan", reader, now=late, tz=UTC).text


def test_GUIDE11_GUIDE16_a_skipped_line_or_key_leaves_the_rest_in_order(tmp_path: Path) -> None:
    """An expired line ahead of the others, a conflicting key ahead of others, keys that sort differently
    with and without case, the same value twice (the first recording of the day stays) and a birth key
    written with underscores: each card line comes out, in case-insensitive key order."""
    reader = write(
        tmp_path,
        [
            line("Morgan's gift was bought.", [fact("gift", "bought")], type="task", status="done"),
            line("Morgan works at Acme.", [fact("employer", "Acme")]),
            line("Morgan works at Globex.", [fact("employer", "Globex")]),
            line("Morgan plays chess.", [fact("Hobby", "chess")]),
            line("Morgan has a cat.", [fact("pet", "cat")]),
            line("Morgan has a Cat.", [fact("pet", "Cat")]),
            line("Morgan was born 1990-09-11.", [fact("date_of_birth", "1990-09-11")]),
        ],
    )
    assert cards(reader, "Morgan", intent_expiry=True).splitlines()[2:] == [
        "Morgan:",
        "- date_of_birth: 1990-09-11 (you said, recorded 2026-09-06)",
        "- age: 35",
        f"- employer: {CONFLICTING}",
        "- Hobby: chess (you said, recorded 2026-09-06)",
        "- pet: cat (you said, recorded 2026-09-06)",
    ]


@pytest.mark.parametrize(
    ("born", "age"),
    [
        ("2026-09-10", "0 months"),  # born today
        ("2026-08-10", "1 month"),
        ("2026-07-10", "2 months"),
        ("2025-09-10", "1 year"),
        ("2025-08-10", "1 year 1 month"),
        ("2024-09-11", "1 year 11 months"),
        ("2024-09-10", "2"),
        ("2023-09-10", "3"),
        ("2026-09-11", None),  # tomorrow
    ],
)
def test_AMB40_age_at_each_boundary(born: str, age: str | None) -> None:
    assert age_text(born, datetime(2026, 9, 10).date()) == age


def test_GUIDE09_AMB27_which_fact_labels_are_about_the_person() -> None:
    """A label's subject names the person by id or by display name (case aside); without a
    subject it is about the line's own entities, one of them alone is not enough for a line naming two;
    labels that are not facts or lack a key or value are skipped without ending the scan."""
    from tempomem.recall.person_card import entity_fact_labels

    morgan = EntityRow(id="person:morgan", name="Morgan Lee", type="person")
    labels = [
        {"kind": "preference", "key": "tea", "value": "green"},
        "not a label",
        {"kind": "fact", "key": " ", "value": "blank key"},
        {"kind": "fact", "key": "pet", "value": None},
        {"kind": "fact", "key": "city", "value": "Oslo", "subject": "person:morgan"},
        {"kind": "fact", "key": "job", "value": "chef", "subject": "MORGAN lee"},
        {"kind": "fact", "key": "car", "value": "red", "subject": "person:ana"},
        {"kind": "fact", "key": "bike", "value": "blue"},
    ]

    def about(entities: tuple[str, ...]) -> list[str]:
        h = Hit(
            id="m",
            text="t",
            day="2026-09-06",
            recorded="",
            type="fact",
            status="open",
            score=0.0,
            mode="hybrid",
            labels=json.dumps(labels),
            entities=entities,
        )
        return [label["key"] for label in entity_fact_labels(h, morgan)]

    assert about(("person:morgan",)) == ["city", "job", "bike"]
    assert about(("person:ana", "person:morgan")) == ["city", "job"]  # "bike" is about both together
    assert about(()) == ["city", "job"]  # a line naming nobody: unlabelled facts are the owner's
