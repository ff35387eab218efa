"""Extraction, review and reconciliation + commit: BuJo capture as three activities (CAP-*, RPL-06..08).

Each stage reads the record from disk and persists its result into the retained plan beside the record,
returning only counts and a digest. A retry resumes at the first unfinished stage, so a turn costs at
most three model calls in total (CAP-05) and a crash after any commit step replays to the same bytes
without another call (RPL-07, RPL-08). Model failures and invalid output are one failed durable attempt
(CAP-20); there are no hidden retries here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities import prompts
from tempomem.activities.context import CaptureSettings, StoreContext, utc_now
from tempomem.activities.contracts import (
    ContractViolation,
    is_exact_duplicate,
    parse_extraction,
    parse_reconcile,
    parse_review,
)
from tempomem.activities.heartbeat import heartbeating, run_blocking
from tempomem.activities.intake_ops import wake_turn
from tempomem.activities.llm import ChatModel, LlmError, ModelNotConfigured, chat_model_for
from tempomem.activities.plan import (
    INTENT_STATUS,
    Existing,
    PlanDecision,
    PlanLabel,
    PlanMemory,
    RetainedPlan,
    apply_review,
    build_plan,
    fact_id,
    guard_decision,
    passes_only,
    review_lines,
)
from tempomem.storage import graph, replay_sidecar
from tempomem.storage.fsio import atomic_write, exclusive_lock
from tempomem.storage.intake import FailureCategory, IntakeError, IntakePayload, parse_instant
from tempomem.storage.limits import SAME_ENTITY_LINES, SEMANTIC_EVIDENCE_COSINE
from tempomem.storage.markdown import Bullet, append_bullets, iter_bullets, read_document, serialize_document
from tempomem.storage.store_ref import STORE_LOCK
from tempomem.workflows.common import EXTRACT, RECONCILE, REVIEW, CurationInput, StageResult

log = logging.getLogger("tempomem.capture")
CLOSE_CANDIDATES = 8  # AMB-17


class CaptureFailure(Exception):
    def __init__(self, category: FailureCategory) -> None:
        super().__init__(category.value)
        self.category = category


def _failure(exc: BaseException) -> ApplicationError:
    """Content-free: a bounded category and the exception type; never model output or memory text."""
    if isinstance(exc, LlmError):
        category = exc.category
    elif isinstance(exc, ModelNotConfigured):  # a model setting nothing can serve (also refused at start)
        category = FailureCategory.LLM_ERROR.value
    elif isinstance(exc, ContractViolation):
        category = FailureCategory.INVALID_OUTPUT.value
    elif isinstance(exc, CaptureFailure):
        category = exc.category.value
    else:
        category = FailureCategory.UNKNOWN.value
    log.warning("capture stage failed: %s (%s)", category, type(exc).__name__)
    return ApplicationError(type(exc).__name__, type=category, non_retryable=True)


class CurationActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    # -- shared ---------------------------------------------------------------------------------------
    @property
    def settings(self) -> CaptureSettings:
        if self.ctx.capture is None:
            raise CaptureFailure(FailureCategory.LLM_ERROR)  # capture without memory.llm: refused at config
        return self.ctx.capture

    def _model(self, *, classifier: bool = False, override: str | None = None) -> ChatModel:
        """The configured chat model; ``override`` (a re-curation record's model name, issue #6) replaces
        ``memory.llm.model`` on the same provider and endpoint. A separate classifier reference stays."""
        return chat_model_for(self.settings, classifier=classifier, override=override)

    def _load(self, inp: CurationInput) -> tuple[IntakePayload, RetainedPlan | None]:
        self.ctx.check(inp.store_id)
        payload = self.ctx.intake.load_payload(inp.intake_id)
        data = self.ctx.intake.load_plan(inp.intake_id)
        return payload, (RetainedPlan.from_bytes(data) if data is not None else None)

    def _save(self, inp: CurationInput, plan: RetainedPlan) -> None:
        self.ctx.intake.save_plan(inp.intake_id, plan.to_bytes(), now=utc_now())

    async def _complete(
        self, messages: list, *, classifier: bool = False, override: str | None = None
    ) -> str:
        model = self._model(classifier=classifier, override=override)
        slots = self.ctx.model_slots
        if slots is None:
            return await heartbeating(model.complete(messages, timeout_s=self.settings.timeout_ms / 1000))
        # The process-wide cap on model calls across stores (run_worker model_slots); waiting heartbeats.
        await heartbeating(slots.acquire())
        try:
            return await heartbeating(model.complete(messages, timeout_s=self.settings.timeout_ms / 1000))
        finally:
            slots.release()

    # -- extraction (CAP-02) --------------------------------------------------------------------------
    @activity.defn(name=EXTRACT)
    async def extract(self, inp: CurationInput) -> StageResult:
        try:
            payload, plan = self._load(inp)
            if plan is not None:  # CAP-75: the retained plan is reused, never re-extracted
                settled = _reviewed_if_nothing_eligible(plan, payload)
                if settled is not plan:
                    self._save(inp, settled)
                return StageResult(
                    0, len(settled.live()), settled.digest(), review_needed=not settled.reviewed
                )
            s = self.settings
            messages = prompts.extraction_messages(
                admitted_at=parse_instant(payload.admitted_at),
                assistant_text=payload.capture_answer or "",
                user_text=payload.capture_user_text,
                trigger_kind=payload.trigger_kind,  # type: ignore[arg-type]
                focus=s.focus,
                intent_lifecycle=s.intent_lifecycle,
            )
            raw = await self._complete(messages, override=payload.model_override)
            extracted = parse_extraction(raw, intent_lifecycle=s.intent_lifecycle)
            plan = build_plan(
                extracted,
                speaker_kind=payload.speaker_kind,
                trigger_kind=payload.trigger_kind,
                has_user_text=bool(payload.capture_user_text),
            )
            plan = _reviewed_if_nothing_eligible(plan, payload)  # in the same save
            self._save(inp, plan)
        except (LlmError, ContractViolation, CaptureFailure, IntakeError) as exc:
            raise _failure(exc) from None
        return StageResult(1, len(plan.live()), plan.digest(), review_needed=not plan.reviewed)

    # -- review (CAP-40..CAP-48) ------------------------------------------------------------------------
    @activity.defn(name=REVIEW)
    async def review(self, inp: CurationInput) -> StageResult:
        try:
            payload, plan = self._load(inp)
            if plan is None:
                raise CaptureFailure(FailureCategory.STORAGE_ERROR)
            if plan.reviewed:  # CAP-47: decisions are retained; a retry never reviews again
                return StageResult(0, len(plan.live()), plan.digest())
            lines = review_lines(plan, owner_turn=_owner_turn(payload))
            if not lines:  # CAP-06, CAP-41: nothing eligible, no call
                plan = plan.model_copy(update={"reviewed": True})
                self._save(inp, plan)
                return StageResult(0, len(plan.live()), plan.digest())
            try:
                raw = await self._complete(
                    prompts.review_messages(lines=lines), override=payload.model_override
                )
                decisions = parse_review(raw, lines=lines)
            except (LlmError, ContractViolation):
                if not inp.final_attempt:
                    raise
                # CAP-48: on the final attempt an uncertain or failed review means keep.
                plan = plan.model_copy(update={"reviewed": True, "review_calls": 1})
                self._save(inp, plan)
                return StageResult(1, len(plan.live()), plan.digest())
            plan = apply_review(plan, decisions)
            self._save(inp, plan)
        except (LlmError, ContractViolation, CaptureFailure, IntakeError) as exc:
            raise _failure(exc) from None
        return StageResult(1, len(plan.live()), plan.digest())

    # -- reconciliation + commit (CAP-49..CAP-72, RPL-06) -------------------------------------------------
    @activity.defn(name=RECONCILE)
    async def reconcile(self, inp: CurationInput) -> StageResult:
        try:
            payload, plan = self._load(inp)
            if plan is None:
                raise CaptureFailure(FailureCategory.STORAGE_ERROR)
            calls = 0
            if plan.decisions is None and inp.ordered:
                # Commits follow admission order (issue #15 item 1): an earlier turn still in flight
                # reconciles first, so this one sees what it committed. Nothing decided, nothing written.
                order = self.ctx.commit_order
                ahead = await run_blocking(lambda: order.blocking(inp.intake_id, now=utc_now()))
                if ahead is not None:
                    return StageResult(0, 0, plan.digest(), deferred=True)
            if plan.decisions is None:
                decisions, calls = await self._decide(payload, plan, final_attempt=inp.final_attempt)
                # The durable capture intent: decisions + run-derived ids, before any canonical write.
                plan = plan.model_copy(update={"decisions": tuple(decisions), "reconcile_calls": calls})
                self._save(inp, plan)
                commit_step("intent")
            if not plan.committed:
                committing = plan
                await run_blocking(lambda: self._commit(inp.intake_id, payload, committing))
                plan = plan.model_copy(update={"committed": True})
                self._save(inp, plan)
                commit_step("committed")
                # Out of flight now: the next turn waiting to commit may go (it sees this commit).
                order = self.ctx.commit_order
                waiting = await run_blocking(lambda: order.next_waiting(inp.intake_id, now=utc_now()))
                if waiting is not None:
                    await wake_turn(self.ctx, waiting)
        except (LlmError, ContractViolation, CaptureFailure, IntakeError) as exc:
            raise _failure(exc) from None
        adds = sum(1 for d in plan.decisions or () if d.action in ("ADD", "SUPERSEDE"))
        return StageResult(calls, adds, plan.digest())

    async def _decide(
        self, payload: IntakePayload, plan: RetainedPlan, *, final_attempt: bool
    ) -> tuple[list[PlanDecision], int]:
        root = self.ctx.root
        existing = await run_blocking(lambda: current_lines(root))
        by_id = {e.id: e for e in existing}
        owner_turn = _owner_turn(payload)
        decisions: dict[int, PlanDecision] = {}
        to_classify: list[tuple[PlanMemory, tuple[str, ...]]] = []
        for m in plan.live():
            dup = next((e for e in existing if is_exact_duplicate(m.text, e.text)), None)
            if dup is not None:  # CAP-30, CAP-56: structural duplicate, no call
                decisions[m.index] = PlanDecision(
                    index=m.index, action="NOOP", target_id=dup.id, via="structural"
                )
                continue
            close = await run_blocking(lambda m=m: self._close_lines(m, existing))
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
                raw = await self._complete(prompt.messages, classifier=True, override=payload.model_override)
                parsed = parse_reconcile(raw, candidate_count=len(to_classify), target_ids=prompt.target_ids)
                for (m, _), decision in zip(to_classify, parsed, strict=True):
                    target = by_id.get(decision.target_id) if decision.target_id else None
                    decisions[m.index] = guard_decision(decision, m, target, owner_turn=owner_turn)
            except (LlmError, ContractViolation):
                if not final_attempt:
                    raise
                # CAP-57 / AMB-43: the final attempt adds non-duplicates rather than dropping them.
                for m, _ in to_classify:
                    decisions[m.index] = PlanDecision(index=m.index, action="ADD", via="final_attempt")
        only = self.settings.only
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

    def _close_lines(self, m: PlanMemory, existing: list[Existing]) -> tuple[str, ...]:
        """AMB-17: up to 8 live lines with stored-vector cosine ≥ 0.5, plus up to 3 same-entity lines."""
        from tempomem.recall.index import MemoryIndex

        live_ids = {e.id for e in existing}
        close: list[str] = []
        if existing and self.ctx.embedder is not None:
            hits = MemoryIndex(self.ctx.root, self.ctx.embedder).search(m.text, limit=CLOSE_CANDIDATES)
            close = [h.id for h in hits if h.id in live_ids and (h.cosine or 0.0) >= SEMANTIC_EVIDENCE_COSINE]
        same_entity = [e for e in existing if e.id not in close and set(m.entities) & set(e.entities)]
        same_entity.sort(key=lambda e: (e.recorded, e.id), reverse=True)  # CAP-51: the newest first
        return tuple(close + [e.id for e in same_entity[:SAME_ENTITY_LINES]])

    # -- commit (RPL-06): Markdown + graph → sidecar → index → verify; the receipt retires it -----------
    def _commit(self, intake_id: str, payload: IntakePayload, plan: RetainedPlan) -> None:
        from tempomem.recall.index import MemoryIndex

        root = self.ctx.root
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
            index = MemoryIndex(root, self.ctx.embedder)
            if touched:
                index.upsert(touched)
            commit_step("index")
            _verify(root, day, [b.id for b in new], sidecar)


def commit_step(step: str) -> None:
    """Seam for crash tests: called after each commit boundary (intent, markdown, graph, sidecar, index,
    committed). A SIGKILL here must replay to the same bytes without another model call (RPL-07)."""


def _reviewed_if_nothing_eligible(plan: RetainedPlan, payload: IntakePayload) -> RetainedPlan:
    """CAP-06 / CAP-41: a plan with no line eligible for review is marked reviewed, as the review stage
    would mark it; the same plan object when it is reviewed already or something is eligible."""
    if plan.reviewed or review_lines(plan, owner_turn=_owner_turn(payload)):
        return plan
    return plan.model_copy(update={"reviewed": True})


def _owner_turn(payload: IntakePayload) -> bool:
    return payload.speaker_kind == "human-turn" and payload.trigger_kind == "none"


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
        if m.source == "user" and _owner_turn(payload)
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
    daily note made each commit cost as much as the whole store)."""
    if new_ids:
        try:
            present = read_document(root / "daily" / f"{day}.md").ids()
        except FileNotFoundError:
            present = set()
        if not set(new_ids) <= present:
            raise CaptureFailure(FailureCategory.STORAGE_ERROR)
    entries = replay_sidecar.load(root).by_id()
    if any(entries.get(e["id"]) is None for e in sidecar):
        raise CaptureFailure(FailureCategory.STORAGE_ERROR)
