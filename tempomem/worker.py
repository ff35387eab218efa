"""The worker of one memory root: registers the workflows and this store's activities, sweeps the
intake on start and keeps a Temporal Schedule that sweeps it every minute (AMB-54)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.worker import Worker

from activities.consolidation import ensure_consolidation_schedule
from activities.context import StoreContext
from activities.curation import CurationActivities
from activities.intake_ops import IntakeActivities
from activities.projection import ProjectionActivities
from activities.sweep import SweepActivities, register_search_attributes, sweep_store
from storage.fence import hold_fence
from storage.limits import SHUTDOWN_DRAIN_SECONDS
from storage.snapshot import Sink, SnapshotPublisher
from tempomem.backfill import backfill_worker_extras
from tempomem.export import recover_interrupted_import
from tempomem.recurate import recurate_worker_extras
from workflows.capture import CaptureWorkflow
from workflows.common import SWEEP_WORKFLOW, SweepInput, SweepResult
from workflows.sweep import IntakeSweepWorkflow

log = logging.getLogger("tempomem.worker")
SWEEP_EVERY = timedelta(minutes=1)


def schedule_id(store_id: str) -> str:
    return f"tempomem-sweep-{store_id}"


def store_activities(ctx: StoreContext) -> Sequence[Any]:
    intake = IntakeActivities(ctx)
    projection = ProjectionActivities(ctx)
    curation = CurationActivities(ctx)
    sweep = SweepActivities(ctx)
    return [
        intake.begin_attempt,
        intake.record_failure,
        intake.dead_letter,
        intake.resolve,
        projection.project,
        curation.extract,
        curation.review,
        curation.reconcile,
        sweep.sweep,
    ]


def build_worker(client: Client, ctx: StoreContext, *, executor: concurrent.futures.Executor) -> Worker:
    """One activity at a time: captures of one store never race each other (INTAKE-15)."""
    extra_workflows, extra_activities = backfill_worker_extras(ctx)  # backfill + consolidation
    recurate_workflows, recurate_activities = recurate_worker_extras(ctx)
    extra_workflows = [*extra_workflows, *recurate_workflows]
    extra_activities = [*extra_activities, *recurate_activities]
    return Worker(
        client,
        task_queue=ctx.task_queue,
        workflows=[CaptureWorkflow, IntakeSweepWorkflow, *extra_workflows],
        activities=[*store_activities(ctx), *extra_activities],
        activity_executor=executor,
        max_concurrent_activities=1,
        graceful_shutdown_timeout=timedelta(seconds=SHUTDOWN_DRAIN_SECONDS),
    )


async def ensure_sweep_schedule(client: Client, ctx: StoreContext) -> bool:
    """Create the per-store sweep schedule once. True when created now, False when it existed."""
    try:
        await client.create_schedule(
            schedule_id(ctx.store_id),
            Schedule(
                action=ScheduleActionStartWorkflow(
                    SWEEP_WORKFLOW,
                    SweepInput(store_id=ctx.store_id),
                    id=f"tempomem-sweep-run-{ctx.store_id}",
                    task_queue=ctx.task_queue,
                ),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=SWEEP_EVERY)]),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            ),
        )
    except ScheduleAlreadyRunningError:
        return False
    return True


async def run_worker(
    client: Client,
    ctx: StoreContext,
    *,
    stop: asyncio.Event,
    schedule: bool = True,
    snapshot_sinks: list[Sink] | None = None,
) -> SweepResult:
    """Run until ``stop`` is set; shutdown drains for up to 10 s (INTAKE-16). Returns the start sweep.

    Snapshots of the intake are republished after every transition this worker makes (INTAKE-31),
    including the shutdown state.
    """
    ctx.client = client
    publisher = SnapshotPublisher(ctx.intake, snapshot_sinks)
    try:
        return await _run(client, ctx, stop=stop, schedule=schedule, publisher=publisher)
    finally:
        publisher.set_shutdown("stopped")
        publisher.close()


async def _run(
    client: Client, ctx: StoreContext, *, stop: asyncio.Event, schedule: bool, publisher: SnapshotPublisher
) -> SweepResult:
    # One worker owns a memory root; the fence also keeps operator commands off a live store (AMB-02).
    with (
        hold_fence(ctx.root, what="second worker"),
        concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tempomem-act") as executor,
    ):
        # Finish (or discard) an interrupted `tempomem import` before this worker touches the store.
        recover_interrupted_import(ctx.root)
        worker = build_worker(client, ctx, executor=executor)
        async with worker:
            if not await register_search_attributes(client):
                log.warning(
                    "search attributes not registered on %s; workflows start without them", client.namespace
                )
            swept = await sweep_store(ctx)
            log.info("start sweep: %d due, %d started", swept.due, swept.started)
            if schedule:
                await ensure_sweep_schedule(client, ctx)
                await ensure_consolidation_schedule(client, ctx)
            publisher.notify()
            await stop.wait()
            publisher.set_shutdown("draining")
    return swept
