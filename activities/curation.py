"""Extraction, review and reconciliation + commit: BuJo capture as three activities (CAP-*, RPL-06..08).

Each stage reads the record from disk and persists its result into the retained plan beside the record,
returning only counts and a digest. A retry resumes at the first unfinished stage, so a turn costs at
most three model calls in total (CAP-05) and a crash after any commit step replays to the same bytes
without another call (RPL-07, RPL-08). Model failures and invalid output are one failed durable attempt
(CAP-20); there are no hidden retries here.
"""

from __future__ import annotations

import dataclasses
import logging

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext, utc_now
from tempomem.activities.heartbeat import heartbeating, run_blocking
from tempomem.activities.intake_ops import wake_turn
from tempomem.capture import commit, prompts, reconcile
from tempomem.capture.commit import CaptureFailure
from tempomem.capture.contracts import ContractViolation, parse_extraction, parse_review
from tempomem.capture.model_client import ChatModel, LlmError, ModelNotConfigured, chat_model_for
from tempomem.capture.plan import (
    RetainedPlan,
    apply_review,
    build_plan,
    is_owner_turn,
    review_lines,
    reviewed_if_nothing_eligible,
)
from tempomem.capture.settings import CaptureSettings
from tempomem.messages.capture import EXTRACT, RECONCILE, REVIEW, CurationInput, StageResult
from tempomem.recall.embedding_types import embed_ahead, remembered
from tempomem.storage.instants import parse_instant
from tempomem.storage.intake_records import FailureCategory, IntakeError, IntakePayload

log = logging.getLogger("tempomem.capture")


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
        if data is None:
            return payload, None
        try:
            return payload, RetainedPlan.from_bytes(data)
        except ValidationError:  # a damaged or hand-edited plan: a content-free storage failure
            raise CaptureFailure(FailureCategory.STORAGE_ERROR) from None

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

    async def _embed_ahead(self, plan: RetainedPlan, payload: IntakePayload) -> None:
        """The memories this turn will reconcile, embedded now, in parallel with other turns: the
        reconciliation on the store's serial queue then takes their vectors instead of embedding.
        Not for a re-curation: its lines mostly exist already, and an exact duplicate is never embedded
        (the vectors would only take CPU from the turns that need it)."""
        texts = [m.text for m in plan.live()]
        embedder = self.ctx.embedder
        if embedder is not None and texts and payload.recurate_of is None:
            await run_blocking(lambda: embed_ahead(embedder, texts))

    async def _order_told(self, inp: CurationInput, result: StageResult) -> StageResult:
        """With ``ask_order``, at the last model stage: whether an earlier-admitted turn is in flight now.
        The workflow then waits for its turn before dispatching reconciliation, which checks the order
        again (issue #15 item 1)."""
        if not inp.ask_order:
            return result
        order = self.ctx.commit_order
        ahead = await run_blocking(lambda: order.blocking(inp.intake_id, now=utc_now()))
        return dataclasses.replace(result, turn_ahead=ahead is not None)

    # -- extraction (CAP-02) --------------------------------------------------------------------------
    @activity.defn(name=EXTRACT)
    async def extract(self, inp: CurationInput) -> StageResult:
        result = await self._extract(inp)
        # A review follows: it is the last model stage, and it tells the order (asked here, it was unread).
        return result if result.review_needed else await self._order_told(inp, result)

    async def _extract(self, inp: CurationInput) -> StageResult:
        try:
            payload, plan = self._load(inp)
            if plan is not None:  # CAP-75: the retained plan is reused, never re-extracted
                settled = reviewed_if_nothing_eligible(plan, payload)
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
            plan = reviewed_if_nothing_eligible(plan, payload)  # in the same save
            self._save(inp, plan)
            if plan.reviewed:
                await self._embed_ahead(plan, payload)
        except (LlmError, ContractViolation, CaptureFailure, IntakeError) as exc:
            raise _failure(exc) from None
        return StageResult(1, len(plan.live()), plan.digest(), review_needed=not plan.reviewed)

    # -- review (CAP-40..CAP-48) ------------------------------------------------------------------------
    @activity.defn(name=REVIEW)
    async def review(self, inp: CurationInput) -> StageResult:
        return await self._order_told(inp, await self._review(inp))

    async def _review(self, inp: CurationInput) -> StageResult:
        try:
            payload, plan = self._load(inp)
            if plan is None:
                raise CaptureFailure(FailureCategory.STORAGE_ERROR)
            if plan.reviewed:  # CAP-47: decisions are retained; a retry never reviews again
                return StageResult(0, len(plan.live()), plan.digest())
            lines = review_lines(plan, owner_turn=is_owner_turn(payload))
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
            await self._embed_ahead(plan, payload)
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
            # The search embeds each new memory's text; the commit's index upsert reuses that vector.
            embedder = remembered(self.ctx.embedder)
            if plan.decisions is None:
                decisions, calls = await reconcile.decide(
                    self.ctx.root,
                    embedder,
                    payload,
                    plan,
                    only=self.settings.only,
                    classify=lambda messages: self._complete(
                        messages, classifier=True, override=payload.model_override
                    ),
                    offload=run_blocking,
                    final_attempt=inp.final_attempt,
                )
                # The durable capture intent: decisions + run-derived ids, before any canonical write.
                plan = plan.model_copy(update={"decisions": tuple(decisions), "reconcile_calls": calls})
                self._save(inp, plan)
                commit.commit_step("intent")
            if not plan.committed:
                committing = plan
                root = self.ctx.root
                await run_blocking(
                    lambda: commit.commit_plan(root, embedder, inp.intake_id, payload, committing)
                )
                plan = plan.model_copy(update={"committed": True})
                self._save(inp, plan)
                commit.commit_step("committed")
                # Out of flight now: the next turn waiting to commit may go (it sees this commit).
                order = self.ctx.commit_order
                waiting = await run_blocking(lambda: order.next_waiting(inp.intake_id, now=utc_now()))
                if waiting is not None:
                    await wake_turn(self.ctx, waiting)
        except (LlmError, ContractViolation, CaptureFailure, IntakeError) as exc:
            raise _failure(exc) from None
        adds = sum(1 for d in plan.decisions or () if d.action in ("ADD", "SUPERSEDE"))
        return StageResult(calls, adds, plan.digest())
