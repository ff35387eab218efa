"""The intake sweeper (AMB-54): start a capture for every due pending record (``tempomem.starts``), and
index what a crashed batch run's group commit left unindexed."""

from __future__ import annotations

import asyncio
import logging

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext, utc_now
from tempomem.messages.capture import (
    SWEEP,
    SweepInput,
    SweepResult,
)
from tempomem.starts import start_capture
from tempomem.storage.store_ref import is_path_named

log = logging.getLogger("tempomem.capture")


async def sweep_store(ctx: StoreContext) -> SweepResult:
    """Start a workflow for every due pending record of this store."""
    if ctx.client is None:
        raise RuntimeError("the sweeper needs a Temporal client")
    due = ctx.intake.due_pending(now=utc_now())
    started = 0
    for intake_id in due:
        if await start_capture(
            ctx.client,
            task_queue=ctx.task_queue,
            store_id=ctx.store_id,
            intake_id=intake_id,
            tier=ctx.tier,
            write_mode=ctx.write_mode,
            first_delay_seconds=ctx.first_delay_seconds,
            path_named=is_path_named(ctx.root, ctx.store_id),
        ):
            started += 1
    return SweepResult(
        due=len(due), started=started, already_running=len(due) - started, indexed=await _index_backlog(ctx)
    )


async def _index_backlog(ctx: StoreContext) -> int:
    """Index the days a batch run's group commit left marked (it crashed, or was abandoned): at the
    worker's start and at every scheduled sweep. A failure is logged (content-free) and left for the
    next sweep."""
    if not ctx.index_backlog.marked_days():
        return 0
    from tempomem.activities.projection import ProjectionActivities

    try:
        return await asyncio.to_thread(ProjectionActivities(ctx).flush_now)
    except ApplicationError as err:
        log.warning("index backlog not flushed: %s", err.type)
        return 0


class SweepActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=SWEEP)
    async def sweep(self, inp: SweepInput) -> SweepResult:
        self.ctx.check(inp.store_id)
        return await sweep_store(self.ctx)
