"""Intake transitions as activities: the workflow persists its retry state through these (INTAKE-13)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from tempomem.activities.context import StoreContext, utc_now
from tempomem.storage.intake import FailureCategory, RecordState, UnknownRecordError
from tempomem.storage.intake_tidy import quarantine_if_corrupt
from tempomem.workflows.common import (
    BEGIN_ATTEMPT,
    DEAD_LETTER,
    RECORD_FAILURE,
    RESOLVE,
    AttemptInfo,
    FailureInput,
    RecordRef,
)


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
        return AttemptInfo(attempt=proc.attempts, pending=True, write_mode=view.write_mode, tier=view.tier)

    @activity.defn(name=RECORD_FAILURE)
    def record_failure(self, inp: FailureInput) -> None:
        self.ctx.check(inp.store_id)
        self.ctx.intake.record_failure(
            inp.intake_id,
            _category(inp.category),
            retry_in=timedelta(seconds=inp.retry_in_seconds),
            now=utc_now(),
        )

    @activity.defn(name=DEAD_LETTER)
    def dead_letter(self, inp: FailureInput) -> None:
        self.ctx.check(inp.store_id)
        self.ctx.intake.dead_letter(inp.intake_id, _category(inp.category), now=utc_now())

    @activity.defn(name=RESOLVE)
    def resolve(self, ref: RecordRef) -> None:
        self.ctx.check(ref.store_id)
        self.ctx.intake.resolve(ref.intake_id, outcome="success", now=utc_now())
