"""The consolidation activity and its per-store Temporal Schedule (TIER-13, AMB-01)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import activity
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext
from tempomem.activities.heartbeat import run_blocking
from tempomem.activities.schedules import ensure_schedule, store_interval
from tempomem.messages.consolidation import (
    CONSOLIDATE,
    CONSOLIDATION_WORKFLOW,
    ConsolidationInput,
    ConsolidationResult,
    consolidation_workflow_id,
)
from tempomem.storage.consolidation import consolidate

CONSOLIDATE_EVERY = timedelta(hours=1)


def consolidation_schedule_id(store_id: str) -> str:
    return f"tempomem-consolidate-{store_id}"


class ConsolidationActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=CONSOLIDATE)
    async def regenerate_index(self, inp: ConsolidationInput) -> ConsolidationResult:
        if inp.store_id != self.ctx.store_id:
            raise ApplicationError("task for another store", type="wrong_store", non_retryable=True)
        report = await run_blocking(lambda: consolidate(self.ctx.root))
        return ConsolidationResult(**dataclasses.asdict(report))


def _schedule(ctx: StoreContext, every: timedelta) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            CONSOLIDATION_WORKFLOW,
            ConsolidationInput(store_id=ctx.store_id),
            id=consolidation_workflow_id(ctx.store_id),
            task_queue=ctx.task_queue,
            static_summary=f"regenerate index.md · store {ctx.store_id}",
        ),
        spec=ScheduleSpec(intervals=[store_interval(ctx.store_id, every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_consolidation_schedule(
    client: Client, ctx: StoreContext, every: timedelta = CONSOLIDATE_EVERY
) -> bool:
    """Create the store's consolidation schedule. True when created now; an existing one keeps running,
    its interval updated to ``every`` when it differs (``schedules.ensure_schedule``)."""
    return await ensure_schedule(client, consolidation_schedule_id(ctx.store_id), _schedule(ctx, every))
