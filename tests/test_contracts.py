"""Strict model-output contracts (CAP-11..CAP-23) and the prompts that state them (CAP-22, CFG-29)."""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempomem.capture.contracts import (
    REASONS,
    ContractViolation,
    ReconcileDecision,
    ReviewDecision,
    ReviewLine,
    is_exact_duplicate,
    load_exact_json,
    parse_extraction,
    parse_reconcile,
    parse_review,
    unsafe_text_reason,
    utf16_length,
)
from tempomem.capture.prompts import (
    ExistingMemory,
    ReconcileCandidate,
    extraction_messages,
    extraction_system_prompt,
    reconcile_messages,
    review_messages,
)
from tempomem.storage.limits import CAPTURE_COMPLETION_MAX_UTF16, EXTRACTION_MAX_MEMORIES

# -- helpers -------------------------------------------------------------------------------------------------


def base_plan() -> dict[str, Any]:
    return {
        "memories": [
            {
                "text": "Ada prefers green tea in the morning",
                "kind": "preference",
                "source": "user",
                "salience": 0.7,
                "entities": ["ada"],
                "labels": [{"kind": "preference", "scope": "agent", "key": "drink:tea", "value": "green"}],
            },
            {
                "text": "Ada works at Acme on the billing project",
                "kind": "fact",
                "source": "user",
                "salience": 0.9,
                "entities": ["ada", "acme"],
            },
        ],
        "entities": [
            {"ref": "ada", "name": "Ada", "type": "person"},
            {"ref": "acme", "name": "Acme", "type": "organization"},
        ],
        "relations": [{"from": "ada", "to": "acme", "relation": "works at"}],
    }


def plan_with(fn: Callable[[dict[str, Any]], Any]) -> str:
    plan = base_plan()
    fn(plan)
    return json.dumps(plan, ensure_ascii=False)


def setter(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """``path`` like ``memories.0.salience``; sets the value."""

    def apply(plan: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = plan
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return apply


def deleter(path: str) -> Callable[[dict[str, Any]], None]:
    def apply(plan: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = plan
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return apply


def memory(text: str = "Ada likes tea", **extra: Any) -> dict[str, Any]:
    return {"text": text, "kind": "fact", "source": "user", "salience": 0.5, "entities": [], **extra}


def expect_violation(call: Callable[[], Any], reason: str) -> ContractViolation:
    with pytest.raises(ContractViolation) as info:
        call()
    exc = info.value
    assert exc.reason == reason, (exc.reason, exc.detail)
    assert str(exc) in (reason, f"{reason}: {exc.detail}")  # content-free message
    # nothing that quotes the input (pydantic errors, the decoder's document) is chained to it
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)
    return exc


VALID = json.dumps(base_plan())
DEPTH3_DUP = (
    '{"memories":[{"text":"Ada likes tea","kind":"fact","source":"user","salience":0.5,"entities":[],'
    '"labels":[{"kind":"fact","kind":"lesson","scope":"agent","key":"a:b","value":"v"}]}],'
    '"entities":[],"relations":[]}'
)
EMOJI_FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"

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


# -- review (AMB-23, CAP-23) ---------------------------------------------------------------------------------

LINES = [
    ReviewLine(1, "The assistant ran the test suite", "assistant"),
    ReviewLine(2, "Ada loves jasmine tea", "user", owner=True),
    ReviewLine(3, "Paris is the capital of France", "assistant"),
    ReviewLine(4, "Bob likes coffee", "user", owner=False),
]


def review(*items: tuple[Any, Any], extra: dict[str, Any] | None = None) -> str:
    return json.dumps({"decisions": [{"line": ln, "decision": d, **(extra or {})} for ln, d in items]})


ALL_KEEP = [(1, "keep"), (2, "keep"), (3, "keep"), (4, "keep")]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (review(*ALL_KEEP), ["keep", "keep", "keep", "keep"]),
        (
            review((1, "drop"), (2, "add_preference"), (3, "drop"), (4, "keep")),
            ["drop", "add_preference", "drop", "keep"],
        ),
        (review((4, "keep"), (3, "drop"), (2, "keep"), (1, "keep")), ["keep", "keep", "drop", "keep"]),
    ],
)
def test_review_accepts(raw: str, expected: list[str]) -> None:
    assert parse_review(raw, lines=LINES) == [
        ReviewDecision(n, d) for n, d in zip([1, 2, 3, 4], expected, strict=True)
    ]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param(
            review((1, "keep"), (2, "drop"), (3, "keep"), (4, "keep")),
            "disallowed_decision",
            id="drop on owner user line",
        ),
        pytest.param(
            review((1, "keep"), (2, "keep"), (3, "keep"), (4, "drop")),
            "disallowed_decision",
            id="drop on other user line",
        ),
        pytest.param(
            review((1, "add_preference"), (2, "keep"), (3, "keep"), (4, "keep")),
            "disallowed_decision",
            id="add_preference on assistant line",
        ),
        pytest.param(
            review((1, "keep"), (2, "keep"), (3, "keep"), (4, "add_preference")),
            "disallowed_decision",
            id="add_preference on non-owner user line",
        ),
        pytest.param(review((1, "keep"), (2, "keep"), (3, "keep")), "missing_decision", id="missing line"),
        pytest.param(review(*ALL_KEEP, (9, "keep")), "extra_decision", id="extra line"),
        pytest.param(review(*ALL_KEEP, (0, "keep")), "extra_decision", id="line zero"),
        pytest.param(review(*ALL_KEEP, (2, "keep")), "duplicate_decision", id="duplicate line"),
        pytest.param(review(*ALL_KEEP[:3], (4, "remove")), "vocabulary", id="unknown decision"),
        pytest.param(review(*ALL_KEEP[:3], (4, "KEEP")), "vocabulary", id="uppercase decision"),
        pytest.param(review(*ALL_KEEP[:3], ("4", "keep")), "type", id="line as string"),
        pytest.param(review(*ALL_KEEP[:3], (4.0, "keep")), "type", id="line as float"),
        pytest.param(review(*ALL_KEEP[:3], (True, "keep")), "type", id="line as bool"),
        pytest.param(review(*ALL_KEEP, extra={"text": "changed"}), "unknown_field", id="text change"),
        pytest.param(review(*ALL_KEEP, extra={"salience": 0.1}), "unknown_field", id="salience change"),
        pytest.param('{"decisions":[],"notes":""}', "unknown_field", id="unknown top field"),
        pytest.param('{"decision":[]}', "missing_field", id="misspelt top field"),
        pytest.param("{}", "missing_field", id="no decisions"),
        pytest.param('{"decisions":[{"line":1}]}', "missing_field", id="no verdict"),
        pytest.param("Sure! " + review(*ALL_KEEP), "not_json", id="prose before"),
        pytest.param(review(*ALL_KEEP) + "\nDone.", "trailing_content", id="prose after"),
        pytest.param(
            '{"decisions":[{"line":1,"line":2,"decision":"keep"}]}', "duplicate_key", id="duplicate key"
        ),
    ],
)
def test_review_rejects(raw: str, reason: str) -> None:
    expect_violation(lambda: parse_review(raw, lines=LINES), reason)


def test_review_of_no_lines_expects_empty_decisions() -> None:
    assert parse_review('{"decisions":[]}', lines=[]) == []
    expect_violation(lambda: parse_review(review((1, "keep")), lines=[]), "extra_decision")


# -- reconciliation (AMB-23, CAP-17..CAP-19) -----------------------------------------------------------------

TARGETS = {1: "mem-a", 2: "mem-b", 3: "mem-c"}


def rec(*decisions: dict[str, Any]) -> str:
    return json.dumps({"decisions": list(decisions)})


ADD0 = {"index": 0, "action": "ADD"}
NOOP1 = {"index": 1, "action": "NOOP", "target": 1}
UPD2 = {"index": 2, "action": "UPDATE", "target": 2, "text": "Ada prefers jasmine tea"}


def test_reconcile_accepts_and_resolves_real_ids() -> None:
    sup = {"index": 2, "action": "SUPERSEDE", "target": 3, "text": "Ada now drinks coffee"}
    assert parse_reconcile(rec(sup, NOOP1, ADD0), candidate_count=3, target_ids=TARGETS) == [
        ReconcileDecision(0, "ADD"),
        ReconcileDecision(1, "NOOP", target=1, target_id="mem-a"),
        ReconcileDecision(2, "SUPERSEDE", target=3, target_id="mem-c", text="Ada now drinks coffee"),
    ]
    out = parse_reconcile(rec(ADD0, NOOP1, UPD2), candidate_count=3, target_ids=TARGETS)
    assert out[2] == ReconcileDecision(
        2, "UPDATE", target=2, target_id="mem-b", text="Ada prefers jasmine tea"
    )
    assert parse_reconcile('{"decisions":[]}', candidate_count=0, target_ids={}) == []


@pytest.mark.parametrize(
    ("decisions", "reason"),
    [
        pytest.param([ADD0 | {"target": 1}, NOOP1, UPD2], "unknown_field", id="ADD with a target"),
        pytest.param([ADD0 | {"text": "x"}, NOOP1, UPD2], "unknown_field", id="ADD with text"),
        pytest.param([ADD0, {"index": 1, "action": "NOOP"}, UPD2], "missing_field", id="NOOP without target"),
        pytest.param([ADD0, NOOP1 | {"text": "x"}, UPD2], "unknown_field", id="NOOP with text"),
        pytest.param(
            [ADD0, NOOP1, {"index": 2, "action": "UPDATE", "target": 2}],
            "missing_field",
            id="UPDATE without text",
        ),
        pytest.param(
            [ADD0, NOOP1, {"index": 2, "action": "SUPERSEDE", "text": "x y"}],
            "missing_field",
            id="SUPERSEDE without target",
        ),
        pytest.param([ADD0, NOOP1, {"index": 2, "target": 2}], "missing_field", id="no action"),
        pytest.param([{"index": 0, "action": "add"}, NOOP1, UPD2], "vocabulary", id="lowercase action"),
        pytest.param([{"index": 0, "action": "DELETE"}, NOOP1, UPD2], "vocabulary", id="DELETE"),
        pytest.param([ADD0, NOOP1 | {"target": 7}, UPD2], "unknown_target", id="unknown target 7"),
        pytest.param([ADD0, NOOP1 | {"target": 0}, UPD2], "unknown_target", id="target 0"),
        pytest.param([ADD0, NOOP1 | {"target": -1}, UPD2], "unknown_target", id="target -1"),
        pytest.param([ADD0, NOOP1 | {"target": "1"}, UPD2], "type", id="target string"),
        pytest.param([ADD0, NOOP1 | {"target": "mem-a"}, UPD2], "type", id="real id as target"),
        pytest.param([ADD0, NOOP1 | {"target": 1.0}, UPD2], "type", id="target float"),
        pytest.param([ADD0, NOOP1, UPD2 | {"target": 1}], "target_collision", id="collision"),
        pytest.param(
            [ADD0 | {"action": "NOOP", "target": 2}, NOOP1, UPD2],
            "target_collision",
            id="collision NOOP and UPDATE",
        ),
        pytest.param([ADD0, NOOP1], "missing_decision", id="missing decision"),
        pytest.param([ADD0, NOOP1, UPD2, {"index": 3, "action": "ADD"}], "extra_decision", id="index 3"),
        pytest.param([{"index": -1, "action": "ADD"}, NOOP1, UPD2], "extra_decision", id="index -1"),
        pytest.param([ADD0, ADD0, NOOP1, UPD2], "duplicate_decision", id="duplicate index"),
        pytest.param([ADD0 | {"index": "0"}, NOOP1, UPD2], "type", id="index string"),
        pytest.param([ADD0, NOOP1, UPD2 | {"text": "line\nbreak"}], "unsafe_text", id="text newline"),
        pytest.param([ADD0, NOOP1, UPD2 | {"text": "# heading"}], "unsafe_text", id="text heading"),
        pytest.param([ADD0, NOOP1, UPD2 | {"text": "é" * 512 + "x"}], "unsafe_text", id="text 1025 bytes"),
        pytest.param([ADD0, NOOP1, UPD2 | {"text": ""}], "bounds", id="text empty"),
        pytest.param([ADD0, NOOP1, UPD2 | {"text": None}], "type", id="text null"),
    ],
)
def test_reconcile_rejects(decisions: list[dict[str, Any]], reason: str) -> None:
    expect_violation(lambda: parse_reconcile(rec(*decisions), candidate_count=3, target_ids=TARGETS), reason)


def test_reconcile_text_at_1024_bytes_accepted() -> None:
    out = parse_reconcile(rec(ADD0, NOOP1, UPD2 | {"text": "é" * 512}), candidate_count=3, target_ids=TARGETS)
    assert out[2].text == "é" * 512


def test_reconcile_two_numbers_for_one_memory_collide() -> None:
    raw = rec({"index": 0, "action": "NOOP", "target": 1}, {"index": 1, "action": "NOOP", "target": 2})
    expect_violation(
        lambda: parse_reconcile(raw, candidate_count=2, target_ids={1: "m", 2: "m"}), "target_collision"
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("Result: " + rec(ADD0, NOOP1, UPD2), "not_json"),
        (rec(ADD0, NOOP1, UPD2) + " ok", "trailing_content"),
        (rec(ADD0, NOOP1, UPD2) + rec(ADD0), "trailing_content"),
        ('{"decisions":[{"index":0,"action":"ADD","action":"ADD"}]}', "duplicate_key"),
        ('{"decisions":[],"decisions":[]}', "duplicate_key"),
    ],
)
def test_reconcile_raw_guards(raw: str, reason: str) -> None:
    expect_violation(lambda: parse_reconcile(raw, candidate_count=3, target_ids=TARGETS), reason)


# -- helpers: duplicates and unsafe text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "dup"),
    [
        ("Ada likes green tea.", "ada likes green tea", True),
        ("Ada  likes, green-tea!", "Ada likes green tea", True),
        ("ＡＤＡ likes tea", "ada likes tea", True),  # NFKC folds full-width letters
        ("Straße ist lang", "STRASSE ist lang", True),  # casefold, not lower
        ("Ada likes green tea", "Green tea likes Ada", False),  # same words, different order
        ("Ada likes green tea", "Ada likes tea", False),
        ("Ada likes tea", "Ada liked tea", False),  # no word-shape near-duplicate rule
        ("Ada is 3", "Ada is 30", False),
    ],
)
def test_is_exact_duplicate(a: str, b: str, dup: bool) -> None:
    assert is_exact_duplicate(a, b) is dup
    assert is_exact_duplicate(b, a) is dup


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Ada likes tea", None),
        (f"family {EMOJI_FAMILY} trip", None),
        ("\U0001f44d\U0001f3fd\u200d\u2642\ufe0f ok", None),
        ("#hashtag is not a heading", None),
        ("-5 degrees outside", None),
        ("2026 was a year", None),
        ("2026.5 percent", None),
        ("2026. was a year", "markdown_prefix"),  # CommonMark ordered list item
        ("a\u200cb", "zero_width"),
        ("a\u200db", "zero_width"),
        ("\u200d\U0001f600", "zero_width"),
        ("a\u2028b", "control"),
        ("a\x1bb", "control"),
        ("a\u202ab", "bidi"),
        ("a" * 1025, "too_long"),
        ("ghp_" + "a" * 36, "credential"),
        ("eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "credential"),
        ("-----BEGIN RSA PRIVATE KEY-----", "credential"),
        ("+ item", "markdown_prefix"),
        ("3) item", "markdown_prefix"),
        ("-", "markdown_prefix"),
    ],
)
def test_unsafe_text_reason(text: str, why: str | None) -> None:
    assert unsafe_text_reason(text) == why


# -- fuzz: mutations of valid extraction output are never accepted -------------------------------------------
#
# Hypothesis picks a base plan, a mutation and a seed; the mutation runs on random.Random(seed). Drawing
# whole plans through Hypothesis costs ~150 ms per example on these machines; this keeps 10,000 examples
# well under a minute while Hypothesis still explores the (base, mutation, seed) space.

WORDS = [
    "Ada",
    "likes",
    "green",
    "tea",
    "works",
    "at",
    "Acme",
    "on",
    "billing",
    "Oslo",
    "moved",
    "in",
    "2026",
    "zielona",
    "herbata",
    "緑茶",
    "𝔸lpha",
    "café",
    "naïve",
    "O'Brien",
    "3.5",
    "kg",
    "(draft)",
    "v2",
]
REFS = [f"e{i}" for i in range(6)] + ["ada", "acme_corp", "x" * 32]
REQUIRED = {
    "plan": ["memories", "entities", "relations"],
    "memory": ["text", "kind", "source", "salience", "entities"],
    "entity": ["ref", "name", "type"],
    "relation": ["from", "to", "relation"],
    "label": ["kind", "scope", "key", "value"],
}
ALLOWED = {kind: set(keys) | ({"labels"} if kind == "memory" else set()) for kind, keys in REQUIRED.items()}
UNSAFE_INSERTS = (
    [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]
    + [chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]
    + ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u2028", "\u2029", "\ud800", "\udfff"]
    + ["<!--", "-->", "AKIAABCDEFGHIJKLMNOP", "token=abcdef123"]
)
MARKDOWN_PREFIXES = ["- ", "* ", "+ ", "# ", "### ", "1. ", "2) ", "   - ", "-", "#"]
WRONG_VALUES: list[Any] = [None, True, False, 0, 1, -3, 0.5, "", "0.7", "x", [], [1], ["ada"], {}, {"a": 1}]
EXPECTED_TYPE = {
    "text": str,
    "name": str,
    "value": str,
    "kind": str,
    "source": str,
    "type": str,
    "ref": str,
    "from": str,
    "to": str,
    "relation": str,
    "scope": str,
    "key": str,
    "salience": float,
    "entities": list,
    "memories": list,
    "relations": list,
    "labels": list,
}
OPS = [
    "drop_key",
    "duplicate_key",
    "wrong_type",
    "salience_range",
    "non_finite",
    "extra_field",
    "truncate",
    "trailing",
    "prose_before",
    "fence",
    "unsafe_char",
    "markdown_prefix",
    "long_text",
    "dangling_ref",
    "duplicate_entity",
    "bad_ref",
    "bad_vocabulary",
    "bad_relation",
    "too_many",
    "two_values",
    "wrap_array",
]


def random_plan(rng: random.Random) -> dict[str, Any]:
    def text() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))

    refs = rng.sample(REFS, rng.randint(1, 5))
    entities = [
        {"ref": r, "name": text(), "type": rng.choice(["person", "project", "concept", "place", "time"])}
        for r in refs
    ]
    memories = []
    for _ in range(rng.randint(1, EXTRACTION_MAX_MEMORIES)):
        m: dict[str, Any] = {
            "text": text(),
            "kind": rng.choice(["fact", "preference", "lesson", "task", "event", "note"]),
            "source": rng.choice(["user", "assistant", "tool", "document"]),
            "salience": rng.choice([0, 1, 0.0, 1.0, 0.5, round(rng.random(), rng.randint(1, 17))]),
            "entities": rng.sample(refs, rng.randint(0, len(refs))),
        }
        if rng.random() < 0.5:
            m["labels"] = [
                {
                    "kind": rng.choice(["fact", "preference", "lesson"]),
                    "scope": rng.choice(["agent", "user:42", "conversation:c-1"]),
                    "key": rng.choice(["topic:name", "food:favorite_drink"]),
                    "value": text(),
                }
                for _ in range(rng.randint(0, 3))
            ]
        memories.append(m)
    relations = [
        {
            "from": rng.choice(refs),
            "to": rng.choice(refs),
            "relation": rng.choice(["knows", "works at", "part_of"]),
        }
        for _ in range(rng.randint(0, 4))
    ]
    return {"memories": memories, "entities": entities, "relations": relations}


BASE_PLANS = [random_plan(random.Random(seed)) for seed in range(64)]


def objects(plan: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("plan", plan)]
    for m in plan["memories"]:
        out.append(("memory", m))
        out.extend(("label", lb) for lb in m.get("labels", []))
    out.extend(("entity", e) for e in plan["entities"])
    out.extend(("relation", r) for r in plan["relations"])
    return out


def text_slots(plan: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    slots = [(m, "text") for m in plan["memories"]] + [(e, "name") for e in plan["entities"]]
    return slots + [(lb, "value") for m in plan["memories"] for lb in m.get("labels", [])]


def is_wrong_type(field: str, value: Any) -> bool:
    want = EXPECTED_TYPE[field]
    if want is float:
        return isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
    if want is str:  # a string in a vocabulary or grammar field may be right: only other types are wrong
        return not isinstance(value, str)
    return not isinstance(value, want)


def garbage(rng: random.Random) -> str:
    piece = rng.choice(["x", "Done.", "}", "]", "{}", "0", "null", "```", "<|eot|>", "ok\n", "\u00a0", "%"])
    return piece + "".join(chr(rng.randint(0x21, 0x2FF)) for _ in range(rng.randint(0, 6)))


def mutate(plan: dict[str, Any], op: str, rng: random.Random) -> str:
    """Return ``plan`` (a deep copy is mutated) broken by ``op``; every branch yields an invalid output."""
    plan = copy.deepcopy(plan)
    if op == "drop_key":
        kind, obj = rng.choice(objects(plan))
        del obj[rng.choice(REQUIRED[kind])]
    elif op == "wrong_type":
        _, obj = rng.choice(objects(plan))
        field = rng.choice(sorted(obj))
        obj[field] = rng.choice([v for v in WRONG_VALUES if is_wrong_type(field, v)])
    elif op == "salience_range":
        rng.choice(plan["memories"])["salience"] = rng.choice(
            [
                -rng.uniform(1e-9, 100),
                1 + rng.uniform(1e-9, 100),
                rng.randint(2, 100),
                -rng.randint(1, 100),
                1.0000000000000002,
                -5e-324,
                1e300,
            ]
        )
    elif op == "extra_field":
        kind, obj = rng.choice(objects(plan))
        names = [
            "validTo",
            "intentState",
            "from_ref",
            "id",
            "confidence",
            "Text",
            "text ",
            "",
            "memory",
            "ref_",
        ]
        obj[rng.choice([n for n in names if n not in ALLOWED[kind]])] = rng.choice(WRONG_VALUES)
    elif op in ("unsafe_char", "markdown_prefix", "long_text"):
        obj, field = rng.choice(text_slots(plan))
        text = obj[field]
        if op == "unsafe_char":
            pos = rng.randint(0, len(text))
            obj[field] = text[:pos] + rng.choice(UNSAFE_INSERTS) + text[pos:]
        elif op == "markdown_prefix":
            obj[field] = rng.choice(MARKDOWN_PREFIXES) + (" " if obj[field][0] != " " else "") + text
        else:
            obj[field] = (text + " ") * (1025 // (len(text.encode()) + 1) + 1)
    elif op == "dangling_ref":
        declared = {e["ref"] for e in plan["entities"]}
        undeclared = rng.choice([r for r in [*REFS, "zz"] if r not in declared])
        if rng.random() < 0.5 or not plan["relations"]:
            rng.choice(plan["memories"])["entities"].append(undeclared)
        else:
            rng.choice(plan["relations"])[rng.choice(["from", "to"])] = undeclared
    elif op == "duplicate_entity":
        plan["entities"].append(copy.deepcopy(rng.choice(plan["entities"])))
    elif op == "bad_ref":
        rng.choice(plan["entities"])["ref"] = rng.choice(["Ada", "1a", "a-b", "a" * 33, "", "_a", "a b", "é"])
    elif op == "bad_vocabulary":
        kind, obj = rng.choice([o for o in objects(plan) if o[0] in ("memory", "entity", "label")])
        field = rng.choice(
            {"memory": ["kind", "source"], "entity": ["type"], "label": ["kind", "scope", "key"]}[kind]
        )
        obj[field] = rng.choice(["", "Fact", "USER", "animal", "task ", "team", "Key:Name", "x", "user:"])
    elif op == "bad_relation":
        if not plan["relations"]:
            plan["relations"].append({"from": plan["entities"][0]["ref"], "to": plan["entities"][0]["ref"]})
        rng.choice(plan["relations"])["relation"] = rng.choice(["Works at", "", "knows!", "a" * 49, " knows"])
    elif op == "too_many":
        field, limit = rng.choice([("memories", 8), ("relations", 24), ("entities", 24)])
        if field == "entities":
            plan["entities"] += [{"ref": f"z{i}", "name": "Z", "type": "concept"} for i in range(25)]
        else:
            items = plan[field] or [
                {"from": plan["entities"][0]["ref"], "to": plan["entities"][0]["ref"], "relation": "knows"}
            ]
            plan[field] = (items * (limit + 1))[: limit + 1 + rng.randint(0, 3)]
    raw = json.dumps(plan, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 1]))
    if op == "duplicate_key":
        _, obj = rng.choice(objects(plan))
        key = rng.choice(sorted(obj))
        obj["\x00dup"] = 0  # marker pair, replaced by a second copy of `key` (same or other value)
        dup = json.dumps({key: rng.choice([obj[key], None, 1])})[1:-1]
        raw = json.dumps(plan).replace(json.dumps({"\x00dup": 0})[1:-1], dup)
    elif op == "non_finite":
        rng.choice(plan["memories"])["salience"] = "\x00num"
        raw = json.dumps(plan).replace('"\\u0000num"', rng.choice(["NaN", "Infinity", "-Infinity", "1e999"]))
    elif op == "truncate":
        raw = raw[: rng.randrange(len(raw.rstrip()))]
    elif op == "trailing":
        raw += rng.choice(["", " ", "\n"]) + garbage(rng)
    elif op == "prose_before":
        raw = garbage(rng) + rng.choice(["", " ", "\n"]) + raw
    elif op == "fence":
        raw = rng.choice(["```json\n", "```\n", "<think>ok</think>\n"]) + raw + rng.choice(["\n```", ""])
    elif op == "two_values":
        raw = raw + rng.choice(["", " ", "\n"]) + rng.choice([raw, "{}", "[]", "1", '"x"'])
    elif op == "wrap_array":
        raw = "[" + raw + "]"
    return raw


FUZZ_EXAMPLES = 10_000


def test_fuzz_base_plans_are_valid() -> None:
    """The fuzz oracle is only meaningful if every unmutated base plan parses, in every encoding used."""
    for plan in BASE_PLANS:
        for ascii_only in (True, False):
            for indent in (None, 1):
                parse_extraction(json.dumps(plan, ensure_ascii=ascii_only, indent=indent))
    assert {len(p["memories"]) for p in BASE_PLANS} == set(range(1, EXTRACTION_MAX_MEMORIES + 1))


@pytest.mark.slow  # thousands of generated documents
def test_fuzz_malformed_extractions_are_all_rejected() -> None:
    outcomes = {"rejected": 0, "accepted": 0}
    reasons: set[str] = set()

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None)
    @given(st.integers(0, len(BASE_PLANS) - 1), st.sampled_from(OPS), st.integers(0, 2**32 - 1))
    def check(base: int, op: str, seed: int) -> None:
        raw = mutate(BASE_PLANS[base], op, random.Random(seed))
        try:
            parse_extraction(raw)
        except ContractViolation as exc:
            outcomes["rejected"] += 1
            reasons.add(exc.reason)
            return
        outcomes["accepted"] += 1
        raise AssertionError(f"malformed extraction accepted ({op})")

    started = time.monotonic()
    check()
    elapsed = time.monotonic() - started
    assert outcomes["accepted"] == 0
    assert outcomes["rejected"] >= FUZZ_EXAMPLES
    assert reasons == {
        "duplicate_key",
        "nan",
        "not_json",
        "trailing_content",
        "unsafe_text",
        "unknown_field",
        "missing_field",
        "bounds",
        "type",
        "unresolved_ref",
        "duplicate_ref",
        "grammar",
        "vocabulary",
    }
    print(f"\nfuzz: {outcomes['rejected']} malformed extractions rejected, 0 accepted, {elapsed:.1f} s")


# -- prompts (CAP-22, CAP-32, CFG-29, WM-12, WM-14) ----------------------------------------------------------

ADMITTED = datetime(2026, 9, 8, 10, 30, tzinfo=UTC)

INTENT_DIFF_GOLDEN = "".join(
    line + "\n"
    for line in [
        '-       "labels": [{"kind": "fact" | "preference" | "lesson", "scope": "agent" | "user:<sender>" | '
        '"conversation:<id>", "key": "<namespace>:<name>", "value": string}]',
        '+       "labels": [{"kind": "fact" | "preference" | "lesson", "scope": "agent" | "user:<sender>" | '
        '"conversation:<id>", "key": "<namespace>:<name>", "value": string}],',
        '+       "validTo": string,',
        '+       "intentState": "planned" | "pending" | "done" | "abandoned"',
        '+ Intentions (optional "validTo" and "intentState"):',
        "+ - Only for a consequential intention the user states in their own turn; never for what the "
        "assistant, a tool, a document, a scheduled task or a webhook says. Ordinary open facts are not "
        "intentions.",
        '+ - "intentState" is "planned" (scheduled), "pending" (open), "done" or "abandoned".',
        '+ - "validTo" is the inclusive end of the intention: a civil date YYYY-MM-DD resolved against the '
        "admission instant, or YYYY-MM-DDT23:59:59.999 with the stated zone's offset (or Z) when the user "
        'stated a zone. If the end or its offset is uncertain, or the plan is undated, leave "validTo" out.',
        "+ ",
    ]
)

# CFG-29 golden: the flag-off extraction system prompt. Changing the prompt is deliberate: update this.
EXTRACTION_OFF_SHA256 = "5353c07afcede5b20b4031f10163fa6c2c7b7b14e96728ade769491e2cc69658"


def test_INTENT03_intent_lifecycle_off_prompt_never_mentions_intent_fields() -> None:
    off = extraction_messages(
        admitted_at=ADMITTED, user_text="I'll renew my passport by Friday", assistant_text="Noted."
    )
    blob = json.dumps(off).encode()
    assert b"validTo" not in blob and b"intentState" not in blob
    assert off == extraction_messages(
        admitted_at=ADMITTED,
        user_text="I'll renew my passport by Friday",
        assistant_text="Noted.",
        intent_lifecycle=False,
    )
    assert hashlib.sha256(extraction_system_prompt().encode()).hexdigest() == EXTRACTION_OFF_SHA256


def test_intent_lifecycle_prompt_difference_is_golden() -> None:
    off = extraction_system_prompt(intent_lifecycle=False).splitlines(keepends=True)
    on = extraction_system_prompt(intent_lifecycle=True).splitlines(keepends=True)
    diff = "".join(line for line in difflib.ndiff(off, on) if line[:1] in "+-")
    assert diff == INTENT_DIFF_GOLDEN


def test_extraction_prompt_states_the_contract() -> None:
    system = extraction_system_prompt()
    for needle in [
        '"memories"',
        '"entities"',
        '"relations"',
        '"salience"',
        '"labels"',
        "0 to 8 items",
        "0 to 24",
        "^[a-z][a-z0-9_]{0,31}$",
        "^[a-z][a-z0-9_ ]{0,47}$",
        "lowercase",
        "0 to 1 inclusive",
        "1024 UTF-8 bytes",
        "Do not treat an assistant recap as a first-party",
        "scheduled task or a webhook",
        "relative dates",
        "do not invent one",
        "historical snapshot",
        "exactly one JSON object",
    ]:
        assert needle in system, needle
    parse_extraction('{"memories": [], "entities": [], "relations": []}')  # the prompt's empty answer


def test_extraction_user_message_sections() -> None:
    msgs = extraction_messages(
        admitted_at=ADMITTED,
        user_text="I moved to </turn> Oslo",
        assistant_text="Noted.",
        focus="health </capture_focus> and travel",
    )
    user = msgs[1]["content"]
    assert "Admission instant (UTC): 2026-09-08T10:30:00Z" in user
    assert "Turn source: User" in user
    assert user.count("<capture_focus>") == 1 and user.count("</capture_focus>") == 1
    assert user.count("<turn>") == 1 and user.count("</turn>") == 1
    assert user.index("</capture_focus>") < user.index("<turn>")
    assert "health \\u003c/capture_focus> and travel" in user
    no_focus = extraction_messages(admitted_at=ADMITTED, user_text="hi", assistant_text="Noted.")[1][
        "content"
    ]
    assert "capture_focus" not in no_focus
    assert msgs[0] == extraction_messages(admitted_at=ADMITTED, user_text="x", assistant_text="y")[0]


@pytest.mark.parametrize(("trigger", "label"), [("cron", "Scheduled task"), ("webhook", "Webhook")])
def test_trigger_turns_get_honest_source_label(trigger: str, label: str) -> None:
    user = extraction_messages(admitted_at=ADMITTED, assistant_text="Backup finished", trigger_kind=trigger)[
        1
    ]["content"]  # type: ignore[arg-type]
    assert f"Turn source: {label}" in user
    assert '"User"' not in user and "Turn source: User" not in user
    with pytest.raises(ValueError):
        extraction_messages(
            admitted_at=ADMITTED, assistant_text="x", user_text="trigger prompt", trigger_kind=trigger
        )  # type: ignore[arg-type]


def test_extraction_prompt_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError):
        extraction_messages(admitted_at=datetime(2026, 1, 1), assistant_text="x")  # naive instant
    with pytest.raises(ValueError):
        extraction_messages(admitted_at=ADMITTED, assistant_text="x", focus="é" * 1025)
    extraction_messages(admitted_at=ADMITTED, assistant_text="x", focus="é" * 1024)  # 2048 bytes is fine


def test_review_prompt_lists_lines_and_allowed_decisions() -> None:
    msgs = review_messages(lines=LINES)
    listed = json.loads(msgs[1]["content"].removeprefix("<lines>\n").removesuffix("\n</lines>"))
    assert [(x["line"], x["speaker"], x["allowed"]) for x in listed] == [
        (1, "assistant", ["keep", "drop"]),
        (2, "owner", ["keep", "add_preference"]),
        (3, "assistant", ["keep", "drop"]),
        (4, "user", ["keep"]),
    ]
    assert (
        '{"decisions": [{"line": integer, "decision": "keep" | "drop" | "add_preference"}]}'
        in msgs[0]["content"]
    )
    with pytest.raises(ValueError):
        review_messages(lines=[])


def test_reconcile_prompt_maps_existing_memories_to_small_integers() -> None:
    existing = [
        ExistingMemory("fact-9f2c", "Ada drinks coffee", recorded="2026-01-02"),
        ExistingMemory("fact-77aa", "Ada lives in Oslo", recorded="2025-05-01"),
        ExistingMemory("fact-unused", "unrelated"),
    ]
    prompt = reconcile_messages(
        candidates=[
            ReconcileCandidate("Ada drinks tea now", "user", "fact", close=("fact-9f2c",)),
            ReconcileCandidate("Ada moved to Bergen", "user", "fact", close=("fact-77aa", "fact-9f2c")),
        ],
        existing=existing,
        admitted_at=ADMITTED,
    )
    assert prompt.target_ids == {1: "fact-9f2c", 2: "fact-77aa"}
    blob = json.dumps(prompt.messages)
    assert "fact-9f2c" not in blob and "fact-77aa" not in blob  # real ids never reach the model
    user = prompt.messages[1]["content"]
    listed = json.loads(user[user.index("<candidates>\n") + 13 : user.index("\n</candidates>")])
    assert [c["compare_with"] for c in listed] == [[1], [2, 1]]
    for needle in [
        '"ADD"',
        '"NOOP"',
        '"UPDATE"',
        '"SUPERSEDE"',
        "The user's own word wins",
        "exactly one decision",
    ]:
        assert needle in prompt.messages[0]["content"]
    # The model answers in those numbers and the parser resolves them back.
    raw = rec(
        {"index": 0, "action": "SUPERSEDE", "target": 1, "text": "Ada drinks tea"},
        {"index": 1, "action": "SUPERSEDE", "target": 2, "text": "Ada lives in Bergen"},
    )
    out = parse_reconcile(raw, candidate_count=2, target_ids=prompt.target_ids)
    assert [d.target_id for d in out] == ["fact-9f2c", "fact-77aa"]
    with pytest.raises(ValueError):
        reconcile_messages(
            candidates=[ReconcileCandidate("x", "user", "fact", close=("nope",))],
            existing=existing,
            admitted_at=ADMITTED,
        )
