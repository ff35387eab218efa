"""Reconciliation: each kept memory against the store's live lines (CAP-49..CAP-61, CAP-70, AMB-17).

Exact duplicates and clearly novel memories are decided without a model call; the rest go to the
classifier in one call, and the host guards have the last word on what it proposes. The model call and
the blocking reads come in as callables, so this module knows no Temporal (the activity layer passes
its heartbeating versions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tempomem.capture import prompts
from tempomem.capture.commit import current_lines
from tempomem.capture.contracts import ContractViolation, is_exact_duplicate, parse_reconcile
from tempomem.capture.model_client import ChatMessage, LlmError
from tempomem.capture.plan import (
    Existing,
    PlanDecision,
    PlanMemory,
    RetainedPlan,
    guard_decision,
    is_owner_turn,
    passes_only,
)
from tempomem.storage.instants import parse_instant
from tempomem.storage.intake_records import IntakePayload
from tempomem.storage.limits import SAME_ENTITY_LINES, SEMANTIC_EVIDENCE_COSINE

if TYPE_CHECKING:
    from tempomem.recall.embedding import EmbeddingProvider

T = TypeVar("T")
CLOSE_CANDIDATES = 8  # AMB-17
Classify = Callable[[list[ChatMessage]], Awaitable[str]]
Offload = Callable[[Callable[[], T]], Awaitable[T]]


async def decide(
    root: Path,
    embedder: EmbeddingProvider | None,
    payload: IntakePayload,
    plan: RetainedPlan,
    *,
    only: Sequence[str] | None,
    classify: Classify,
    offload: Offload,
    final_attempt: bool,
) -> tuple[list[PlanDecision], int]:
    """One decision per live memory of ``plan`` and the number of model calls made (0 or 1).

    ``classify`` sends the reconciliation prompt to the classifier model; ``offload`` runs blocking
    store reads (the live lines, the vector search) off the event loop."""
    existing = await offload(lambda: current_lines(root))
    by_id = {e.id: e for e in existing}
    owner = is_owner_turn(payload)
    decisions: dict[int, PlanDecision] = {}
    to_classify: list[tuple[PlanMemory, tuple[str, ...]]] = []
    for m in plan.live():
        dup = next((e for e in existing if is_exact_duplicate(m.text, e.text)), None)
        if dup is not None:  # CAP-30, CAP-56: structural duplicate, no call
            decisions[m.index] = PlanDecision(
                index=m.index, action="NOOP", target_id=dup.id, via="structural"
            )
            continue
        close = await offload(lambda m=m: close_lines(root, embedder, m, existing))
        if not close:  # CAP-07, AMB-17: clearly novel, no call
            decisions[m.index] = PlanDecision(index=m.index, action="ADD", via="novel")
            continue
        to_classify.append((m, close))
    calls = 0
    if to_classify:
        calls = 1
        try:
            prompt = prompts.reconcile_messages(
                candidates=[
                    prompts.ReconcileCandidate(text=m.text, source=m.source, kind=m.kind, close=close)
                    for m, close in to_classify
                ],
                existing=[
                    prompts.ExistingMemory(
                        id=e.id, text=e.text, recorded=e.recorded[:10], kind=e.type, source=e.src
                    )
                    for e in existing
                    if any(e.id in close for _, close in to_classify)
                ],
                admitted_at=parse_instant(payload.admitted_at),
            )
            raw = await classify(prompt.messages)
            parsed = parse_reconcile(raw, candidate_count=len(to_classify), target_ids=prompt.target_ids)
            for (m, _), decision in zip(to_classify, parsed, strict=True):
                target = by_id.get(decision.target_id) if decision.target_id else None
                decisions[m.index] = guard_decision(decision, m, target, owner_turn=owner)
        except (LlmError, ContractViolation):
            if not final_attempt:
                raise
            # CAP-57 / AMB-43: the final attempt adds non-duplicates rather than dropping them.
            for m, _ in to_classify:
                decisions[m.index] = PlanDecision(index=m.index, action="ADD", via="final_attempt")
    out: list[PlanDecision] = []
    for m in plan.live():
        d = decisions[m.index]
        if d.action in ("ADD", "UPDATE", "SUPERSEDE") and not passes_only(m, only):
            d = PlanDecision(index=m.index, action="DROP", via="only")  # CAP-70, after reconciliation
        if d.action == "UPDATE" and d.target_id and payload.recurate_of is not None:
            # Re-curation never rewrites in place: the old line stays as history (issue #6 item 2).
            d = d.model_copy(update={"action": "SUPERSEDE", "via": "guard"})
        out.append(d)
    return out, calls


def close_lines(
    root: Path, embedder: EmbeddingProvider | None, m: PlanMemory, existing: list[Existing]
) -> tuple[str, ...]:
    """AMB-17: up to 8 live lines with stored-vector cosine ≥ 0.5, plus up to 3 same-entity lines."""
    from tempomem.recall.index import MemoryIndex

    live_ids = {e.id for e in existing}
    close: list[str] = []
    if existing and embedder is not None:
        hits = MemoryIndex(root, embedder).search(m.text, limit=CLOSE_CANDIDATES)
        close = [h.id for h in hits if h.id in live_ids and (h.cosine or 0.0) >= SEMANTIC_EVIDENCE_COSINE]
    same_entity = [e for e in existing if e.id not in close and set(m.entities) & set(e.entities)]
    same_entity.sort(key=lambda e: (e.recorded, e.id), reverse=True)  # CAP-51: the newest first
    return tuple(close + [e.id for e in same_entity[:SAME_ENTITY_LINES]])
