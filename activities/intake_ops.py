"""Intake transitions as activities: the workflow persists its retry state through these (INTAKE-13)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from temporalio import activity
from temporalio.service import RPCError

from tempomem.activities.context import StoreContext, utc_now
from tempomem.activities.heartbeat import run_blocking
from tempomem.messages.capture import (
    BEGIN_ATTEMPT,
    COMMIT_TURN_SIGNAL,
    DEAD_LETTER,
    RECORD_FAILURE,
    RESOLVE,
    AttemptInfo,
    FailureInput,
    RecordRef,
    capture_workflow_id,
)
from tempomem.storage.intake_records import FailureCategory, RecordState, UnknownRecordError
from tempomem.storage.intake_tidy import quarantine_if_corrupt

log = logging.getLogger("tempomem.capture")


def _category(value: str) -> FailureCategory:
    try:
        return FailureCategory(value)
    except ValueError:
        return FailureCategory.UNKNOWN


class IntakeActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=BEGIN_ATTEMPT)
    def begin_attempt(self, ref: RecordRef) -> AttemptInfo:
        """Persist attempts+1 in the record before the try; report whether there is work at all."""
        return self.begin(ref)

    def begin(self, ref: RecordRef) -> AttemptInfo:
        """``intake.begin_attempt``'s work, also the first part of ``capture.settle`` (blocking)."""
        self.ctx.check(ref.store_id)
        intake = self.ctx.intake
        # A record that cannot be trusted (edited, malformed, unsafe) is quarantined, never curated.
        if quarantine_if_corrupt(intake, ref.intake_id, now=utc_now()) is not None:
            return AttemptInfo(attempt=0, pending=False, write_mode="", tier="")
        try:
            view = intake.view(ref.intake_id, now=utc_now())
        except UnknownRecordError:
            return AttemptInfo(attempt=0, pending=False, write_mode="", tier="")
        if view.state is not RecordState.PENDING:
            return AttemptInfo(
                attempt=view.attempts, pending=False, write_mode=view.write_mode, tier=view.tier
            )
        proc = intake.begin_attempt(ref.intake_id, now=utc_now())
        return AttemptInfo(
            attempt=proc.attempts,
            pending=True,
            write_mode=view.write_mode,
            tier=view.tier,
            model_task_queue=self.ctx.model_task_queue,
        )

    # The three transitions that take a turn out of flight wake the turn waiting to commit after it.
    @activity.defn(name=RECORD_FAILURE)
    async def record_failure(self, inp: FailureInput) -> None:
        self.ctx.check(inp.store_id)
        await self._leave_flight(
            inp.intake_id,
            lambda: self.ctx.intake.record_failure(
                inp.intake_id,
                _category(inp.category),
                retry_in=timedelta(seconds=inp.retry_in_seconds),
                now=utc_now(),
            ),
        )

    @activity.defn(name=DEAD_LETTER)
    async def dead_letter(self, inp: FailureInput) -> None:
        self.ctx.check(inp.store_id)
        await self._leave_flight(
            inp.intake_id,
            lambda: self.ctx.intake.dead_letter(inp.intake_id, _category(inp.category), now=utc_now()),
        )

    @activity.defn(name=RESOLVE)
    async def resolve(self, ref: RecordRef) -> None:
        self.ctx.check(ref.store_id)
        await self._leave_flight(
            ref.intake_id,
            lambda: self.ctx.intake.resolve(ref.intake_id, outcome="success", now=utc_now()),
        )

    async def _leave_flight(self, intake_id: str, transition: Callable[[], object]) -> None:
        capture = self.ctx.write_mode == "capture"

        def step() -> str | None:
            # Asked before the transition: a resolved record's admission instant leaves with its payload.
            # A committed turn woke its successor when it committed (curation.reconcile): not again here.
            order, now = self.ctx.commit_order, utc_now()
            holding = capture and order.in_flight(intake_id, now=now)
            waiting = order.next_waiting(intake_id, now=now) if holding else None
            transition()
            return waiting

        waiting = await run_blocking(step)
        if waiting is not None:
            await wake_turn(self.ctx, waiting)


async def wake_turn(ctx: StoreContext, intake_id: str) -> None:
    """Tell the capture of ``intake_id`` it may be its turn to commit. Best effort: a capture not waiting
    ignores it, one not running gets NOT_FOUND, and a waiting one looks again within seconds anyway."""
    if ctx.client is None:
        return
    handle = ctx.client.get_workflow_handle(capture_workflow_id(ctx.store_id, intake_id))
    try:
        await handle.signal(COMMIT_TURN_SIGNAL)
    except RPCError as exc:
        log.debug("commit-turn signal not delivered: %s", exc.status.name)
