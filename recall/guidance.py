"""The explicit MemoryRecall "Preferences & lessons" section (GUIDE-01..GUIDE-05, AMB-15).

Only labelled preference/lesson lines among the effective query's top eight retrieved candidates take part;
they must clear ``GUIDANCE_FLOOR`` unless the request names that ``kind``. Scope precedence is user, then
conversation, then agent; within a scope higher scores first; at most six lines. Scope ids (a sender or a
conversation id) are never shown (GUIDE-17, PROV-19).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, tzinfo

from recall.search import Hit
from recall.shaping import SCORE_EPSILON, currentness, is_recallable, parse_labels
from storage.limits import GUIDANCE_MAX_LINES, GUIDANCE_WINDOW

GUIDANCE_FLOOR = 0.65  # AMB-15: separate from the automatic floor, kept configurable
GUIDANCE_HEADING = "Preferences & lessons:"
GUIDANCE_KINDS = ("preference", "lesson")
_SCOPE_ORDER = {"user": 0, "conversation": 1, "agent": 2}


def _scope_kind(scope: str) -> str | None:
    kind = scope.split(":", 1)[0]
    return kind if kind in _SCOPE_ORDER else None


def guidance_lines(
    candidates: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    kind: str | None = None,
    floor: float = GUIDANCE_FLOOR,
    superseded_ids: Collection[str] | None = None,
) -> list[str]:
    """Lines for the section, best first; empty when nothing is eligible (GUIDE-04)."""
    wanted = (kind,) if kind in GUIDANCE_KINDS else GUIDANCE_KINDS
    picked: list[tuple[int, float, int, str]] = []
    for rank, hit in enumerate(candidates[:GUIDANCE_WINDOW]):
        if not is_recallable(hit, superseded_ids):
            continue
        if kind is None and hit.score < floor - SCORE_EPSILON:
            continue  # GUIDE-03: an explicit kind may show lines below the floor
        if currentness(hit, now=now, tz=tz, superseded_ids=superseded_ids).state != "current":
            continue
        best: tuple[int, str] | None = None
        for label in parse_labels(hit):
            scope = _scope_kind(label.scope)
            if label.kind in wanted and scope is not None:
                option = (_SCOPE_ORDER[scope], f"- {label.kind} ({scope}): {hit.text}")
                best = option if best is None or option[0] < best[0] else best
        if best is not None:
            picked.append((best[0], -hit.score, rank, best[1]))
    picked.sort()
    return [line for *_, line in picked[:GUIDANCE_MAX_LINES]]


def guidance_section(lines: Sequence[str]) -> str | None:
    return "\n".join([GUIDANCE_HEADING, *lines]) if lines else None
