"""CaptureWorkflow: one per admitted run id; owns the 16-attempt retry budget (INTAKE-13, AMB-10).

Deterministic: no clock, filesystem, randomness or network here. Activities read the record from disk
and return counts; attempts and due times are persisted in the record before each try.
"""

from __future__ import annotations

import builtins
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from tempomem.messages import search_attributes as sa
    from tempomem.messages.capture import (
        BEGIN_ATTEMPT,
        COMMIT_TURN_SIGNAL,
        DEAD_LETTER,
        EXTRACT,
        PROJECT,
        RECONCILE,
        RECORD_FAILURE,
        RESOLVE,
        REVIEW,
        SETTLE,
        AttemptInfo,
        CaptureInput,
        CaptureOutcome,
        CaptureStatus,
        CurationInput,
        FailureInput,
        ProjectionResult,
        RecordRef,
        SettleInput,
        StageResult,
    )
    from tempomem.storage import limits
    from tempomem.storage.limits import RETRY_MAX_ATTEMPTS, retry_delay_seconds

# Activities never retry on their own: every failure is one durable attempt of the record's budget.
_NO_RETRY = RetryPolicy(maximum_attempts=1)
_SHORT = timedelta(seconds=30)
_STAGE = timedelta(minutes=10)
_HEARTBEAT = timedelta(seconds=10)
_MODEL_QUEUE_WAIT = timedelta(minutes=30)
SKIP_EMPTY_REVIEW = "skip-empty-review-v1"
SETTLE_IN_ONE_STEP = "settle-in-one-step-v1"
# Issue #15 item 1: a capture-mode turn keeps only reconciliation on the store's serial queue. Its
# observation is projected in capture.settle, its record resolved in a local activity, and a turn that
# the model stages saw waiting behind an earlier one waits for its signal before asking to reconcile.
LEAN_STEPS = "capture-lean-steps-v1"


class _SettleFailed(Exception):
    """capture.settle reported a failed projection or resolve (its category, never a message)."""

    def __init__(self, category: str) -> None:
        super().__init__(category)
        self.category = category


def failure_category(err: ActivityError) -> str:
    """Map an activity failure to the bounded AMB-29 vocabulary; messages never leave the activity."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type
    if isinstance(cause, TimeoutError):
        return "unknown"
    return "unknown"


@workflow.defn(name="CaptureWorkflow")
class CaptureWorkflow:
    def __init__(self) -> None:
        self._intake_id = ""
        self._state = "starting"
        self._attempt = 0
        self._stage = "begin"
        self._last_failure: str | None = None
        self._publish_attributes = False
        self._turn_signalled = False

    def _publish(self) -> None:
        """Mirror attempt and state into search attributes (content-free) so the UI can filter on them."""
        if self._publish_attributes:
            workflow.upsert_search_attributes(
                [sa.STATE.value_set(self._state), sa.ATTEMPT.value_set(self._attempt)]
            )

    @workflow.query(name="status")
    def status(self) -> CaptureStatus:
        return CaptureStatus(self._intake_id, self._state, self._attempt, self._stage, self._last_failure)

    @workflow.signal(name=COMMIT_TURN_SIGNAL)
    def commit_turn(self) -> None:
        """The turn ahead of this one left flight: look again whether it is this one's turn to commit."""
        self._turn_signalled = True

    @workflow.run
    async def run(self, inp: CaptureInput) -> CaptureOutcome:
        self._intake_id = inp.intake_id
        # Versioned change: histories recorded before search attributes replay without the upserts.
        self._publish_attributes = inp.search_attributes and workflow.patched("search-attributes-v1")
        ref = RecordRef(inp.intake_id, inp.store_id)
        while True:
            info = await self._begin(inp, ref)
            self._attempt = info.attempt
            if not info.pending:
                self._state = "not_pending"
                self._publish()
                return CaptureOutcome(inp.intake_id, "not_pending", info.attempt, 0)
            final_attempt = info.attempt >= RETRY_MAX_ATTEMPTS
            if info.attempt > RETRY_MAX_ATTEMPTS:
                return await self._dead_letter(ref, info.attempt, self._last_failure or "unknown")
            if info.settled:  # capture.settle projected and resolved it in the same step
                self._stage = "resolve"
                self._state = "resolved"
                self._publish()
                return CaptureOutcome(inp.intake_id, "resolved", info.attempt, info.lines_added, 0)
            self._state = "running"
            self._publish()
            try:
                if info.failure is not None:
                    self._stage = "projection"
                    raise _SettleFailed(info.failure)
                lines, calls = await self._attempt_once(ref, info, final_attempt)
            except (ActivityError, _SettleFailed) as err:
                category = err.category if isinstance(err, _SettleFailed) else failure_category(err)
                self._last_failure = category
                if final_attempt:
                    return await self._dead_letter(ref, info.attempt, category)
                delay = retry_delay_seconds(info.attempt + 1, inp.first_delay_seconds)
                await self._short(
                    RECORD_FAILURE, FailureInput(ref.intake_id, ref.store_id, category, delay), None
                )
                self._state = "waiting"
                self._stage = "backoff"
                self._publish()
                await workflow.sleep(
                    timedelta(seconds=delay), summary="durable backoff before the next attempt"
                )
                continue
            self._state = "resolved"
            self._publish()
            return CaptureOutcome(inp.intake_id, "resolved", info.attempt, lines, calls)

    async def _begin(self, inp: CaptureInput, ref: RecordRef) -> AttemptInfo:
        """Count the attempt. Versioned (issue #15 item 2): newer runs do it in one local activity that
        also projects and resolves a turn without curation stages; older histories replay the
        activity ``intake.begin_attempt``."""
        if not workflow.patched(SETTLE_IN_ONE_STEP):
            info: AttemptInfo = await self._short(BEGIN_ATTEMPT, ref, AttemptInfo)
            return info
        self._stage = "settle"
        lean = workflow.patched(LEAN_STEPS)
        return await workflow.execute_local_activity(
            SETTLE,
            SettleInput(inp.intake_id, inp.store_id, inp.group_index, project_capture=lean),
            result_type=AttemptInfo,
            start_to_close_timeout=_STAGE,
            retry_policy=_NO_RETRY,
            summary="begin the attempt; project and resolve a turn without curation",
        )

    async def _attempt_once(self, ref: RecordRef, info: AttemptInfo, final_attempt: bool) -> tuple[int, int]:
        """Run one attempt; returns (lines added, model calls) for the outcome (content-free counts)."""
        lean = info.projected  # capture.settle projected it: the workflow took LEAN_STEPS
        if not lean:
            self._stage = "projection"
            projection: ProjectionResult = await workflow.execute_activity(
                PROJECT,
                ref,
                result_type=ProjectionResult,
                start_to_close_timeout=_STAGE,
                heartbeat_timeout=_HEARTBEAT,
                retry_policy=_NO_RETRY,
                summary="project the admitted observation",
            )
        lines, calls = info.lines_added if lean else projection.lines_added, 0
        if info.write_mode == "capture":
            curation = CurationInput(ref.intake_id, ref.store_id, final_attempt)
            asking = CurationInput(ref.intake_id, ref.store_id, final_attempt, ask_order=lean)
            extracted: StageResult | None = None
            last: StageResult | None = None
            for stage, name in (("extraction", EXTRACT), ("review", REVIEW), ("reconciliation", RECONCILE)):
                # Nothing eligible for review (CAP-06): extraction already marked the plan reviewed, so
                # the stage is not scheduled (one dispatch fewer). Versioned: older histories ran it.
                if (
                    stage == "review"
                    and extracted is not None
                    and not extracted.review_needed
                    and workflow.patched(SKIP_EMPTY_REVIEW)
                ):
                    continue
                self._stage = stage
                # Extraction and review of different turns run in parallel on the model queue when the
                # worker offers one; the rest stays on the store's serial queue (issue #15 item 1).
                queue = info.model_task_queue if name in (EXTRACT, REVIEW) else None
                waited = timedelta(0)
                if stage == "reconciliation" and last is not None and last.turn_ahead:
                    before = workflow.now()
                    await self._wait_for_signal()  # its turn has not come: no dispatch until it may
                    waited = workflow.now() - before
                result = await self._stage_activity(
                    name, curation if name == RECONCILE else asking, stage, queue
                )
                last = result
                if stage == "reconciliation":
                    result = await self._await_turn(curation, result, waited)
                calls += result.model_calls
                if stage == "extraction":
                    extracted = result
                elif stage == "reconciliation":
                    lines += result.items  # ADD and SUPERSEDE decisions committed
        self._stage = "resolve"
        if lean:
            await workflow.execute_local_activity(
                RESOLVE, ref, start_to_close_timeout=_SHORT, retry_policy=_NO_RETRY, summary=RESOLVE
            )
        else:
            await self._short(RESOLVE, ref, None)
        return lines, calls

    async def _stage_activity(
        self, name: str, curation: CurationInput, summary: str, queue: str | None
    ) -> StageResult:
        return await workflow.execute_activity(
            name,
            curation,
            result_type=StageResult,
            task_queue=queue,
            # A model queue nobody polls any more (the worker restarted with concurrency 1) fails the
            # attempt instead of waiting forever; the retry's begin_attempt names the queue anew.
            schedule_to_start_timeout=_MODEL_QUEUE_WAIT if queue is not None else None,
            start_to_close_timeout=_STAGE,
            heartbeat_timeout=_HEARTBEAT,
            retry_policy=_NO_RETRY,
            summary=summary,
        )

    async def _wait_for_signal(self) -> None:
        """Until the turn ahead signals that it left flight, or ORDER_RECHECK_SECONDS pass."""
        self._stage = "awaiting_turn"
        if not self._turn_signalled:
            # builtins: temporalio.exceptions.TimeoutError (an activity timeout) shadows the name here
            with contextlib.suppress(builtins.TimeoutError):
                await workflow.wait_condition(
                    lambda: self._turn_signalled, timeout=timedelta(seconds=limits.ORDER_RECHECK_SECONDS)
                )
        self._turn_signalled = False

    async def _await_turn(
        self, curation: CurationInput, result: StageResult, waited: timedelta
    ) -> StageResult:
        """Reconciliation deferred while an earlier-admitted turn is in flight: wait for the signal that it
        left flight (or look again every ORDER_RECHECK_SECONDS) and ask again. After ORDER_WAIT_MAX_SECONDS
        of waiting (``waited`` before the first ask included), commit without waiting for a turn that is
        not progressing."""
        started = workflow.now() - waited
        while result.deferred:
            await self._wait_for_signal()
            waited = workflow.now() - started
            ordered = waited < timedelta(seconds=limits.ORDER_WAIT_MAX_SECONDS)
            self._stage = "reconciliation"
            result = await self._stage_activity(
                RECONCILE,
                CurationInput(curation.intake_id, curation.store_id, curation.final_attempt, ordered),
                "reconciliation" if ordered else "reconciliation (stopped waiting for earlier turns)",
                None,
            )
        return result

    async def _dead_letter(self, ref: RecordRef, attempt: int, category: str) -> CaptureOutcome:
        self._stage = "dead_letter"
        await self._short(DEAD_LETTER, FailureInput(ref.intake_id, ref.store_id, category, 0), None)
        self._state = "dead"
        self._publish()
        return CaptureOutcome(ref.intake_id, "dead", attempt, 0)

    async def _short(self, name: str, arg: object, result_type: type | None) -> object:
        return await workflow.execute_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=_SHORT,
            retry_policy=_NO_RETRY,
            summary=name,
        )
