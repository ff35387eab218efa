"""Evidence floors follow the recall profile that scored the hits (bench/locomo_floors.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tempomem.recall.auto_block import TurnGate, automatic_lookup, select_auto_block
from tempomem.recall.guidance import GUIDANCE_FLOOR, guidance_lines, labelled_background
from tempomem.recall.index import MemoryIndex
from tempomem.recall.profiles import PROFILES, REFERENCE, TUNED, TUNED_MINILM, RecallProfile, scored_by
from tempomem.recall.search import Candidate, Hit, rank
from tempomem.recall.shaping import INSUFFICIENT_PREFIX, answer_floor, shape_hits
from tempomem.recall.tools import memory_recall
from tempomem.storage.limits import AUTO_BLOCK_FLOOR, DELIBERATE_FLOOR
from tempomem.storage.markdown import Bullet, append_bullets

NOW = datetime(2026, 7, 10, 12, 0, tzinfo=UTC)
OWNER = TurnGate(verified_owner=True, surface="web")
QUESTION = "What does Morgan like to drink these days?"
_N = 0


def hit(score: float, profile: RecallProfile | None, text: str | None = None, **kw: Any) -> Hit:
    global _N
    _N += 1
    data: dict[str, Any] = {
        "id": f"f{_N:04d}",
        "text": text or f"memory line {_N}",
        "day": "2026-05-01",
        "recorded": "2026-05-01T10:00:00.000Z",
        "type": "note",
        "status": "open",
        "score": score,
        "mode": "hybrid",
        "source_session": "web:other-thread-99",
        "profile": profile,
    }
    data.update(kw)
    return Hit(**data)


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        return self.hits[:limit]


def test_reference_floors_are_exactly_the_spec_constants() -> None:
    assert (REFERENCE.answer_floor, REFERENCE.auto_floor) == (0.65, 0.62)
    assert (DELIBERATE_FLOOR, AUTO_BLOCK_FLOOR, GUIDANCE_FLOOR) == (0.65, 0.62, 0.65)


def test_tuned_floors_are_on_their_own_scale() -> None:
    assert (TUNED_MINILM.answer_floor, TUNED_MINILM.auto_floor) == (0.88, 0.98)
    assert (TUNED.answer_floor, TUNED.auto_floor) == (0.95, 0.98)
    for p in (TUNED, TUNED_MINILM):
        # Unlike the reference, the automatic block is the stricter one: it is injected unasked.
        assert p.auto_floor > p.answer_floor
        assert p.answer_floor > REFERENCE.answer_floor and p.auto_floor > REFERENCE.auto_floor


def test_scored_by() -> None:
    assert scored_by([]) is REFERENCE
    assert scored_by([None, None]) is REFERENCE
    assert scored_by([TUNED_MINILM, None, TUNED_MINILM]) == TUNED_MINILM  # graph lines carry none
    assert scored_by([TUNED, TUNED_MINILM]) is REFERENCE  # mixed scales: the reference contract
    assert answer_floor([hit(0.9, TUNED_MINILM)]) == 0.88
    assert answer_floor([hit(0.9, None)]) == 0.65


def test_rank_stamps_the_profile_on_hybrid_hits_only() -> None:
    cands = [
        Candidate(
            id="a",
            text="green tea every morning",
            row={"day": "2026-05-01"},
            cosine=0.8,
            bm25_rank=1,
            bm25_score=2.0,
            vector_rank=1,
        ),
        Candidate(id="b", text="coffee after lunch", row={"day": "2026-05-01"}, cosine=0.6, vector_rank=2),
    ]
    for profile in (REFERENCE, TUNED_MINILM):
        assert {h.profile for h in rank("tea", cands, limit=5, profile=profile, hybrid=True)} == {profile}
    assert {h.profile for h in rank("tea", cands, limit=5, profile=TUNED, hybrid=False)} == {None}
    # Never serialised (CLI JSON output unchanged).
    got = rank("tea", cands, limit=1, profile=TUNED_MINILM, hybrid=True)[0]
    assert "profile" not in got.model_dump()


@pytest.mark.parametrize(
    ("score", "tuned_note", "reference_note"), [(0.80, True, False), (0.99, False, False)]
)
def test_insufficient_note_uses_the_tuned_answer_floor(
    score: float, tuned_note: bool, reference_note: bool
) -> None:
    """0.80 clears the reference's 0.65 but not tuned-minilm's 0.88: the same number is no answer on
    the tuned scale."""
    for profile, expected in (
        (TUNED_MINILM, tuned_note),
        (None, reference_note),
        (REFERENCE, reference_note),
    ):
        shaped = shape_hits([hit(score, profile)], now=NOW, tz=UTC, limit=8)
        assert (shaped.evidence == "insufficient") is expected
        assert any(n.startswith(INSUFFICIENT_PREFIX) for n in shaped.notes) is expected
    shaped = shape_hits([hit(0.80, TUNED_MINILM)], now=NOW, tz=UTC, limit=8)
    assert "below 0.880" in shaped.notes[0]


def test_tail_cut_floor_follows_the_profile() -> None:
    """Best clears the tuned floor: tuned hits below 0.88 are cut, within the 0.15 margin as before."""
    tuned = [hit(0.98, TUNED_MINILM), hit(0.9, TUNED_MINILM), hit(0.875, TUNED_MINILM)]
    assert [h.score for h in shape_hits(tuned, now=NOW, tz=UTC, limit=8).hits] == [0.98, 0.9]
    ref = [hit(0.98, REFERENCE), hit(0.9, REFERENCE), hit(0.875, REFERENCE)]
    assert [h.score for h in shape_hits(ref, now=NOW, tz=UTC, limit=8).hits] == [0.98, 0.9, 0.875]


def test_memory_recall_text_carries_the_tuned_note() -> None:
    got = memory_recall(
        Backend([hit(0.80, TUNED_MINILM, "Morgan drinks green tea.")]), query="drink", now=NOW, tz=UTC
    )
    assert got.evidence == "insufficient"
    assert got.text.startswith(INSUFFICIENT_PREFIX)
    same = memory_recall(
        Backend([hit(0.80, None, "Morgan drinks green tea.")]), query="drink", now=NOW, tz=UTC
    )
    assert same.evidence is None and not same.text.startswith(INSUFFICIENT_PREFIX)


@pytest.mark.parametrize(
    ("score", "profile", "shown"),
    [
        (0.97, TUNED_MINILM, False),  # clears 0.62, not 0.98
        (0.98, TUNED_MINILM, True),
        (0.90, REFERENCE, True),
        (0.90, None, True),
        (0.97, TUNED, False),  # e5 tuned: 0.98
        (0.98, TUNED, True),
    ],
)
def test_auto_block_uses_the_profile_auto_floor(
    score: float, profile: RecallProfile | None, shown: bool
) -> None:
    b = select_auto_block(
        [hit(score, profile, "Morgan prefers green tea.")], now=NOW, tz=UTC, gate=OWNER, owner_text=QUESTION
    )
    assert bool(b.text) is shown
    assert b.suppressed == (None if shown else "below_floor")
    lookup = automatic_lookup(
        Backend([hit(score, profile, "Morgan prefers green tea.")]), QUESTION, now=NOW, tz=UTC, gate=OWNER
    )
    assert bool(lookup.block.text) is shown


def _labelled(score: float, profile: RecallProfile | None) -> Hit:
    label = {
        "kind": "preference",
        "scope": "agent",
        "key": "preference:answer_length",
        "value": "brief",
        "attribution": "owner",
    }
    return hit(score, profile, "Keep answers brief.", type="preference", labels=json.dumps([label]))


@pytest.mark.parametrize(
    ("score", "profile", "shown"),
    [(0.97, TUNED_MINILM, False), (0.99, TUNED_MINILM, True), (0.90, REFERENCE, True)],
)
def test_labelled_background_uses_the_profile_auto_floor(
    score: float, profile: RecallProfile | None, shown: bool
) -> None:
    fillers = [hit(0.10, profile, f"filler {i}") for i in range(7)]
    got = labelled_background([_labelled(score, profile), *fillers], now=NOW, tz=UTC)
    assert bool(got.text) is shown


@pytest.mark.parametrize(
    ("score", "profile", "shown"),
    [(0.87, TUNED_MINILM, False), (0.88, TUNED_MINILM, True), (0.70, REFERENCE, True), (0.64, None, False)],
)
def test_guidance_section_uses_the_profile_answer_floor(
    score: float, profile: RecallProfile | None, shown: bool
) -> None:
    assert bool(guidance_lines([_labelled(score, profile)], now=NOW, tz=UTC)) is shown


def test_index_search_hits_carry_the_resolved_profile(tmp_path: Path) -> None:
    """Lite (no embedder) is lexical: no profile stamp, so no floors apply (REC-42)."""
    day = "2026-05-01"
    bullet = Bullet(
        signifier="–",
        text="Morgan prefers green tea.",
        id="t1",
        type="note",
        status="open",
        recorded=f"{day}T10:00:00.000Z",
    )
    append_bullets(tmp_path / "daily" / f"{day}.md", day, [bullet])
    idx = MemoryIndex(tmp_path, None)
    idx.rebuild()
    hits = idx.search("green tea", limit=5)
    assert hits and all(h.profile is None and h.mode == "lexical" for h in hits)


def test_every_registered_profile_has_floors() -> None:
    for p in PROFILES.values():
        assert 0 < p.auto_floor < 2 and 0 < p.answer_floor < 2
        if p.ranker != "tuned":  # on the reference scale the block is the looser floor (0.62 < 0.65)
            assert p.auto_floor <= p.answer_floor


# --------------------------------------------------------------------------------------------------
# Floors on the evidence before conversation context (``floor_on="evidence"``, issue #17)


def test_rank_records_the_evidence_before_context_only_for_profiles_whose_floors_use_it() -> None:
    """tuned-minilm's hits carry their score before neighbour context as ``evidence``; a profile with
    ``floor_on="score"`` (e5 ``tuned``, the reference) carries none, so its floors see the score."""
    cands = [
        Candidate(id="a", text="green tea every morning", row={"day": "2026-05-01", "seq": 1}, cosine=0.8,
                  bm25_rank=1, bm25_score=2.0, vector_rank=1),
        Candidate(id="b", text="coffee after lunch", row={"day": "2026-05-01", "seq": 2}, cosine=0.6,
                  vector_rank=2),
    ]  # fmt: skip
    assert TUNED_MINILM.floor_on == "evidence" and TUNED.floor_on == REFERENCE.floor_on == "score"
    flat = TUNED_MINILM.model_copy(update={"neighbour_weight": 0.0, "neighbour2_weight": 0.0})
    before = {h.id: h.score for h in rank("tea", cands, limit=5, profile=flat, hybrid=True)}
    hits = rank("tea", cands, limit=5, profile=TUNED_MINILM, hybrid=True)
    assert {h.id: h.evidence for h in hits} == before == {h.id: h.floor_score for h in hits}
    assert hits[1].score > hits[1].evidence  # type: ignore[operator]  # b gained a's neighbour context
    for profile in (TUNED, REFERENCE):
        got = rank("tea", cands, limit=5, profile=profile, hybrid=True)
        assert all(h.evidence is None and h.floor_score == h.score for h in got)
    assert "evidence" not in hits[0].model_dump()  # never serialised (CLI JSON unchanged)


def test_every_floor_compares_the_evidence_when_a_hit_carries_it() -> None:
    """Scores far above the floors, evidence below them: no answer, no tail line, no automatic block, no
    background, no guidance; the same evidence above the floors passes everywhere."""
    low, high = TUNED_MINILM.answer_floor - 0.05, TUNED_MINILM.auto_floor + 0.01

    def h(evidence: float, text: str = "Morgan prefers green tea.", **kw: Any) -> Hit:
        return hit(2.0, TUNED_MINILM, text, evidence=evidence, **kw)

    shaped = shape_hits([h(low)], now=NOW, tz=UTC, limit=8)
    assert shaped.evidence == "insufficient"
    assert shape_hits([h(high)], now=NOW, tz=UTC, limit=8).evidence is None
    kept = shape_hits([h(high), h(low, "another line")], now=NOW, tz=UTC, limit=8).hits
    assert len(kept) == 1  # same score, evidence under the answer floor: cut
    block = select_auto_block([h(low)], now=NOW, tz=UTC, gate=OWNER, owner_text=QUESTION)
    assert block.suppressed == "below_floor"
    assert select_auto_block([h(high)], now=NOW, tz=UTC, gate=OWNER, owner_text=QUESTION).text
    fillers = [hit(0.10, TUNED_MINILM, f"filler {i}") for i in range(7)]
    for evidence, shown in ((low, False), (high, True)):
        labelled = _labelled(2.0, TUNED_MINILM).model_copy(update={"evidence": evidence})
        assert bool(labelled_background([labelled, *fillers], now=NOW, tz=UTC).text) is shown
        assert bool(guidance_lines([labelled], now=NOW, tz=UTC)) is shown
    # BuJo recency reorders only qualifying hits: evidence under the floor keeps the order as it is.
    from tempomem.recall.recency import recency_order

    def pair(evidence: float) -> list[Hit]:
        old = h(evidence, "older line", recorded="2025-01-01T10:00:00.000Z")
        new = h(evidence, "newer line", recorded="2026-07-10T10:00:00.000Z").model_copy(
            update={"score": 1.99}
        )
        return [old, new]

    floor = TUNED_MINILM.answer_floor
    assert [x.text for x in recency_order(pair(low), now=NOW, floor=floor)] == ["older line", "newer line"]
    assert [x.text for x in recency_order(pair(high), now=NOW, floor=floor)] == ["newer line", "older line"]
