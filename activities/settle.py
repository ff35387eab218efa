"""``capture.settle``: a turn's attempt begun and, for a write mode without curation, finished in one step.

A Lite or Journal turn needs three things after admission: its attempt counted, its line projected
(and indexed, or handed to the group commit), its record resolved. As three activities on the store's
serial queue they cost three dispatches through the server; as one local activity they cost none
(issue #15 item 2). The steps and their order are those of the three activities, so what a crash can
leave behind is unchanged. A capture-mode turn gets its attempt begun and (patch "capture-lean-steps-v1")
its observation projected here; its curation stages follow as activities.

A failed projection or resolve is returned as its AMB-29 category rather than raised, so the workflow
can tell it from a failed begin (which fails the run, as ``intake.begin_attempt`` did).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext
from tempomem.activities.heartbeat import run_blocking
from tempomem.activities.intake_ops import IntakeActivities
from tempomem.activities.projection import ProjectionActivities
from tempomem.messages.capture import SETTLE, AttemptInfo, RecordRef, SettleInput
from tempomem.storage.intake_records import FailureCategory
from tempomem.storage.limits import RETRY_MAX_ATTEMPTS, SHUTDOWN_DRAIN_SECONDS

T = TypeVar("T")


class SettleActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx
        self.intake = IntakeActivities(ctx)
        self.projection = ProjectionActivities(ctx)

    @activity.defn(name=SETTLE)
    async def settle(self, inp: SettleInput) -> AttemptInfo:
        ref = RecordRef(inp.intake_id, inp.store_id)
        info = await run_blocking(lambda: self.intake.begin(ref))
        if not info.pending or info.attempt > RETRY_MAX_ATTEMPTS:
            return info  # nothing to do, or the budget is spent (dead letter)
        capture = info.write_mode == "capture"
        if capture and not inp.project_capture:
            return info  # a workflow from before capture-lean-steps-v1 runs the projection activity
        # A capture turn's observation goes to audit/, as capture.project writes it (no group commit);
        # its curation stages follow. Any other turn is resolved here too.
        group_index = inp.group_index and not capture
        try:
            projection = await _within_drain(
                run_blocking(lambda: self.projection.project_now(ref, group_index=group_index))
            )
            if capture:
                return dataclasses.replace(info, projected=True, lines_added=projection.lines_added)
            await self.intake.resolve(ref)
        except ApplicationError as err:
            return dataclasses.replace(info, failure=err.type or FailureCategory.UNKNOWN.value)
        except Exception as exc:  # the record stays pending for the next attempt
            activity.logger.warning("settle failed: %s", type(exc).__name__)
            return dataclasses.replace(info, failure=FailureCategory.STORAGE_ERROR.value)
        return dataclasses.replace(info, settled=True, lines_added=projection.lines_added)


async def _within_drain(work: Awaitable[T]) -> T:
    """Await ``work``; once the worker is stopping, give it the drain deadline and then abandon it
    (INTAKE-16): the attempt ends as ``shutdown_abort`` and the record stays pending. The SDK cancels a
    stopping worker's activities, but not its local activities, which would hold the stop forever
    behind a provider that never answers."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=SHUTDOWN_DRAIN_SECONDS)
        if not task.done():
            task.cancel()
            raise ApplicationError(
                "TimeoutError", type=FailureCategory.SHUTDOWN_ABORT.value, non_retryable=True
            )
        return task.result()
    finally:
        stopping.cancel()
