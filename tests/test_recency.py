"""Deliberate recency, ``memory.recall.recency`` (INTENT-31..INTENT-37, AMB-45, LIM-60, LIM-61).

The pure ordering over exact scores, then MemoryRecall with and without the switch, then a real BuJo store
(real Markdown, real index and embedder) where only the config key differs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tempomem.recall.recency import RECENCY_HALF_LIFE_DAYS, RECENCY_MAX, recency_order, recency_term
from tempomem.recall.search import Hit
from tempomem.recall.tools import memory_recall
from tempomem.storage.markdown import Bullet, append_bullets
from tests.conftest import make_store

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(days_ago: float) -> str:
    return (NOW - timedelta(days=days_ago)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hit(
    mid: str,
    score: float,
    *,
    type: str = "note",
    days_ago: float = 0,
    labels: list | None = None,
    recorded: str | None = None,
) -> Hit:
    return Hit(
        id=mid,
        text=f"text {mid}",
        day="2026-12-01",
        recorded=recorded if recorded is not None else at(days_ago),
        type=type,
        status="open",
        score=score,
        mode="hybrid",
        source_session="web:t",
        labels=json.dumps(labels) if labels is not None else None,
    )


def ids(hits: list) -> list[str]:
    return [h.id for h in hits]


LABEL = {"kind": "fact", "scope": "user:owner", "key": "k", "value": "v"}


def test_INTENT31_AMB45_term_is_at_most_0_02_with_a_30_day_half_life() -> None:
    assert (RECENCY_MAX, RECENCY_HALF_LIFE_DAYS) == (0.02, 30)  # LIM-60, LIM-61
    assert recency_term(hit("a", 0.8, days_ago=0), now=NOW) == pytest.approx(0.02)
    assert recency_term(hit("a", 0.8, days_ago=30), now=NOW) == pytest.approx(0.01)
    assert recency_term(hit("a", 0.8, days_ago=90), now=NOW) == pytest.approx(0.0025)


def test_INTENT33_only_unlabelled_notes_and_events_without_fact_or_preference_labels() -> None:
    lesson = {**LABEL, "kind": "lesson"}
    assert recency_term(hit("a", 0.8, type="note"), now=NOW) > 0
    assert recency_term(hit("a", 0.8, type="event"), now=NOW) > 0
    assert recency_term(hit("a", 0.8, type="event", labels=[lesson]), now=NOW) > 0
    for never in (
        hit("a", 0.8, type="fact"),
        hit("a", 0.8, type="preference"),
        hit("a", 0.8, type="task"),
        hit("a", 0.8, type="note", labels=[lesson]),  # a labelled note
        hit("a", 0.8, type="event", labels=[LABEL]),
        hit("a", 0.8, type="event", labels=[{**LABEL, "kind": "preference"}]),
    ):
        assert recency_term(never, now=NOW) == 0.0, never


@pytest.mark.parametrize("recorded", ["", "not a date", "2026-12-01T12:00:00", at(-1)])
def test_INTENT34_missing_invalid_or_future_instants_get_nothing(recorded: str) -> None:
    assert recency_term(hit("a", 0.8, recorded=recorded), now=NOW) == 0.0


def test_INTENT35_INTENT36_only_qualifying_hits_move_and_scores_stay() -> None:
    hits = [
        hit("old", 0.80, days_ago=400),
        hit("new", 0.79, days_ago=1),  # 0.79 + ~0.02 overtakes 0.80 + ~0
        hit("fact", 0.785, type="fact", days_ago=0),
        hit("low", 0.60, days_ago=0),  # below the 0.65 floor: never rescued, stays in place
    ]
    assert ids(recency_order(hits, now=NOW)) == ["new", "old", "fact", "low"]
    assert [h.score for h in recency_order(hits, now=NOW)] == [0.79, 0.80, 0.785, 0.60]
    assert ids(recency_order(hits[:1], now=NOW)) == ["old"]
    below = [hit("a", 0.60, days_ago=400), hit("b", 0.59, days_ago=0)]
    assert ids(recency_order(below, now=NOW)) == ["a", "b"]  # nothing clears the floor
    outside = [hit("a", 0.90, days_ago=400), hit("b", 0.70, days_ago=0)]  # 0.20 below best: not qualifying
    assert ids(recency_order(outside, now=NOW)) == ["a", "b"]


def test_INTENT36_ties_keep_the_backend_order_and_base_breaks_equal_sums() -> None:
    same = [hit("a", 0.8, days_ago=5), hit("b", 0.8, days_ago=5)]
    assert ids(recency_order(same, now=NOW)) == ["a", "b"]
    facts = [hit("x", 0.8, type="fact"), hit("y", 0.81, type="fact")]  # no terms: base decides
    assert ids(recency_order(facts, now=NOW)) == ["y", "x"]


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        return list(self.hits)


HITS = [hit("old", 0.80, days_ago=400), hit("new", 0.79, days_ago=1), hit("low", 0.40, days_ago=0)]


def test_INTENT32_memory_recall_orders_only_with_the_switch_and_keeps_membership() -> None:
    off = memory_recall(Backend(HITS), query="q", now=NOW, tz=UTC)
    on = memory_recall(Backend(HITS), query="q", now=NOW, tz=UTC, recency=True)
    assert ids(off.hits) == ["old", "new"] and ids(on.hits) == ["new", "old"]
    assert sorted((h.id, h.score) for h in on.hits) == sorted((h.id, h.score) for h in off.hits)
    assert on.evidence == off.evidence


def test_INTENT32_INTENT36_original_query_mode_keeps_its_uncut_tail_in_place() -> None:
    on = memory_recall(object(), use_original_query=True, original_hits=HITS, now=NOW, tz=UTC, recency=True)  # type: ignore[arg-type]
    assert ids(on.hits) == ["new", "old", "low"]


def write_day(root: Path, bullets: list[Bullet]) -> None:
    (root / "daily").mkdir(mode=0o700, parents=True, exist_ok=True)
    append_bullets(root / "daily" / "2026-11-30.md", "2026-11-30", bullets)


def note(mid: str, recorded: str) -> Bullet:
    return Bullet(
        signifier="–",
        text="We planned a hiking trip to the Azores in spring.",
        id=mid,
        type="note",
        status="open",
        recorded=recorded,
        source_session="web:t",
    )


@pytest.mark.parametrize("newer", ["c-aaaa", "c-bbbb"])
def test_INTENT32_a_real_bujo_store_orders_by_recency_only_when_configured(
    tmp_path: Path, newer: str
) -> None:
    """Two identical notes (same score) recorded two years apart: with recency on, the newer comes first
    whichever order the index returns them in; with it off, the order does not depend on the dates.
    PROV-11: the index built by the rebuild carries each line's session from the Markdown alone."""
    orders, automatic = {}, {}
    for recency in (False, True):
        root = tmp_path / f"mem-{recency}"
        dates = {"c-aaaa": "2024-11-30T09:00:00.000Z", "c-bbbb": "2024-11-30T09:00:00.000Z"}
        dates[newer] = "2026-11-30T09:00:00.000Z"
        write_day(root, [note(mid, dates[mid]) for mid in sorted(dates)])
        llm = {"provider": "ollama", "model": "m"}
        store = make_store(root, None, mode="bujo", llm=llm, recall={"recency": recency})
        store.rebuild()
        result = store.recall_sync("hiking trip to the Azores in spring")
        lookup = store.automatic_context_sync(
            "what was the hiking trip to the Azores in spring", verified_owner=True, surface="web"
        )
        assert [h.source_session for h in store.search("hiking trip to the Azores")] == ["web:t", "web:t"]
        store.close()
        orders[recency] = ids(result.hits)
        automatic[recency] = (ids(lookup.hits), lookup.block.text)
    assert sorted(orders[True]) == sorted(orders[False]) == ["c-aaaa", "c-bbbb"]
    assert orders[True][0] == newer
    assert automatic[True] == automatic[False] and automatic[True][0]  # INTENT-37: never the automatic lookup


def test_INTENT35_the_floor_and_the_margin_are_inclusive() -> None:
    """A best hit exactly at the floor still reorders; a hit exactly at the floor, or exactly the tail
    margin below the best, still qualifies; one just below the floor keeps its place even within the
    margin."""
    floor, margin = 0.65, 0.15
    at_floor = [hit("old", 0.65, days_ago=300), hit("new", 0.65, days_ago=0)]
    assert ids(recency_order(at_floor, now=NOW, floor=floor, margin=margin)) == ["new", "old"]
    # 0.8 - 0.65 is the margin up to float rounding (0.15000000000000002): the tolerance admits it.
    edge = [hit("top", 0.8, type="fact"), hit("mid", 0.655, type="fact"), hit("edge", 0.65, days_ago=0)]
    assert ids(recency_order(edge, now=NOW, floor=floor, margin=margin)) == ["top", "edge", "mid"]
    within = [hit("a", 0.66, type="fact"), hit("b", 0.6599, days_ago=0), hit("c", 0.645, days_ago=0)]
    assert ids(recency_order(within, now=NOW, floor=floor, margin=margin)) == ["b", "a", "c"]


def test_INTENT35_equal_sums_keep_the_higher_base_score_first() -> None:
    """Base + term tie (0.78 + 0.02 = 0.80 exactly): the higher base score goes first."""
    tied = [hit("recent", 0.78, days_ago=0), hit("fact", 0.8, type="fact")]
    assert 0.78 + recency_term(tied[0], now=NOW) == 0.8
    assert ids(recency_order(tied, now=NOW)) == ["fact", "recent"]
