"""Automatic labelled background (GUIDE-06, GUIDE-07, GUIDE-14..GUIDE-18, AMB-16, AUTO-15).

Pure selection over hand-made hits, the wiring through ``automatic_lookup``, and one run over a real
DuckDB/LanceDB index with the real MiniLM embedder.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tempomem.recall.auto_block import (
    HEADING,
    BackgroundScopes,
    TurnGate,
    automatic_lookup,
    select_auto_block,
)
from tempomem.recall.guidance import (
    BACKGROUND_HEADING,
    BACKGROUND_MAX_BYTES,
    labelled_background,
    turn_scope_kind,
)
from tempomem.recall.search import Hit
from tempomem.storage.limits import (
    AUTO_BLOCK_FLOOR,
    AUTO_CONTEXT_MAX_BYTES,
    BACKGROUND_MEDIAN_LEAD,
    GUIDANCE_WINDOW,
)

NOW = datetime(2026, 7, 10, 12, 0, tzinfo=UTC)
OWNER = TurnGate(verified_owner=True, surface="web")
SENDER = "web-owner-7"
THIS_CHAT = "web:thread-5#2026-07-10"
QUESTION = "How long should your answers be when I ask something?"
_N = 0


def label(
    kind: str = "preference",
    key: str = "preference:answer_length",
    value: str = "brief",
    *,
    scope: str = "agent",
    attribution: str | None = "owner",
    subject: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "scope": scope, "key": key, "value": value}
    if attribution:
        out["attribution"] = attribution
    if subject:
        out["subject"] = subject
    return out


def hit(score: float, text: str | None = None, *labels: dict[str, Any], **kw: Any) -> Hit:
    global _N
    _N += 1
    data: dict[str, Any] = {
        "id": f"b{_N:04d}",
        "text": text or f"memory line {_N}",
        "day": "2026-05-01",
        "recorded": "2026-05-01T10:00:00.000Z",
        "type": "preference" if labels else "note",
        "status": "open",
        "score": score,
        "mode": "hybrid",
        "source_session": "web:secret-thread-99",
        "labels": json.dumps(list(labels)) if labels else None,
    }
    data.update(kw)
    return Hit(**data)


def fillers(*scores: float) -> list[Hit]:
    return [hit(s, f"unlabelled filler {i}") for i, s in enumerate(scores)]


def background(hits: list[Hit], **kw: Any) -> Any:
    kw.setdefault("owner_sender", SENDER)
    kw.setdefault("conversation_id", THIS_CHAT)
    return labelled_background(hits, now=NOW, tz=UTC, **kw)


def body(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("- ")]


BRIEF = "Keep answers brief, no preamble."


def test_constants() -> None:
    """AMB-16: the median lead is a named 0.05 over the top-8 window, with the 0.62 floor."""
    assert (BACKGROUND_MEDIAN_LEAD, GUIDANCE_WINDOW, AUTO_BLOCK_FLOOR) == (0.05, 8, 0.62)


@pytest.mark.parametrize(
    ("median", "score", "joins"),
    [
        (0.70, 0.75, True),  # 0.75 - 0.70 == 0.050000000000000044
        (0.80, 0.85, True),  # 0.85 - 0.80 == 0.04999999999999993: still exactly 0.05
        (0.90, 0.95, True),
        (0.70, 0.7501, True),
        (0.70, 0.7499, False),  # a 0.0499 lead
        (0.80, 0.8499, False),
        (0.70, 0.745, False),
    ],
)
def test_AMB16_calibration_median_lead_boundary(median: float, score: float, joins: bool) -> None:
    """AMB-16 / GUIDE-06: ``score - median(top-8) >= 0.05`` joins (0.05 exactly, despite float noise);
    0.0499 does not. Seven fillers at ``median`` make the window median exactly that."""
    line = hit(score, BRIEF, label())
    got = background([line, *fillers(*[median] * 7)])
    assert (got.line_ids == (line.id,)) is joins
    assert (BRIEF in got.text) is joins


@pytest.mark.parametrize(("score", "joins"), [(0.62, True), (0.6199, False)])
def test_AMB16_floor_applies_even_with_a_large_lead(score: float, joins: bool) -> None:
    """AMB-16: also ``score >= AUTO_BLOCK_FLOOR`` (0.62), however far the line leads the median."""
    line = hit(score, BRIEF, label())
    assert (background([line, *fillers(*[0.10] * 7)]).line_ids == (line.id,)) is joins


def test_AMB16_median_is_over_the_top_8_not_the_whole_superset() -> None:
    """AMB-16: a 0.04 lead over the top-8 median is not enough even when the long tail scores 0."""
    line = hit(0.74, BRIEF, label())
    hits = [line, *fillers(*[0.70] * 7), *fillers(*[0.0] * 40)]
    assert background(hits).text == ""
    assert background([hit(0.76, BRIEF, label()), *hits[1:]]).text != ""


def test_GUIDE06_only_the_top_8_candidates_take_part() -> None:
    """GUIDE-06 / AMB-16: the window is the top eight; a ninth line never joins, not even as a partner."""
    leader = hit(0.90, BRIEF, label(value="brief"))
    ninth = hit(0.65, "Give long, detailed answers.", label(value="detailed"))
    window = [leader, *fillers(0.66, 0.66, 0.66, 0.66, 0.66, 0.66, 0.66)]
    assert background([*window, ninth]).line_ids == (leader.id,)
    # the same line inside the window is shown with its opposite (GUIDE-07)
    inside = [leader, *fillers(0.66, 0.66, 0.66, 0.66, 0.66, 0.66), ninth]
    assert background(inside).line_ids == (leader.id, ninth.id)


def test_GUIDE06_rendering_exactly_and_no_ids_or_provenance() -> None:
    """GUIDE-06 rendering; GUIDE-17 / PROV-19: no memory ids, scope ids or conversation provenance."""
    line = hit(0.80, BRIEF, label(scope=f"user:{SENDER}"), source_session=None)
    got = background([line, *fillers(0.5, 0.5, 0.5)])
    assert got.text == (
        f"{BACKGROUND_HEADING}\n\n"
        "- preference (user): Keep answers brief, no preamble. (recorded 2026-05-01; you said)"
    )
    for secret in (SENDER, line.id, "secret-thread", "source conversation unknown", "thread-5"):
        assert secret not in got.text
    assert got.byte_size == len(got.text.encode())


@pytest.mark.parametrize(
    ("scope", "shown_as"),
    [
        ("agent", "agent"),
        (f"user:{SENDER}", "user"),
        ("user:someone-else", None),
        ("conversation:web:thread-5#2026-07-01", "conversation"),  # an earlier daily bucket (AMB-59)
        ("conversation:web:thread-5", "conversation"),
        ("conversation:web:thread-6", None),
        ("team:all", None),
    ],
)
def test_GUIDE06_only_the_turns_scopes(scope: str, shown_as: str | None) -> None:
    """GUIDE-06: agent, the verified owner's own user scope and this logical conversation only."""
    got = background([hit(0.80, BRIEF, label(scope=scope)), *fillers(0.5, 0.5, 0.5)])
    assert (f"- preference ({shown_as}): " in got.text) if shown_as else got.text == ""


def test_GUIDE06_user_scope_needs_the_host_supplied_sender() -> None:
    """GUIDE-06: without the host's owner sender id no ``user:`` scope is the turn's."""
    assert turn_scope_kind(f"user:{SENDER}", owner_sender=None, conversation_id=None) is None
    assert turn_scope_kind(f"user:{SENDER}", owner_sender=SENDER, conversation_id=None) == "user"
    assert turn_scope_kind("conversation:web:x", owner_sender=SENDER, conversation_id=None) is None


def test_GUIDE02_precedence_user_then_conversation_then_agent() -> None:
    """GUIDE-06 with GUIDE-02 precedence: user, conversation, agent, whatever the scores."""
    agent = hit(0.95, "Agent-wide lesson.", label("lesson", "lesson:x", "a"))
    conv = hit(
        0.85, "Conversation advice.", label("lesson", "lesson:y", "c", scope="conversation:web:thread-5")
    )
    user = hit(0.80, "User taste.", label(key="preference:z", value="u", scope=f"user:{SENDER}"))
    got = background([agent, conv, user, *fillers(0.3, 0.3, 0.3, 0.3, 0.3)])
    assert got.line_ids == (user.id, conv.id, agent.id)
    assert [ln.split(":", 1)[0] for ln in body(got.text)] == [
        "- preference (user)", "- lesson (conversation)", "- lesson (agent)"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("attribution", "attr", "src", "shown"),
    [
        ("owner", None, None, True),
        ("document", None, None, True),
        ("assistant", "owner", None, False),  # the label's own attribution wins
        (None, "owner", None, True),
        (None, None, "document", True),
        (None, None, None, False),
        (None, "assistant", "user", False),
    ],
)
def test_GUIDE06_only_verified_lessons(
    attribution: str | None, attr: str | None, src: str | None, shown: bool
) -> None:
    """GUIDE-06: a lesson is verified when the owner stated it or a document holds it."""
    lint = label("lesson", "lesson:lint", "lint", attribution=attribution)
    lesson = hit(0.80, "Run the linter before committing.", lint, attr=attr, src=src)
    got = background([lesson, *fillers(0.5, 0.5, 0.5)])
    assert (got.line_ids == (lesson.id,)) is shown
    if shown:
        assert body(got.text)[0].startswith("- lesson (agent): Run the linter before committing.")


def test_GUIDE06_facts_and_unlabelled_lines_never_join() -> None:
    """GUIDE-06: only preference and lesson labels; free-text labels carry none (AMB-57)."""
    fact = hit(0.90, "Morgan works at Acme.", label("fact", "employer", "Acme"))
    free = hit(0.90, "Free text label.", labels="likes: tea")
    assert background([fact, free, hit(0.90, "plain"), *fillers(0.5, 0.5, 0.5)]).text == ""


def test_GUIDE06_language_neutral_selection_depends_on_scores_only() -> None:
    """GUIDE-06 / AUTO-05: the same scores select the same lines in any language (no word lists)."""
    texts = [
        "Keep answers brief.",
        "Odpowiadaj krótko.",
        "Responde de forma breve.",
        "簡潔に答えてください。",
    ]
    for text in texts:
        lead = hit(0.80, text, label())
        got = background([lead, *fillers(0.70, 0.70, 0.70, 0.70), hit(0.71, f"{text} (2)", label(key="k2"))])
        assert got.line_ids == (lead.id,)
        assert body(got.text) == [f"- preference (agent): {text} (recorded 2026-05-01; you said)"]


def test_GUIDE06_superseded_ended_and_dropped_lines_are_not_guidance() -> None:
    """GUIDE-06: standing guidance is current; dropped records are not even candidates (REC-14)."""
    superseded = hit(0.90, "Old taste.", label(key="k1"), status="invalidated")
    ended = hit(0.90, "Ended taste.", label(key="k2"), valid_to="2026-06-01")
    dropped = hit(0.99, "Dropped taste.", label(key="k3"), status="dropped")
    current = hit(0.90, "Current taste.", label(key="k4"))
    got = background(
        [dropped, superseded, ended, current, *fillers(0.5, 0.5, 0.5, 0.5)], superseded_ids={superseded.id}
    )
    assert got.line_ids == (current.id,)


def test_GUIDE06_identical_text_once() -> None:
    """GUIDE-06 with AUTO-08: identical text appears once."""
    a, b = hit(0.90, BRIEF, label(key="k1")), hit(0.89, f" {BRIEF} ", label(key="k2"))
    assert background([a, b, *fillers(0.5, 0.5, 0.5)]).line_ids == (a.id,)


def test_AUTO19_lexical_results_give_no_background() -> None:
    """AUTO-19: lexical scores are not calibrated for the floor; the background stays empty."""
    lexical = [hit(0.9, BRIEF, label(), mode="lexical"), hit(0.1, mode="lexical")]
    assert background(lexical).text == ""


# --------------------------------------------------------------------------------------------------
# GUIDE-07: opposite advice is shown together


def test_GUIDE07_opposite_advice_in_the_same_slot_is_shown_together() -> None:
    """GUIDE-07: a partner (same kind, subject and key; different value) joins without the median lead."""
    brief = hit(0.80, BRIEF, label(value="brief"), recorded="2026-05-03T10:00:00.000Z")
    long_ = hit(
        0.70, "Give long, detailed answers.", label(value="detailed"), recorded="2026-04-01T10:00:00Z"
    )
    filler = fillers(0.70, 0.70, 0.70, 0.70, 0.70, 0.70)
    got = background([brief, long_, *filler])
    assert got.line_ids == (brief.id, long_.id)
    assert body(got.text) == [
        "- preference (agent): Keep answers brief, no preamble. (recorded 2026-05-03; you said)",
        "- preference (agent): Give long, detailed answers. (recorded 2026-04-01; you said)",
    ]
    # the partner alone would not have joined
    assert background([long_, *filler]).text == ""


@pytest.mark.parametrize(
    "other",
    [
        label(key="preference:tone", value="detailed"),  # another key
        label(value="detailed", subject="person:morgan"),  # another subject
        label("lesson", value="detailed"),  # another kind
        label(value="Brief"),  # the same value (NFKC + casefold): a repeat, not an opposite
    ],
)
def test_GUIDE07_partners_share_the_slot_and_differ_in_value(other: dict[str, Any]) -> None:
    """GUIDE-07: the rule is structural — kind, subject and key equal, value different."""
    brief = hit(0.80, BRIEF, label(value="brief"))
    candidate = hit(0.70, "Another answer style line.", other)
    assert background([brief, candidate, *fillers(*[0.70] * 6)]).line_ids == (brief.id,)


def test_GUIDE07_partner_still_needs_the_floor_scope_and_currentness() -> None:
    """GUIDE-07 partners waive only the median lead (AMB-16), nothing else."""
    brief = hit(0.70, BRIEF, label(value="brief"))
    below = hit(0.6199, "Give long answers.", label(value="long"))
    foreign = hit(0.65, "Give long answers please.", label(value="long", scope="user:someone-else"))
    ended = hit(0.65, "Give long answers, ended.", label(value="long"), valid_to="2026-01-01")
    got = background([brief, foreign, ended, below, *fillers(0.3, 0.3, 0.3, 0.3)])
    assert got.line_ids == (brief.id,)


def test_GUIDE07_the_pair_is_one_unit_for_the_budget() -> None:
    """GUIDE-07 / GUIDE-15: a pair that does not fit is left out whole, never split or truncated."""
    brief = hit(0.80, BRIEF, label(value="brief"))
    long_ = hit(0.70, "Give long, detailed answers.", label(value="detailed"))
    filler = fillers(*[0.70] * 6)
    alone = background([brief, *filler])
    pair = background([brief, long_, *filler])
    assert alone.byte_size < pair.byte_size
    assert background([brief, long_, *filler], budget=pair.byte_size).line_ids == pair.line_ids
    assert background([brief, long_, *filler], budget=pair.byte_size - 1).text == ""
    # a lesson in another slot still fits where the pair did not
    lesson = hit(0.80, "Lint first.", label("lesson", "lesson:lint", "lint"))
    got = background([brief, long_, lesson, *fillers(*[0.70] * 5)], budget=pair.byte_size - 1)
    assert got.line_ids == (lesson.id,)


# --------------------------------------------------------------------------------------------------
# Wiring through automatic_lookup


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits, self.calls = hits, 0

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        self.calls += 1
        return list(self.hits)


def lookup(hits: list[Hit], message: str = QUESTION, **kw: Any) -> Any:
    kw.setdefault("gate", OWNER)
    kw.setdefault("conversation_id", THIS_CHAT)
    kw.setdefault("background", BackgroundScopes(owner_sender=SENDER))
    return automatic_lookup(Backend(hits), message, now=NOW, tz=UTC, **kw)


def turn_hits() -> list[Hit]:
    return [
        hit(0.80, BRIEF, label(value="brief")),
        hit(0.79, "Morgan prefers green tea in the morning."),
        hit(0.78, "The book club moved to Thursdays."),
        *fillers(0.30, 0.30, 0.30, 0.30, 0.30),
    ]


def test_GUIDE06_background_joins_the_context_and_is_not_repeated_in_the_block() -> None:
    """GUIDE-06: one lookup, background between card and block; its line does not repeat in the block."""
    hits = turn_hits()
    got = lookup(hits)
    assert got.background.line_ids == (hits[0].id,)
    assert hits[0].id not in got.block.line_ids and set(got.block.line_ids) == {hits[1].id, hits[2].id}
    assert got.context_text == f"{got.background.text}\n\n{got.block.text}"
    assert got.context_text.count("Keep answers brief") == 1


def test_GUIDE06_block_reason_when_its_only_line_is_in_the_background() -> None:
    """GUIDE-06: the block computes its floor and window as before and reports why it is empty."""
    hits = [hit(0.80, BRIEF, label()), *fillers(0.3, 0.3, 0.3)]
    got = lookup(hits)
    assert got.block.text == "" and got.block.suppressed == "in_background"
    assert got.context_text == got.background.text != ""


def test_GUIDE14_background_survives_the_short_message_gate() -> None:
    """GUIDE-14 / AUTO-17: the short-message gate suppresses the block, not the labelled background."""
    got = lookup(turn_hits(), "answers?")
    assert got.block.suppressed == "short_message"
    assert got.context_text == got.background.text and "Keep answers brief" in got.context_text


@pytest.mark.parametrize("used", [0, 900, 1500, 2200, 2540])
def test_GUIDE15_AUTO15_background_counts_toward_the_whole_context(used: int) -> None:
    """GUIDE-15 / AUTO-15: profile + background + block stay within 2,560 bytes (AMB-14)."""
    advice = [hit(0.96, f"Advice {i}: " + "x" * 340, label(key=f"k{i}")) for i in range(3)]
    hits = [*advice, hit(0.93, "Block line " + "y" * 300), *fillers(0.1, 0.1, 0.1, 0.1)]
    got = lookup(hits, context_bytes_used=used)
    assert used + len(got.context_text.encode()) <= AUTO_CONTEXT_MAX_BYTES
    assert got.background.byte_size <= min(BACKGROUND_MAX_BYTES, AUTO_CONTEXT_MAX_BYTES - used)
    if used == 0:  # two ~390-byte advice lines fit the 1,024-byte share, the third gives way to the block
        assert len(got.background.line_ids) == 2 and advice[2].id in got.block.line_ids


def test_GUIDE15_background_bytes_shrink_the_block_share() -> None:
    """GUIDE-15: what the background takes (plus its separator) is no longer available to the block."""
    advice = hit(0.96, "Advice: " + "x" * 300, label())
    block_lines = [hit(0.92, f"Block line {i} " + "y" * 300) for i in range(3)]
    hits = [advice, *block_lines, *fillers(0.1, 0.1, 0.1, 0.1)]
    used = 1200  # e.g. an owner profile already in the automatic context
    on = lookup(hits, context_bytes_used=used)
    assert on.background.line_ids == (advice.id,)
    shown = on.background.line_ids
    uncounted = select_auto_block(
        hits, now=NOW, tz=UTC, gate=OWNER, owner_text=QUESTION, context_bytes_used=used, shown_elsewhere=shown
    )
    assert len(uncounted.line_ids) == 3 and len(on.block.line_ids) == 2
    assert used + len(on.context_text.encode()) <= AUTO_CONTEXT_MAX_BYTES


def test_GUIDE15_card_and_background_share_the_context(tmp_path: Path) -> None:
    """GUIDE-15: person card, labelled background and block together stay within 2,560 bytes."""
    from tempomem.recall.graph_read import GraphReader
    from tempomem.storage import graph as g
    from tempomem.storage.markdown import Bullet, append_bullets

    facts = [
        Bullet(signifier="–", text=f"Morgan fact {i}.", id=f"m{i:03d}", type="fact", status="open",
               recorded="2026-05-01T10:00:00.000Z", entities=("person:morgan",), attr="owner",
               labels=json.dumps([{"kind": "fact", "scope": "user:owner", "key": f"key {i:02d}",
                                   "value": "v" * 80, "attribution": "owner"}]))
        for i in range(30)
    ]  # fmt: skip
    (tmp_path / "daily").mkdir()
    append_bullets(tmp_path / "daily" / "2026-05-01.md", "2026-05-01", facts)
    g.apply(
        tmp_path,
        [{"id": "person:morgan", "name": "Morgan", "type": "person", "memories": [b.id for b in facts]}],
    )
    advice = [hit(0.96, f"Advice {i}: " + "x" * 300, label(key=f"k{i}")) for i in range(3)]
    hits = [*advice, hit(0.93, "Block line " + "y" * 300), *fillers(0.1, 0.1, 0.1, 0.1)]
    got = lookup(hits, "What should I tell Morgan today?", cards_from=GraphReader(tmp_path))
    assert got.cards.text and got.background.text
    assert len(got.context_text.encode()) <= AUTO_CONTEXT_MAX_BYTES
    assert got.context_text.startswith(got.cards.text + "\n\n" + got.background.text)


def test_GUIDE16_intent_expiry_excludes_dated_and_done_lines() -> None:
    """GUIDE-16 / INTENT-22: under intentExpiry dated and done/dropped labelled lines are not guidance."""
    dated = hit(0.80, "Dated advice.", label(key="k1"), due="2026-12-01")
    done = hit(0.80, "Done advice.", label(key="k2"), status="done")
    plain = hit(0.80, "Plain advice.", label(key="k3"))
    hits = [dated, done, plain, *fillers(0.3, 0.3, 0.3, 0.3)]
    assert lookup(hits, intent_expiry=True).background.line_ids == (plain.id,)
    assert set(lookup(hits).background.line_ids) == {dated.id, done.id, plain.id}


@pytest.mark.parametrize(
    "gate",
    [
        TurnGate(verified_owner=False, surface="web"),
        TurnGate(verified_owner=True, surface="telegram"),
        TurnGate(verified_owner=True, surface="web", process_job_wake=True),
    ],
)
def test_GUIDE18_no_background_outside_verified_owner_turns(gate: TurnGate) -> None:
    """GUIDE-18 / AUTO-20..22: not for other speakers, Telegram or process-job completion wakes."""
    got = lookup(turn_hits(), gate=gate)
    assert got.background.text == "" and got.context_text == ""
    assert len(got.hits) == len(turn_hits())  # the lookup itself still ran for useOriginalQuery


def test_GUIDE06_off_switch_is_byte_identical() -> None:
    """GUIDE-06: with the switch off (the default) the automatic context is exactly the plain block."""
    hits = turn_hits()
    plain = select_auto_block(
        hits, now=NOW, tz=UTC, gate=OWNER, owner_text=QUESTION, conversation_id=THIS_CHAT
    )
    default = automatic_lookup(
        Backend(hits), QUESTION, now=NOW, tz=UTC, gate=OWNER, conversation_id=THIS_CHAT
    )
    off = lookup(hits, background=None)
    assert default.block.model_dump_json() == off.block.model_dump_json() == plain.model_dump_json()
    assert default.context_text.encode() == off.context_text.encode() == plain.text.encode()
    assert plain.text.startswith(HEADING) and "Keep answers brief" in plain.text
    on = lookup(hits)
    assert on.context_text != off.context_text  # the switch does something when on


# --------------------------------------------------------------------------------------------------
# A real index: DuckDB full-text + LanceDB vectors + the MiniLM embedder


def test_integration_real_index_background(tmp_path: Path) -> None:
    """GUIDE-06 / GUIDE-07 / GUIDE-14 over a real index: the strongly matching preference joins, its
    same-slot opposite joins only with the floor, unlabelled and assistant lessons never do."""
    from tempomem.recall.embedding import LocalMiniLMEmbedder
    from tempomem.recall.index import MemoryIndex
    from tempomem.storage.markdown import Bullet, append_bullets

    def b(i: int, text: str, *labels: dict[str, Any]) -> Bullet:
        return Bullet(
            signifier="–",
            text=text,
            id=f"r{i}",
            type="preference" if labels else "note",
            status="open",
            recorded=f"2026-05-0{i}T08:00:00.000Z",
            labels=json.dumps(list(labels)) if labels else None,
            source_session="web:other",
            attr="owner",
        )

    append_bullets(tmp_path / "daily" / "2026-05-01.md", "2026-05-01", [
        b(1, "I prefer short answers without a long preamble.", label(value="short, no preamble")),
        b(2, "I prefer long, detailed answers with full explanations.", label(value="long and detailed")),
        b(3, "The quarterly tax filing is due in April."),
        b(4, "Morgan prefers green tea in the morning."),
        b(5, "Always run the linter before committing code.",
          label("lesson", "lesson:lint", "lint first", attribution="assistant")),
        b(6, "We moved the book club to Thursdays."),
        b(7, "The dentist appointment is next month."),
        b(8, "My favourite colour is blue."),
        b(9, "The garage door code changed last week."),
    ])  # fmt: skip
    index = MemoryIndex(tmp_path, LocalMiniLMEmbedder())
    query = "Do I prefer short answers without a preamble?"
    got = automatic_lookup(index, query, now=NOW, tz=UTC, gate=OWNER, conversation_id=THIS_CHAT,
                           background=BackgroundScopes())  # fmt: skip
    from tempomem.recall.profiles import scored_by

    floor = scored_by(h.profile for h in got.hits).auto_floor  # the default profile's, on its scale
    scores = {h.id: h.floor_score for h in got.hits}
    assert got.background.line_ids[0] == "r1"
    assert set(got.background.line_ids) <= {"r1", "r2"}  # r5 is an assistant-noted lesson
    assert ("r2" in got.background.line_ids) is (scores["r2"] >= floor)
    assert "r1" not in got.block.line_ids
    assert got.background.text.splitlines()[2] == (
        "- preference (agent): I prefer short answers without a long preamble. "
        "(recorded 2026-05-01; you said)"
    )
    short = automatic_lookup(
        index, "Short answers?", now=NOW, tz=UTC, gate=OWNER, background=BackgroundScopes()
    )
    assert short.block.suppressed == "short_message"
    assert short.context_text == short.background.text
