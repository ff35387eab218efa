"""Review and reconciliation contracts (AMB-23, CAP-17..CAP-19, CAP-23) and the exact-duplicate and
unsafe-text checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tempomem.capture.contracts import (
    ReconcileDecision,
    ReviewDecision,
    is_exact_duplicate,
    parse_reconcile,
    parse_review,
    unsafe_text_reason,
)
from tests.helpers.contract_plans import (
    EMOJI_FAMILY,
    LINES,
    TARGETS,
    expect_violation,
    rec,
)

# -- review (AMB-23, CAP-23) ---------------------------------------------------------------------------------


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
