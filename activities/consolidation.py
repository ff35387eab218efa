"""The consolidation activity and its per-store Temporal Schedule (TIER-13, AMB-01)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import activity
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext
from tempomem.activities.heartbeat import run_blocking
from tempomem.storage.consolidation import consolidate
from tempomem.workflows.consolidation import (
    CONSOLIDATE,
    CONSOLIDATION_WORKFLOW,
    ConsolidationInput,
    ConsolidationResult,
    consolidation_workflow_id,
)

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
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_consolidation_schedule(
    client: Client, ctx: StoreContext, every: timedelta = CONSOLIDATE_EVERY
) -> bool:
    """Create the store's consolidation schedule. True when created now; an existing one keeps running,
    its interval updated to ``every`` when it differs."""
    schedule = _schedule(ctx, every)
    try:
        await client.create_schedule(consolidation_schedule_id(ctx.store_id), schedule)
    except ScheduleAlreadyRunningError:
        handle = client.get_schedule_handle(consolidation_schedule_id(ctx.store_id))

        def update(current: ScheduleUpdateInput) -> ScheduleUpdate | None:
            intervals = current.description.schedule.spec.intervals
            if [i.every for i in intervals] == [every]:
                return None
            return ScheduleUpdate(schedule=schedule)

        await handle.update(update)
        return False
    return True
