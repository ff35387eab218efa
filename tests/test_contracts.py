"""Extraction contract (CAP-11..CAP-16, CAP-21, AMB-13): accepted and rejected model output, intent
fields, the UTF-16 guard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tempomem.capture.contracts import (
    REASONS,
    load_exact_json,
    parse_extraction,
    parse_reconcile,
    parse_review,
    utf16_length,
)
from tempomem.storage.limits import CAPTURE_COMPLETION_MAX_UTF16
from tests.helpers.contract_plans import (
    DEPTH3_DUP,
    EMOJI_FAMILY,
    VALID,
    base_plan,
    deleter,
    expect_violation,
    memory,
    plan_with,
    setter,
)

# -- extraction: accepted ------------------------------------------------------------------------------------

ACCEPTED_EXTRACTIONS = [
    ("base", VALID),
    ("empty plan", '{"memories":[],"entities":[],"relations":[]}'),
    ("json whitespace around", " \n\t" + VALID + "\r\n  "),
    ("pretty printed", json.dumps(base_plan(), indent=2)),
    ("ascii escaped", json.dumps(base_plan(), ensure_ascii=True)),
    ("salience 0", plan_with(setter("memories.0.salience", 0))),
    ("salience int 1", plan_with(setter("memories.0.salience", 1))),
    ("salience 1.0", plan_with(setter("memories.0.salience", 1.0))),
    ("labels absent", plan_with(deleter("memories.0.labels"))),
    ("labels empty", plan_with(setter("memories.0.labels", []))),
    ("8 memories", plan_with(setter("memories", [memory(f"Fact number {i}") for i in range(8)]))),
    (
        "24 entities",
        plan_with(
            setter(
                "entities",
                [{"ref": f"e{i}", "name": f"Entity {i}", "type": "concept"} for i in range(22)]
                + base_plan()["entities"],
            )
        ),
    ),
    ("text 1024 bytes", plan_with(setter("memories.0.text", "é" * 512))),
    ("emoji zwj sequence", plan_with(setter("memories.0.text", f"Ada's family {EMOJI_FAMILY} visited"))),
    (
        "ref 32 chars",
        plan_with(
            lambda p: (
                setter("entities.0.ref", "a" * 32)(p),
                setter("memories.0.entities", ["a" * 32])(p),
                setter("memories.1.entities", ["a" * 32, "acme"])(p),
                setter("relations.0.from", "a" * 32)(p),
            )
        ),
    ),
    (
        "orphan entity kept",
        plan_with(lambda p: p["entities"].append({"ref": "bob", "name": "Bob", "type": "person"})),
    ),
    (
        "user and conversation scopes",
        plan_with(
            setter(
                "memories.0.labels",
                [
                    {"kind": "fact", "scope": "user:telegram:42", "key": "home:city", "value": "Oslo"},
                    {
                        "kind": "lesson",
                        "scope": "conversation:abc#2026-01-01",
                        "key": "style:tone",
                        "value": "brief",
                    },
                ],
            )
        ),
    ),
    ("non-latin text", plan_with(setter("memories.0.text", "Ada woli zieloną herbatę — 緑茶が好き"))),
]


@pytest.mark.parametrize(("raw",), [pytest.param(raw, id=name) for name, raw in ACCEPTED_EXTRACTIONS])
def test_extraction_accepts(raw: str) -> None:
    plan = parse_extraction(raw)
    assert plan.model_dump(by_alias=True, exclude_none=True)["memories"] == [
        {"labels": [], **m} for m in json.loads(raw)["memories"]
    ]


def test_extraction_typed_result() -> None:
    plan = parse_extraction(VALID)
    assert plan.memories[0].salience == 0.7 and isinstance(plan.memories[0].salience, float)
    assert plan.memories[0].labels[0].key == "drink:tea"
    assert plan.relations[0].from_ref == "ada" and plan.relations[0].to_ref == "acme"
    assert plan.memories[0].valid_to is None and plan.memories[0].intent_state is None


# -- extraction: rejected ------------------------------------------------------------------------------------

REJECTED_EXTRACTIONS: list[tuple[str, str, str]] = [
    # raw guards
    ("duplicate key at depth 3", DEPTH3_DUP, "duplicate_key"),
    ("duplicate key at top", '{"memories":[],"memories":[],"entities":[],"relations":[]}', "duplicate_key"),
    ("NaN", VALID.replace("0.7", "NaN"), "nan"),
    ("Infinity", VALID.replace("0.7", "Infinity"), "nan"),
    ("-Infinity", VALID.replace("0.7", "-Infinity"), "nan"),
    ("overflow 1e999", VALID.replace("0.7", "1e999"), "nan"),
    ("prose before", "Here is the JSON: " + VALID, "not_json"),
    ("prose after", VALID + " Hope this helps!", "trailing_content"),
    ("two JSON values", VALID + VALID, "trailing_content"),
    ("two JSON values spaced", VALID + "\n" + '{"memories":[]}', "trailing_content"),
    ("code fence", "```json\n" + VALID + "\n```", "not_json"),
    ("think tag", "<think>hmm</think>" + VALID, "not_json"),
    ("truncated", VALID[:-1], "not_json"),
    ("empty", "", "not_json"),
    ("whitespace only", "  \n", "not_json"),
    ("non-JSON whitespace around", "\u00a0" + VALID, "not_json"),
    ("single quotes", VALID.replace('"', "'"), "not_json"),
    ("raw newline in string", VALID.replace("green tea", "green\ntea"), "not_json"),
    ("top-level array", "[" + VALID + "]", "type"),
    ("top-level string", '"memories"', "type"),
    # types, never coerced (CAP-21)
    ("salience string", plan_with(setter("memories.0.salience", "0.7")), "type"),
    ("salience true", plan_with(setter("memories.0.salience", True)), "type"),
    ("salience null", plan_with(setter("memories.0.salience", None)), "type"),
    ("salience list", plan_with(setter("memories.0.salience", [0.7])), "type"),
    ("text number", plan_with(setter("memories.0.text", 7)), "type"),
    ("entities string", plan_with(setter("memories.0.entities", "ada")), "type"),
    ("labels null", plan_with(setter("memories.0.labels", None)), "type"),
    ("memories object", plan_with(setter("memories", {})), "type"),
    # bounds, never clamped (LIM-19)
    ("salience 1.2", plan_with(setter("memories.0.salience", 1.2)), "bounds"),
    ("salience -0.1", plan_with(setter("memories.0.salience", -0.1)), "bounds"),
    ("salience 70 (percent)", plan_with(setter("memories.0.salience", 70)), "bounds"),
    ("9 memories", plan_with(setter("memories", [memory(f"Fact {i}") for i in range(9)])), "bounds"),
    (
        "25 entities",
        plan_with(
            lambda p: p["entities"].extend(
                {"ref": f"e{i}", "name": f"E {i}", "type": "concept"} for i in range(23)
            )
        ),
        "bounds",
    ),
    (
        "25 relations",
        plan_with(setter("relations", [{"from": "ada", "to": "acme", "relation": "knows"}] * 25)),
        "bounds",
    ),
    (
        "9 labels",
        plan_with(
            setter(
                "memories.0.labels",
                [{"kind": "fact", "scope": "agent", "key": f"k:n{i}", "value": "v"} for i in range(9)],
            )
        ),
        "bounds",
    ),
    ("empty text", plan_with(setter("memories.0.text", "")), "bounds"),
    ("blank text", plan_with(setter("memories.0.text", "   ")), "bounds"),
    # vocabulary and grammar
    ("kind Fact", plan_with(setter("memories.0.kind", "Fact")), "vocabulary"),
    ("source human", plan_with(setter("memories.0.source", "human")), "vocabulary"),
    ("entity type", plan_with(setter("entities.0.type", "animal")), "vocabulary"),
    ("label kind task", plan_with(setter("memories.0.labels.0.kind", "task")), "vocabulary"),
    ("ref uppercase", plan_with(setter("entities.0.ref", "Ada")), "grammar"),
    ("ref too long", plan_with(setter("entities.0.ref", "a" * 33)), "grammar"),
    ("ref with dash", plan_with(setter("memories.0.entities", ["ada-x"])), "grammar"),
    ("ref leading digit", plan_with(setter("relations.0.to", "1acme")), "grammar"),
    ("relation uppercase", plan_with(setter("relations.0.relation", "Works At")), "grammar"),  # GRAPH-03
    ("relation too long", plan_with(setter("relations.0.relation", "a" * 49)), "grammar"),
    ("label key no namespace", plan_with(setter("memories.0.labels.0.key", "tea")), "grammar"),
    ("label scope team", plan_with(setter("memories.0.labels.0.scope", "team")), "grammar"),
    ("label scope user empty", plan_with(setter("memories.0.labels.0.scope", "user:")), "grammar"),
    # references
    ("dangling memory ref", plan_with(setter("memories.1.entities", ["ada", "bob"])), "unresolved_ref"),
    ("dangling relation ref", plan_with(setter("relations.0.to", "bob")), "unresolved_ref"),
    (
        "duplicate entity ref",
        plan_with(lambda p: p["entities"].append({"ref": "ada", "name": "Ada L.", "type": "person"})),
        "duplicate_ref",
    ),
    ("ref twice in a memory", plan_with(setter("memories.0.entities", ["ada", "ada"])), "duplicate_ref"),
    # unknown and missing fields (CAP-15)
    ("unknown top field", plan_with(setter("notes", "x")), "unknown_field"),
    ("unknown memory field", plan_with(setter("memories.0.confidence", 0.5)), "unknown_field"),
    ("unknown entity field", plan_with(setter("entities.0.aliases", [])), "unknown_field"),
    ("unknown label field", plan_with(setter("memories.0.labels.0.subject", "owner")), "unknown_field"),
    ("validTo without flag", plan_with(setter("memories.0.validTo", "2026-10-01")), "unknown_field"),
    ("intentState without flag", plan_with(setter("memories.0.intentState", "pending")), "unknown_field"),
    (
        "python name for alias",
        plan_with(lambda p: p["relations"][0].update({"from_ref": "ada"})),
        "unknown_field",
    ),
    ("missing salience", plan_with(deleter("memories.0.salience")), "missing_field"),
    ("missing entities list", plan_with(deleter("memories.0.entities")), "missing_field"),
    ("missing relations", plan_with(deleter("relations")), "missing_field"),
    ("missing relation from", plan_with(deleter("relations.0.from")), "missing_field"),
    # unsafe text (AMB-25), anywhere a text goes
    ("newline escape", plan_with(setter("memories.0.text", "Ada\nlikes tea")), "unsafe_text"),
    ("tab", plan_with(setter("memories.0.text", "Ada\tlikes tea")), "unsafe_text"),
    ("NUL", plan_with(setter("memories.0.text", "Ada\x00")), "unsafe_text"),
    ("DEL", plan_with(setter("memories.0.text", "Ada\x7f")), "unsafe_text"),
    ("C1 NEL", plan_with(setter("memories.0.text", "Ada\x85likes")), "unsafe_text"),
    ("line separator", plan_with(setter("memories.0.text", "Ada\u2028likes")), "unsafe_text"),
    ("bidi RLO", plan_with(setter("memories.0.text", "Ada \u202elikes")), "unsafe_text"),
    ("bidi LRI", plan_with(setter("memories.0.text", "Ada \u2066likes")), "unsafe_text"),
    ("bidi PDI", plan_with(setter("memories.0.text", "Ada \u2069likes")), "unsafe_text"),
    ("zero width space", plan_with(setter("memories.0.text", "Ada\u200blikes")), "unsafe_text"),
    ("BOM", plan_with(setter("memories.0.text", "\ufeffAda likes tea")), "unsafe_text"),
    ("ZWJ outside emoji", plan_with(setter("memories.0.text", "Ad\u200da likes tea")), "unsafe_text"),
    ("trailing ZWJ after emoji", plan_with(setter("memories.0.text", "Ada \U0001f468\u200d")), "unsafe_text"),
    ("lone surrogate", json.dumps(json.loads(VALID) | {"memories": [memory("Ada \ud800")]}), "unsafe_text"),
    ("html comment open", plan_with(setter("memories.0.text", "Ada <!-- likes")), "unsafe_text"),
    ("html comment close", plan_with(setter("memories.0.text", "Ada --> likes")), "unsafe_text"),
    ("markdown bullet", plan_with(setter("memories.0.text", "- Ada likes tea")), "unsafe_text"),
    ("markdown star bullet", plan_with(setter("memories.0.text", "  * Ada likes tea")), "unsafe_text"),
    ("markdown task", plan_with(setter("memories.0.text", "- [ ] buy tea")), "unsafe_text"),
    ("markdown ordered", plan_with(setter("memories.0.text", "1. Ada likes tea")), "unsafe_text"),
    ("markdown heading", plan_with(setter("memories.0.text", "## Ada")), "unsafe_text"),
    ("text 1025 bytes", plan_with(setter("memories.0.text", "é" * 512 + "a")), "unsafe_text"),
    ("credential", plan_with(setter("memories.0.text", "Key is AKIAABCDEFGHIJKLMNOP")), "unsafe_text"),
    ("password", plan_with(setter("memories.0.text", "Ada's password: hunter22")), "unsafe_text"),
    ("unsafe label value", plan_with(setter("memories.0.labels.0.value", "green\u202e")), "unsafe_text"),
    ("unsafe entity name", plan_with(setter("entities.0.name", "# Ada")), "unsafe_text"),
]


@pytest.mark.parametrize(
    ("raw", "reason"), [pytest.param(raw, reason, id=name) for name, raw, reason in REJECTED_EXTRACTIONS]
)
def test_extraction_rejects(raw: str, reason: str) -> None:
    expect_violation(lambda: parse_extraction(raw), reason)


def test_rejection_table_covers_every_reachable_extraction_reason() -> None:
    reasons = {reason for _, _, reason in REJECTED_EXTRACTIONS}
    decision_only = {
        "missing_decision",
        "extra_decision",
        "duplicate_decision",
        "disallowed_decision",
        "unknown_target",
        "target_collision",
        "too_long",
    }
    assert reasons == REASONS - decision_only


def test_unsafe_text_detail_is_reported_without_content() -> None:
    exc = expect_violation(
        lambda: parse_extraction(plan_with(setter("memories.0.text", "x\u202ey"))), "unsafe_text"
    )
    assert exc.detail == "bidi"
    assert str(exc) == "unsafe_text: bidi"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"validTo": "2026-10-01"}, None),
        ({"validTo": "2026-10-01T23:59:59.999+02:00", "intentState": "planned"}, None),
        ({"validTo": "2026-10-01T23:59:59.999Z"}, None),
        ({"intentState": "abandoned"}, None),
        ({"validTo": "2026-02-30"}, "grammar"),
        ({"validTo": "tomorrow"}, "grammar"),
        ({"validTo": "2026-10-01T12:00:00Z"}, "grammar"),
        ({"validTo": None}, "type"),
        ({"validTo": 20261001}, "type"),
        ({"intentState": "later"}, "vocabulary"),
        ({"intentState": None}, "type"),
        ({"validUntil": "2026-10-01"}, "unknown_field"),
    ],
)
def test_intent_fields_only_with_flag(fields: dict[str, Any], reason: str | None) -> None:
    raw = plan_with(lambda p: p["memories"][0].update(fields))
    if reason is None:
        plan = parse_extraction(raw, intent_lifecycle=True)
        assert plan.memories[0].valid_to == fields.get("validTo")
        assert plan.memories[0].intent_state == fields.get("intentState")
        expect_violation(lambda: parse_extraction(raw), "unknown_field")
    else:
        expect_violation(lambda: parse_extraction(raw, intent_lifecycle=True), reason)


@pytest.mark.parametrize("state", ["planned", "pending"])
def test_INTENT11_an_undated_plan_or_pending_intention_gets_no_date(state: str) -> None:
    raw = plan_with(lambda p: p["memories"][0].update({"intentState": state}))
    memory = parse_extraction(raw, intent_lifecycle=True).memories[0]
    assert (memory.intent_state, memory.valid_to) == (state, None)
    # A date cannot be smuggled in as an explicit null either: absent is the only way to say "none".
    nulled = plan_with(lambda p: p["memories"][0].update({"intentState": state, "validTo": None}))
    expect_violation(lambda: parse_extraction(nulled, intent_lifecycle=True), "type")


def test_INTENT15_without_a_stated_zone_only_the_civil_date_is_kept() -> None:
    civil = plan_with(lambda p: p["memories"][0].update({"intentState": "planned", "validTo": "2026-10-01"}))
    assert parse_extraction(civil, intent_lifecycle=True).memories[0].valid_to == "2026-10-01"
    # An end-of-day instant without its zone is refused rather than read in some assumed zone.
    zoneless = plan_with(
        lambda p: p["memories"][0].update({"intentState": "planned", "validTo": "2026-10-01T23:59:59.999"})
    )
    expect_violation(lambda: parse_extraction(zoneless, intent_lifecycle=True), "grammar")


# -- UTF-16 length guard (CAP-11, AMB-13) --------------------------------------------------------------------


def padded_to(units: int) -> str:
    """A valid plan whose UTF-16 length is exactly ``units``; astral text makes Python ``len`` smaller."""
    astral = "\U0001f600" * 250  # 250 code points, 500 UTF-16 units, 1000 UTF-8 bytes
    plan = {"memories": [memory(f"{astral}") for _ in range(8)], "entities": [], "relations": []}
    raw = json.dumps(plan, ensure_ascii=False)
    return raw + " " * (units - utf16_length(raw))


def test_utf16_boundary_exactly_262144_accepted_262145_rejected() -> None:
    assert CAPTURE_COMPLETION_MAX_UTF16 == 262_144
    at = padded_to(262_144)
    over = padded_to(262_145)
    assert utf16_length(at) == 262_144 and utf16_length(over) == 262_145
    assert len(over) < 262_144  # Python len would have let it through: the astral chars count 2 each
    assert len(parse_extraction(at).memories) == 8
    expect_violation(lambda: parse_extraction(over), "too_long")
    expect_violation(lambda: parse_review(over, lines=[]), "too_long")
    expect_violation(lambda: parse_reconcile(over, candidate_count=0, target_ids={}), "too_long")


def test_too_long_is_checked_before_parsing() -> None:
    raw = "x" * (CAPTURE_COMPLETION_MAX_UTF16 + 1)  # not JSON either: length wins
    expect_violation(lambda: load_exact_json(raw), "too_long")


@pytest.mark.parametrize(
    ("text", "units"), [("", 0), ("abc", 3), ("é", 1), ("\U0001f600", 2), ("a\U00010000b", 4), ("緑", 1)]
)
def test_utf16_length(text: str, units: int) -> None:
    assert utf16_length(text) == units


def test_deep_nesting_is_rejected_not_crashing() -> None:
    expect_violation(lambda: load_exact_json("[" * 100_000 + "]" * 100_000), "not_json")
