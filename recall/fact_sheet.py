"""The explicit MemoryRecall fact sheet (REC-49, GUIDE-05, GUIDE-13, REC-38, INTENT-19, AMB-27, AMB-30).

For each graph entity the query names (``<type>:<id>`` or its exact display name, AMB-56), the fact labels
about it, grouped by key: keys drop the ``other:`` namespace and values render as text, never JSON
(REC-49). Two or more current distinct values for one key are a conflict: both are shown and the result
carries the ``Conflicting values:`` note (REC-38). A row's currentness combines the label's own ``validTo``
with its source line's currentness (supersession, validity, event ends, ``intentExpiry``); rows that are no
longer current stay on the sheet as history, marked (INTENT-19). Dropped lines and forgotten ones never
appear (REC-14). The sheet is deterministic, bounded, and shows no memory ids, entity ids or conversation
provenance (PROV-19). Only BuJo keeps a graph, so Lite and Journal results are unchanged.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, tzinfo

from tempomem.recall.graph_read import GraphReader, bullet_hit
from tempomem.recall.person_card import entity_fact_labels, label_attribution, match_entities
from tempomem.recall.search import Hit
from tempomem.recall.shaping import (
    CONFLICT_PREFIX,
    Conflict,
    currentness,
    cut_utf8,
    display_key,
    is_closed,
    is_recallable,
    value_text,
)
from tempomem.storage.graph import EntityRow
from tempomem.storage.limits import AUTO_LINE_MAX_BYTES

FACT_SHEET_HEADING = "Fact sheet:"
MAX_ENTITIES = 4  # entities named in one query that get a sheet
MAX_ROWS = 24  # rows over all entities; a row that does not fit is left out, never truncated
ATTRIBUTIONS = {"owner": "you said", "document": "from a document", "assistant": "assistant noted"}


@dataclass(frozen=True)
class SheetRow:
    key: str  # display key
    value: str  # text
    scope: str
    recorded: str  # YYYY-MM-DD
    attribution: str | None
    state: str  # "current" | "superseded" | "ended"
    ended_on: str | None = None


@dataclass(frozen=True)
class FactSheet:
    text: str  # "" when the query names no entity with facts
    conflicts: tuple[Conflict, ...] = ()


NO_SHEET = FactSheet("")


def _rows_of(
    hit: Hit, entity: EntityRow, *, now: datetime, tz: tzinfo, state: str, ended: str | None
) -> list[SheetRow]:
    rows: list[SheetRow] = []
    for label in entity_fact_labels(hit, entity):
        text = value_text(label["value"])
        if not text:
            continue
        row_state, row_ended = state, ended
        label_end = label.get("validTo")
        if row_state == "current" and isinstance(label_end, str) and is_closed(label_end, now=now, tz=tz):
            row_state, row_ended = "ended", label_end.strip()[:10]  # the label's own validity (INTENT-19)
        scope = label.get("scope") if isinstance(label.get("scope"), str) else ""
        who = ATTRIBUTIONS.get(label_attribution(label, hit) or "")
        recorded = hit.recorded[:10] or hit.day
        rows.append(SheetRow(display_key(label["key"]), text, scope, recorded, who, row_state, row_ended))
    return rows


def _render(row: SheetRow, conflicting: bool) -> str:
    text, _ = cut_utf8(row.value, AUTO_LINE_MAX_BYTES)
    marks = [m for m in (row.attribution, f"recorded {row.recorded}") if m]
    if row.state == "superseded":
        marks.append("superseded")
    elif row.state == "ended":
        marks.append(f"ended {row.ended_on}")
    elif conflicting:
        marks.append("conflicting")
    return f"- {row.key}: {text} ({', '.join(marks)})"


def sheet_conflict_note(conflicts: tuple[Conflict, ...]) -> str:
    first = conflicts[0]
    more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
    return (
        f"{CONFLICT_PREFIX} the fact sheet holds different current values for {first.key}: "
        f"{' / '.join(first.values)}{more}. Weigh them; do not pick one silently."
    )


def _same(value: str) -> str:
    return " ".join(value.casefold().split())


def fact_sheet(
    query: str,
    reader: GraphReader,
    *,
    now: datetime,
    tz: tzinfo,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> FactSheet:
    """The sheet for the entities ``query`` names; ``NO_SHEET`` when none has a fact label."""
    if not query.strip():
        return NO_SHEET
    entities = reader.graph().entities  # a missing or damaged graph reads as empty
    lines_by_id = reader.lines()
    blocks: list[str] = []
    conflicts: list[Conflict] = []
    budget = MAX_ROWS
    for entity in match_entities(query, entities)[:MAX_ENTITIES]:
        about = (m for m in sorted(lines_by_id) if entity.id in lines_by_id[m][1].entities)
        ids = list(dict.fromkeys([*entity.memories, *about]))
        rows: list[SheetRow] = []
        for mid in ids:
            if mid not in lines_by_id:
                continue
            hit = bullet_hit(*lines_by_id[mid], score=0.0)
            if not is_recallable(hit, superseded_ids):
                continue  # dropped, or forgotten without a supersession edge (REC-14, AMB-28)
            info = currentness(
                hit, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry
            )
            rows += _rows_of(hit, entity, now=now, tz=tz, state=info.state, ended=info.ended_on)
        if not rows:
            continue
        by_key: dict[tuple[str, str], list[SheetRow]] = {}
        for row in rows:
            by_key.setdefault((row.key, row.scope), []).append(row)
        lines: list[str] = []
        for key, scope in sorted(by_key, key=lambda k: (k[0].casefold(), k[0], k[1])):
            group = by_key[(key, scope)]
            current: dict[str, SheetRow] = {}
            for row in sorted(group, key=lambda r: r.recorded, reverse=True):
                if row.state == "current":
                    current.setdefault(_same(row.value), row)  # a repeated value keeps its latest recording
            history = sorted(
                (r for r in group if r.state != "current"), key=lambda r: r.recorded, reverse=True
            )
            if len(current) >= 2:
                conflicts.append(Conflict(entity.id, key, scope, tuple(r.value for r in current.values())))
            lines += [_render(r, len(current) >= 2) for r in current.values()]
            lines += [_render(r, False) for r in history]
        lines = lines[:budget]
        budget -= len(lines)
        if lines:
            blocks += [f"{' '.join(entity.name.split())}:", *lines]
        if budget <= 0:
            break
    if not blocks:
        return NO_SHEET
    return FactSheet("\n".join([FACT_SHEET_HEADING, *blocks]), tuple(conflicts))
