"""The semantic commit of a reconciled plan (RPL-06..08, CAP-62..65, INTENT-18, PROV-08).

The decided plan becomes canonical Markdown lines, graph rows, replay-owned sidecar edges and index rows,
in that order, under the store lock, then is verified before the receipt may retire the intent. Every id
is derived from the run id and the plan index, so a crash after any step replays to the same bytes
without another model call. ``commit_step`` is the seam the crash tests kill at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tempomem.capture.plan import (
    INTENT_STATUS,
    Existing,
    PlanLabel,
    PlanMemory,
    RetainedPlan,
    fact_id,
    is_owner_turn,
)
from tempomem.storage import graph, replay_sidecar
from tempomem.storage.fsio import atomic_write, exclusive_lock
from tempomem.storage.intake_records import FailureCategory, IntakePayload
from tempomem.storage.markdown import (
    Bullet,
    append_bullets,
    iter_bullets,
    iter_day_bullets,
    read_document,
    serialize_document,
)
from tempomem.storage.store_ref import STORE_LOCK

if TYPE_CHECKING:
    from tempomem.recall.embedding import EmbeddingProvider


class CaptureFailure(Exception):
    def __init__(self, category: FailureCategory) -> None:
        super().__init__(category.value)
        self.category = category


def commit_step(step: str) -> None:
    """Seam for crash tests: called after each commit boundary (intent, markdown, graph, sidecar, index,
    committed). A SIGKILL here must replay to the same bytes without another model call (RPL-07)."""


def commit_plan(
    root: Path,
    embedder: EmbeddingProvider | None,
    intake_id: str,
    payload: IntakePayload,
    plan: RetainedPlan,
) -> None:
    """RPL-06: Markdown + graph → sidecar → index → verify, under the store lock; the receipt retires it.

    Replays to the same bytes: every id is run-derived and every write idempotent (RPL-07, RPL-08)."""
    from tempomem.recall.index import MemoryIndex

    day = payload.admitted_at[:10]
    memories = {m.index: m for m in plan.memories}
    # INTENT-18: a replacement inherits the target's end unless it states a new one.
    targets = (
        {e.id: e.due for e in current_lines(root)}
        if any(m.intent_state or m.valid_to for m in memories.values())
        else {}
    )
    new: list[Bullet] = []
    updates: dict[str, str] = {}
    invalidate: set[str] = set()
    for d in plan.decisions or ():
        m = memories[d.index]
        if d.action in ("NOOP", "DROP"):
            continue
        if d.action == "UPDATE" and d.target_id:
            updates[d.target_id] = d.text or m.text  # PROV-08: the update records this conversation
            continue
        inherited = targets.get(d.target_id) if d.action == "SUPERSEDE" and d.target_id else None
        new.append(
            _bullet(fact_id(intake_id, d.index), d.text or m.text, m, payload, inherited_due=inherited)
        )
        if d.action == "SUPERSEDE" and d.invalidate:
            invalidate.add(d.invalidate)
    sidecar = plan_edges(intake_id, payload, plan)
    kept = {b.id: memories[_index_of(plan, intake_id, b.id)] for b in new}
    entity_ids = {e for m in kept.values() for e in m.entities}
    entities = [
        graph.EntityRow(
            id=e.id,
            name=e.name,
            type=e.type,  # type: ignore[arg-type]
            memories=tuple(sorted(b for b, m in kept.items() if e.id in m.entities)),
        )
        for e in plan.entities
        if e.id in entity_ids
    ]
    relations = [
        graph.relation(
            r.from_id,
            r.relation,
            r.to_id,
            tuple(sorted(b for b, m in kept.items() if {r.from_id, r.to_id} <= set(m.entities))),
        )
        for r in plan.relations
        if r.from_id in entity_ids and r.to_id in entity_ids
    ]
    with exclusive_lock(root / STORE_LOCK):
        touched: list[tuple[str, Bullet]] = []
        if new:
            append_bullets(root / "daily" / f"{day}.md", day, new)
            touched += [(day, b) for b in new]
        touched += _rewrite(root, updates, invalidate, payload.conversation_id)
        commit_step("markdown")
        if entities or relations:
            graph.apply(root, entities, relations)
        commit_step("graph")
        if sidecar:
            replay_sidecar.apply_delta(root, sidecar)
        commit_step("sidecar")
        index = MemoryIndex(root, embedder)
        if touched:
            index.upsert(touched)
        commit_step("index")
        _verify(root, day, [b.id for b in new], sidecar)


def _index_of(plan: RetainedPlan, intake_id: str, bullet_id: str) -> int:
    return next(d.index for d in plan.decisions or () if fact_id(intake_id, d.index) == bullet_id)


def _bullet(
    bullet_id: str, text: str, m: PlanMemory, payload: IntakePayload, *, inherited_due: str | None = None
) -> Bullet:
    """CAP-62/63: capture never writes an open task; a task becomes a dated history note.

    With ``capture.intentLifecycle`` an owner's intention keeps its state as the note status (INTENT-07)
    and its inclusive end as ``due=`` (INTENT-10); without the flag both fields are absent, so the bytes
    are the no-flag bytes (CFG-29).
    """
    kind = "note" if m.kind == "task" else m.kind
    attr = (
        "owner"
        if m.source == "user" and is_owner_turn(payload)
        else ("document" if m.source == "document" else "assistant")
    )
    labels = (
        json.dumps([lab.model_dump() for lab in m.labels], sort_keys=True, ensure_ascii=False)
        if m.labels
        else None
    )
    return Bullet(
        signifier="o" if kind == "event" else "–",
        text=text,
        id=bullet_id,
        type=kind,
        status=INTENT_STATUS.get(m.intent_state or "", "open"),
        due=m.valid_to or (inherited_due if m.intent_state or m.valid_to else None),
        recorded=payload.admitted_at,
        labels=labels,
        entities=m.entities,
        src=m.source,
        attr=attr,
        source_session=payload.conversation_id,  # PROV-08/10: the host id, never model output
    )


def plan_edges(intake_id: str, payload: IntakePayload, plan: RetainedPlan) -> list[dict]:
    """The exact replay-owned delta a committed plan publishes (RPL-01): supersession and thread edges.

    Derived from the retained plan alone, with run-derived ids, so a replay, or an adoption of an
    attested intent, yields the very same entries.
    """
    edges = []
    for d in plan.decisions or ():
        if d.action in ("NOOP", "DROP", "UPDATE"):
            continue
        new_id = fact_id(intake_id, d.index)
        if d.action == "SUPERSEDE" and d.target_id:
            edges.append(_edge("supersede", d.target_id, new_id, payload, intake_id))
        if d.thread_to:
            edges.append(_edge("thread", new_id, d.thread_to, payload, intake_id, weight=1))
    return edges


def _edge(
    kind: str, from_: str, to: str, payload: IntakePayload, intake_id: str, weight: int | None = None
) -> dict:
    entry = {
        "id": replay_sidecar.entry_id(kind, from_, to),
        "kind": kind,
        "from": from_,
        "to": to,
        "at": payload.admitted_at,
        "authority": {
            "kind": "capture",
            "digest": replay_sidecar.authority_digest("capture", intake_id, from_, to),
        },
    }
    if weight is not None:
        entry["weight"] = weight
    return entry


def current_lines(root: Path) -> list[Existing]:
    """Live, current daily lines: not dropped/invalidated, not superseded in the sidecar (AMB-28)."""
    superseded = replay_sidecar.superseded(root)
    out = []
    for _, b in iter_bullets(root, "daily"):
        if b.status in ("dropped", "invalidated") or b.id in superseded:
            continue
        labels = _labels_of(b)
        out.append(
            Existing(
                status=b.status,
                due=b.due,
                id=b.id,
                text=b.text,
                type=b.type,
                signifier=b.signifier,
                recorded=b.recorded,
                labels=labels,
                attr=b.attr,
                src=b.src,
                entities=b.entities,
            )
        )
    return out


def _labels_of(b: Bullet) -> tuple[PlanLabel, ...]:
    if not b.labels:
        return ()
    try:
        return tuple(PlanLabel.model_validate(x) for x in json.loads(b.labels))
    except (ValueError, TypeError):
        return ()


def _rewrite(
    root: Path, updates: dict[str, str], invalidate: set[str], session: str
) -> list[tuple[str, Bullet]]:
    """Apply in-place UPDATEs and task invalidations to the daily files holding their targets (idempotent)."""
    if not updates and not invalidate:
        return []
    touched: list[tuple[str, Bullet]] = []
    for path in sorted((root / "daily").glob("*.md")):
        doc = read_document(path)
        changed = False
        for i, item in enumerate(doc.items):
            if not isinstance(item, Bullet) or (item.id not in updates and item.id not in invalidate):
                continue
            new = item
            if item.id in updates and item.text != updates[item.id]:
                new = _replace(new, text=updates[item.id], source_session=session)
            if item.id in invalidate and item.status != "invalidated":
                new = _replace(new, status="invalidated")
            if new != item:
                doc.items[i] = new
                changed = True
            touched.append((path.stem, new))
        if changed:
            atomic_write(path, serialize_document(doc).encode("utf-8"))
    return touched


def _replace(b: Bullet, **changes: object) -> Bullet:
    from dataclasses import replace

    return replace(b, **changes)  # type: ignore[arg-type]


def _verify(root: Path, day: str, new_ids: list[str], sidecar: list[dict]) -> None:
    """RPL-06: prove Markdown and sidecar hold the delta before the receipt may retire the intent.

    New lines are appended to the admission day's file only, so only that file is read (reading every
    daily note made each commit cost as much as the whole store). It is read from the disk; the parse is
    kept, so the next turn's reconciliation reads the live lines without parsing it again."""
    if new_ids:
        present = {b.id for b in iter_day_bullets(root, day)}
        if not set(new_ids) <= present:
            raise CaptureFailure(FailureCategory.STORAGE_ERROR)
    entries = replay_sidecar.load(root).by_id()
    if any(entries.get(e["id"]) is None for e in sidecar):
        raise CaptureFailure(FailureCategory.STORAGE_ERROR)
