"""Deliberate recency (``memory.recall.recency``, INTENT-31..INTENT-37, AMB-45, LIM-60, LIM-61).

A secondary ordering term of at most 0.02 that halves every 30 days of age, for events without fact or
preference labels and for unlabelled notes only (INTENT-33); facts, preferences, labelled notes and tasks
never get one. A missing, unparseable or future recording instant gets none (INTENT-34).

Only qualifying hits move: those at or above the unchanged floor and within the tail margin of the best
(INTENT-35); a below-floor hit is never rescued, and in original-query mode the uncut tail keeps its place
(INTENT-36). Scores are never changed and no hit joins or leaves the list: the order among the
qualifying hits is ``(base + term)`` descending, then base, then the backend's order. Only deliberate
hybrid BuJo recall calls this; automatic lookup, guidance, the journal and telemetry never do (INTENT-37).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from tempomem.recall.search import Hit
from tempomem.storage.limits import DELIBERATE_FLOOR, TAIL_MARGIN

RECENCY_MAX = 0.02  # LIM-60
RECENCY_HALF_LIFE_DAYS = 30  # LIM-61
_EPSILON = 1e-9  # the shaping module's score tolerance


def _label_kinds(hit: Hit) -> set[str] | None:
    """The hit's label kinds; ``None`` when its labels cannot be read (then it is treated as labelled)."""
    if not hit.labels:
        return set()
    try:
        data = json.loads(hit.labels)
    except ValueError:
        return None
    if not isinstance(data, list):
        return None
    return {str(item.get("kind")) for item in data if isinstance(item, dict)}


def is_eligible(hit: Hit) -> bool:
    """INTENT-33: unlabelled notes, and events without fact/preference labels."""
    kinds = _label_kinds(hit)
    if kinds is None:
        return False
    if hit.type == "note":
        return not kinds
    if hit.type == "event":
        return not (kinds & {"fact", "preference"})
    return False


def recency_term(hit: Hit, *, now: datetime) -> float:
    """AMB-45: ``0.02 × 0.5 ** (age_days / 30)``; 0 when ineligible or the instant is unusable."""
    if not is_eligible(hit) or not hit.recorded:
        return 0.0
    try:
        recorded = datetime.fromisoformat(hit.recorded.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if recorded.tzinfo is None:
        return 0.0  # an instant without an offset is not a usable recording instant
    age_seconds = (now.astimezone(UTC) - recorded.astimezone(UTC)).total_seconds()
    if age_seconds < 0:
        return 0.0
    return RECENCY_MAX * 0.5 ** (age_seconds / 86_400 / RECENCY_HALF_LIFE_DAYS)


def recency_order(
    hits: Sequence[Hit],
    *,
    now: datetime,
    floor: float = DELIBERATE_FLOOR,
    margin: float = TAIL_MARGIN,
) -> list[Hit]:
    """``hits`` with the qualifying ones reordered in their own positions; everything else in place."""
    if not hits:
        return []
    best = max(h.score for h in hits)
    if max(h.floor_score for h in hits) < floor - _EPSILON:
        return list(hits)  # nothing qualifies: hits below the floor are never reordered (INTENT-35)
    slots = [
        i
        for i, h in enumerate(hits)
        if h.floor_score >= floor - _EPSILON and best - h.score <= margin + _EPSILON
    ]
    ranked = sorted(
        slots, key=lambda i: (-(hits[i].score + recency_term(hits[i], now=now)), -hits[i].score, i)
    )
    out = list(hits)
    for slot, source in zip(slots, ranked, strict=True):
        out[slot] = hits[source]
    return out
