"""Result shaping for deliberate recall: tail cut, currentness, evidence notes, rendering (REC-13..REC-47).

Pure functions over ``Hit`` lists from ``recall.search``; nothing here reads the clock or the disk.
``now`` (an aware instant) and ``tz`` (the host's local zone, REC-46) are always parameters.

Structured labels (AMB-27, AMB-57) are read from a hit's ``labels`` string as a JSON array of objects
``{"kind", "scope", "subject"?, "key", "value", "attribution"?}``; any other labels string carries no
structured label (legacy / free-text) and never takes part in conflict detection.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from tempomem.recall.profiles import scored_by
from tempomem.recall.recency import recency_order
from tempomem.recall.search import Hit
from tempomem.storage.limits import CONFLICT_CHECK_DEPTH, DELIBERATE_FLOOR, TAIL_MARGIN

Currentness = Literal["current", "superseded", "ended"]
Evidence = Literal["conflicting", "insufficient"]

EXCLUDED_STATUSES = frozenset({"dropped"})  # REC-14 / AMB-28: terminal records never surface
CONFLICT_PREFIX = "Conflicting values:"
INSUFFICIENT_PREFIX = "Insufficient evidence:"
SOURCE_UNKNOWN = "source conversation unknown"
# Float scores: 0.80 - 0.65 == 0.15000000000000002. A boundary the spec states exactly must behave
# exactly, so comparisons allow this much rounding noise.
SCORE_EPSILON = 1e-9

TRUNCATION_MARK = "…"

_DATE_ONLY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")


def cut_utf8(text: str, max_bytes: int, mark: str = TRUNCATION_MARK) -> tuple[str, bool]:
    """``text`` within ``max_bytes`` UTF-8 bytes, cut on a code-point boundary with ``mark`` appended."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    room = max_bytes - len(mark.encode("utf-8"))
    return raw[:room].decode("utf-8", errors="ignore") + mark, True


class SearchBackend(Protocol):
    """What recall needs from a backend: ``MemoryIndex`` or any store with the same ``search``."""

    def search(self, query: str, *, limit: int = ...) -> list[Hit]: ...


# --------------------------------------------------------------------------------------------------
# Tail cut (REC-34..REC-37)


def tail_cut(
    hits: Sequence[Hit], *, margin: float = TAIL_MARGIN, floor: float = DELIBERATE_FLOOR
) -> list[Hit]:
    """Drop hits more than ``margin`` below the best and, when the best clears ``floor``, hits below it.

    The best hit is always kept and the backend's order is preserved (REC-16, REC-36).
    """
    if not hits:
        return []
    best_index = max(range(len(hits)), key=lambda i: (hits[i].score, -i))
    best = hits[best_index].score
    apply_floor = max(h.floor_score for h in hits) >= floor - SCORE_EPSILON
    kept: list[Hit] = []
    for i, h in enumerate(hits):
        if i == best_index:
            kept.append(h)
            continue
        if best - h.score > margin + SCORE_EPSILON:
            continue
        if apply_floor and h.floor_score < floor - SCORE_EPSILON:
            continue
        kept.append(h)
    return kept


# --------------------------------------------------------------------------------------------------
# Currentness (REC-43..REC-48, AUTO-10)


@dataclass(frozen=True)
class CurrentnessInfo:
    state: Currentness
    ended_on: str | None = None  # the closing value's own date, for ``ended <date>``


def _parse_end(value: str, tz: tzinfo) -> date | datetime | None:
    """A date-only value → ``date``; an ISO instant → aware ``datetime``; anything else → None.

    A naive timestamp is read in the host zone. Unparseable values are never inferred (AUTO-10).
    """
    value = value.strip()
    if _DATE_ONLY_RE.fullmatch(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            return None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        return None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=tz)


def is_closed(value: str | None, *, now: datetime, tz: tzinfo) -> bool:
    """Whether an inclusive end has passed (REC-45): a date stays current through the host's local day,
    an instant until it passes (its own offset is kept)."""
    if not value:
        return False
    end = _parse_end(value, tz)
    if end is None:
        return False
    if isinstance(end, datetime):
        return now > end
    return end < now.astimezone(tz).date()


def currentness(
    hit: Hit,
    *,
    now: datetime,
    tz: tzinfo,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> CurrentnessInfo:
    """``superseded`` for invalidated / superseded records, ``ended`` for a passed ``validTo`` or event
    ``dueAt`` (and a note's ``dueAt`` under ``intentExpiry``, REC-48), else ``current``."""
    if hit.status == "invalidated" or (superseded_ids is not None and hit.id in superseded_ids):
        return CurrentnessInfo("superseded")
    ends: list[str] = []
    if hit.valid_to:
        ends.append(hit.valid_to)
    # Task deadlines keep their meaning (INTENT-27): only events, and reviewed notes under intentExpiry.
    if hit.due and (hit.type == "event" or (intent_expiry and hit.type == "note")):
        ends.append(hit.due)
    for value in ends:
        if is_closed(value, now=now, tz=tz):
            return CurrentnessInfo("ended", value.strip()[:10])
    return CurrentnessInfo("current")


def is_recallable(hit: Hit, superseded_ids: Collection[str] | None = None) -> bool:
    """REC-14 / AMB-28: dropped never; invalidated only when a supersession edge is known (or unknowable)."""
    if hit.status in EXCLUDED_STATUSES:
        return False
    if hit.status == "invalidated" and superseded_ids is not None:
        return hit.id in superseded_ids  # an invalidation without a supersession edge is a forget
    return True


# --------------------------------------------------------------------------------------------------
# Structured labels & conflicts (REC-38, REC-39, AMB-27, AMB-57)


@dataclass(frozen=True)
class StructuredLabel:
    kind: str
    scope: str
    subject: str
    key: str
    value: str
    attribution: str | None = None


def value_text(value: object) -> str:
    """A label value as text, never JSON (GUIDE-13, REC-49): lists joined, objects as ``k: v``."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    return str(value)


def parse_labels(hit: Hit) -> list[StructuredLabel]:
    """The hit's structured labels; malformed or free-text labels strings yield none (AMB-57)."""
    if not hit.labels:
        return []
    try:
        data = json.loads(hit.labels)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    # A label without an explicit subject is about the record's own entities, else the owner.
    default_subject = ",".join(sorted(hit.entities)) if hit.entities else "owner"
    out: list[StructuredLabel] = []
    for item in data:
        if not isinstance(item, dict):
            continue
        key, scope, kind = item.get("key"), item.get("scope"), item.get("kind")
        if not (isinstance(key, str) and isinstance(scope, str) and isinstance(kind, str)):
            continue
        if "value" not in item or item["value"] is None:
            continue
        subject = item.get("subject") if isinstance(item.get("subject"), str) else default_subject
        attribution = item.get("attribution") if isinstance(item.get("attribution"), str) else None
        out.append(StructuredLabel(kind, scope, subject, key, value_text(item["value"]), attribution))
    return out


def same_value(value: str) -> str:
    """Values that differ only in Unicode compatibility form, case or spacing are one value (AMB-27)."""
    return " ".join(unicodedata.normalize("NFKC", value).casefold().split())


@dataclass(frozen=True)
class Conflict:
    subject: str
    key: str
    scope: str
    values: tuple[str, ...]


def find_conflicts(
    hits: Iterable[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> list[Conflict]:
    """Two or more distinct current values for one (subject, key, scope) among ``hits`` (AMB-27)."""
    groups: dict[tuple[str, str, str], dict[str, str]] = {}
    for hit in hits:
        info = currentness(hit, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry)
        if info.state != "current":
            continue
        for label in parse_labels(hit):
            if label.kind != "fact":
                continue  # preferences and lessons may legitimately differ (GUIDE-07)
            values = groups.setdefault((label.subject, label.key, label.scope), {})
            values.setdefault(same_value(label.value), label.value)
    return [
        Conflict(subject, key, scope, tuple(values.values()))
        for (subject, key, scope), values in groups.items()
        if len(values) >= 2
    ]


def display_key(key: str) -> str:
    """GUIDE-13: keys drop the ``other:`` namespace."""
    return key.removeprefix("other:")


def conflict_note(conflicts: Sequence[Conflict]) -> str:
    first = conflicts[0]
    values = " / ".join(first.values)
    more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
    return (
        f"{CONFLICT_PREFIX} the top results hold different current values for "
        f"{display_key(first.key)}: {values}{more}. Weigh them; do not pick one silently."
    )


def answer_floor(hits: Iterable[Hit]) -> float:
    """The answer floor on the scale of the profile that scored ``hits`` (reference: DELIBERATE_FLOOR)."""
    return scored_by(h.profile for h in hits).answer_floor


def insufficient_note(floor: float = DELIBERATE_FLOOR) -> str:
    return (
        f"{INSUFFICIENT_PREFIX} the best match scores below {floor:.3f}; these hits may be unrelated "
        "and are not an answer."
    )


# --------------------------------------------------------------------------------------------------
# Structured results (REC-17, REC-41, REC-47)


class RecallHit(BaseModel):
    """One delivered hit. Optional fields are omitted when the backend does not supply them (REC-17)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    id: str
    score: float
    text: str
    type: str | None = None
    status: str | None = None
    created_at: str | None = Field(default=None, alias="createdAt")
    valid_from: str | None = Field(default=None, alias="validFrom")
    valid_to: str | None = Field(default=None, alias="validTo")
    due_at: str | None = Field(default=None, alias="dueAt")
    currentness: Currentness | None = None
    # Rendering-only facts; never serialised (a known session id is never shown, PROV-17).
    ended_on: str | None = Field(default=None, exclude=True)
    source_unknown: bool = Field(default=False, exclude=True)


@dataclass(frozen=True)
class Shaped:
    hits: list[RecallHit]
    evidence: Evidence | None
    notes: list[str]
    mode: str | None


def to_recall_hit(hit: Hit, info: CurrentnessInfo | None) -> RecallHit:
    return RecallHit(
        id=hit.id,
        score=hit.score,
        text=hit.text,
        type=hit.type or None,
        status=hit.status or None,
        created_at=hit.recorded or None,
        valid_from=hit.valid_from,
        valid_to=hit.valid_to,
        due_at=hit.due,
        currentness=info.state if info else None,
        ended_on=info.ended_on if info else None,
        source_unknown=hit.source_session is None,
    )


def shape_hits(
    hits: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    limit: int,
    original_query: bool = False,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
    floor: float | None = None,
    margin: float = TAIL_MARGIN,
    recency_now: datetime | None = None,
) -> Shaped:
    """Shape the deliberate superset (REC-33) into at most ``limit`` delivered hits.

    ``recency_now`` (BuJo ``recall.recency``) reorders the qualifying delivered hits by recency
    (INTENT-31..36): the same hits with the same scores, only their order changes.
    Hybrid: conflicts on the top ``CONFLICT_CHECK_DEPTH`` before the cut (REC-39), tail cut unless in
    original-query mode (REC-13), then the insufficient-evidence note below the floor (REC-40).
    Lexical-only or mode-less results keep their previous shape: no cut, notes or currentness (REC-42).
    ``floor`` None is the ``answer_floor`` of the profile that scored the hits (``answer_floor``).
    """
    live = [h for h in hits if is_recallable(h, superseded_ids)]
    hybrid = bool(live) and all(h.mode == "hybrid" for h in live)
    mode = live[0].mode if live and len({h.mode for h in live}) == 1 else None
    if not hybrid:
        return Shaped([to_recall_hit(h, None) for h in live[:limit]], None, [], mode)

    conflicts = find_conflicts(
        live[:CONFLICT_CHECK_DEPTH],
        now=now,
        tz=tz,
        superseded_ids=superseded_ids,
        intent_expiry=intent_expiry,
    )
    best = max(h.floor_score for h in live)
    if floor is None:
        floor = answer_floor(live)
    kept = list(live) if original_query else tail_cut(live, margin=margin, floor=floor)
    delivered = [
        to_recall_hit(
            h, currentness(h, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry)
        )
        for h in (
            recency_order(kept[:limit], now=recency_now, floor=floor, margin=margin)
            if recency_now is not None
            else kept[:limit]
        )
    ]

    notes: list[str] = []
    evidence: Evidence | None = None
    if conflicts:
        notes.append(conflict_note(conflicts))
        evidence = "conflicting"
    if best < floor - SCORE_EPSILON:
        notes.append(insufficient_note(floor))
        evidence = evidence or "insufficient"  # a conflict is the more specific warning
    return Shaped(delivered, evidence, notes, mode)


# --------------------------------------------------------------------------------------------------
# Rendering (REC-15, REC-43, AMB-30, PROV-16/17)


def render_hit_line(hit: RecallHit) -> str:
    """``0.800 [recorded 2026-07-06T12:00:00.000Z] [done] Ship the 0.9 release.`` plus validity,
    currentness and unknown-provenance marks in one trailing parenthesis."""
    parts = [f"{hit.score:.3f}"]
    if hit.created_at:
        parts.append(f"[recorded {hit.created_at}]")
    if hit.status and hit.status != "open":
        parts.append(f"[{hit.status}]")
    parts.append(hit.text)
    line = " ".join(parts)
    marks: list[str] = []
    if hit.currentness is not None and (hit.valid_from or hit.valid_to):
        marks.append(f"valid {hit.valid_from or ''}–{hit.valid_to or ''}")
    if hit.currentness == "superseded":
        marks.append("superseded")
    elif hit.currentness == "ended":
        marks.append(f"ended {hit.ended_on}")
    if hit.source_unknown:
        marks.append(SOURCE_UNKNOWN)
    return f"{line} ({'; '.join(marks)})" if marks else line


def render_shaped(shaped: Shaped, section: str | None = None) -> str:
    """Evidence notes, then an optional section (guidance), then one line per hit (AMB-30 order)."""
    return "\n".join(
        [*shaped.notes, *([section] if section else []), *(render_hit_line(h) for h in shaped.hits)]
    )
