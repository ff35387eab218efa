"""The worker of one memory root: registers the workflows and this store's activities, sweeps the
intake on start and keeps a Temporal Schedule that sweeps it every minute (AMB-54)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from tempomem.activities.consolidation import ensure_consolidation_schedule
from tempomem.activities.context import StoreContext, utc_now
from tempomem.activities.curation import CurationActivities
from tempomem.activities.intake_ops import IntakeActivities
from tempomem.activities.projection import ProjectionActivities
from tempomem.activities.schedules import ensure_schedule, store_interval
from tempomem.activities.settle import SettleActivities
from tempomem.activities.sweep import SweepActivities, sweep_store
from tempomem.capture.model_client import check_capture_models
from tempomem.export import recover_interrupted_import
from tempomem.messages.capture import SWEEP_WORKFLOW, SweepInput, SweepResult, model_task_queue
from tempomem.starts import register_search_attributes
from tempomem.storage.fence import hold_fence, refuse_start_before_rebuild
from tempomem.storage.intake_snapshot import Sink, SnapshotPublisher
from tempomem.storage.intake_tidy import TidyReport, tidy
from tempomem.storage.limits import SHUTDOWN_DRAIN_SECONDS
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow

if TYPE_CHECKING:
    from tempomem.store import MemoryStore

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
        SettleActivities(ctx).settle,
        projection.project,
        projection.flush_index,
        curation.extract,
        curation.review,
        curation.reconcile,
        sweep.sweep,
    ]


def model_stage_activities(ctx: StoreContext) -> Sequence[Any]:
    """Extraction and review: the model stages that may run in parallel across turns (issue #15)."""
    curation = CurationActivities(ctx)
    return [curation.extract, curation.review]


def model_concurrency(ctx: StoreContext) -> int:
    """How many model-stage activities of this store run at once; 1 keeps them on the serial queue."""
    if ctx.capture is None or ctx.write_mode != "capture":
        return 1
    return ctx.capture.concurrency


def backfill_worker_extras(
    ctx: StoreContext, *, capture_cron: bool | None = None, capture_webhook: bool | None = None
) -> tuple[list[type], list[Callable[..., Any]]]:
    """The workflows and activities a store's worker registers for backfill and consolidation.

    ``capture_cron`` / ``capture_webhook`` are the ``memory.capture`` trigger switches (WM-15); unset, they
    are read from ``ctx.capture`` (``cron``/``webhook``) when it carries them, else None: the default
    (admit), exactly as ``persist_completed_turn`` treats an unset switch.
    """
    from tempomem.activities.backfill import BackfillActivities
    from tempomem.activities.consolidation import ConsolidationActivities
    from tempomem.workflows.backfill import BackfillWorkflow
    from tempomem.workflows.consolidation import ConsolidationWorkflow

    if capture_cron is None:
        capture_cron = getattr(ctx.capture, "cron", None)
    if capture_webhook is None:
        capture_webhook = getattr(ctx.capture, "webhook", None)
    backfill = BackfillActivities(ctx, capture_cron=capture_cron, capture_webhook=capture_webhook)
    consolidation = ConsolidationActivities(ctx)
    return (
        [BackfillWorkflow, ConsolidationWorkflow],
        [backfill.admit_batch, backfill.record_state, consolidation.regenerate_index],
    )


def recurate_worker_extras(ctx: StoreContext) -> tuple[list[type], list[Callable[..., Any]]]:
    """The workflow and activities a store's worker registers for re-curation."""
    from tempomem.activities.recurate import RecurateActivities
    from tempomem.workflows.recurate import RecurateWorkflow

    acts = RecurateActivities(ctx)
    return [RecurateWorkflow], [acts.admit, acts.dry_run]


@dataclass(frozen=True)
class WorkerParts:
    """What a worker of one store registers, for a team that builds its own ``temporalio.worker.Worker``
    (own client, namespace, interceptors, data converter): pass ``workflows`` and ``activities`` on
    ``task_queue`` with ``max_concurrent_activities=1`` (one writer per store, INTAKE-15), a thread
    pool as ``activity_executor`` and ``workflow_runner``. ``run_worker`` does the rest tempomem's own
    worker does (fence, start sweep, schedules)."""

    context: StoreContext
    task_queue: str
    workflows: list[type]
    activities: list[Callable[..., Any]]
    workflow_runner: WorkflowRunner  # pass as ``workflow_runner`` (see ``workflow_runner()``)


def workflow_runner() -> WorkflowRunner:
    """Temporal's workflow sandbox with the ``tempomem`` package passed through (issue #15 item 2).

    The sandbox re-imports a workflow's module for every run unless it is passed through; at one short
    workflow per turn that cost about a fifth of a backfill's throughput (bench/backfill.py). Passed
    through, tempomem's workflow modules are imported once and the sandbox no longer intercepts their
    calls, so their determinism is checked statically instead (tests/test_worker_sandbox.py: they
    import only ``temporalio``, ``datetime.timedelta`` and a few pure standard-library modules, and call
    no clock, randomness, file or network API) and by the replay tests. Workflows of other packages on
    the same worker stay fully sandboxed.
    """
    restrictions = SandboxRestrictions.default.with_passthrough_modules("tempomem")
    return SandboxedWorkflowRunner(restrictions=restrictions)


def store_worker_parts(store: MemoryStore | StoreContext, client: Client) -> WorkerParts:
    """The workflows and activities of one store, bound to ``client`` (the sweeper starts captures
    through it)."""
    ctx = store.worker_context(client) if not isinstance(store, StoreContext) else store
    ctx.client = client
    extra_workflows, extra_activities = backfill_worker_extras(ctx)  # backfill + consolidation
    recurate_workflows, recurate_activities = recurate_worker_extras(ctx)
    return WorkerParts(
        context=ctx,
        task_queue=ctx.task_queue,
        workflows=[CaptureWorkflow, IntakeSweepWorkflow, *extra_workflows, *recurate_workflows],
        activities=[*store_activities(ctx), *extra_activities, *recurate_activities],
        workflow_runner=workflow_runner(),
    )


def build_model_worker(client: Client, ctx: StoreContext, queue: str) -> Worker:
    """The store's model stages, ``memory.llm.concurrency`` at a time, on their own task queue. Commits
    stay on the serial queue in admission order (storage.commit_order), so only model calls overlap."""
    return Worker(
        client,
        task_queue=queue,
        activities=model_stage_activities(ctx),
        max_concurrent_activities=model_concurrency(ctx),
        graceful_shutdown_timeout=timedelta(seconds=SHUTDOWN_DRAIN_SECONDS),
    )


def build_worker(
    client: Client, ctx: StoreContext, *, executor: concurrent.futures.Executor, few_pollers: bool = False
) -> Worker:
    """One activity at a time on the store's queue: captures of one store never race each other
    (INTAKE-15); extraction and review may run on the model queue beside it (``build_model_worker``).

    ``few_pollers`` (a process serving many stores, ``tempomem.fleet``): one activity poll, since the
    store has one activity slot, and two workflow polls (sticky and normal) instead of Temporal's five
    each; at a thousand stores the default polls alone exceed a namespace's request rate.
    """
    parts = store_worker_parts(ctx, client)
    polling: dict[str, Any] = {}
    if few_pollers:
        polling = {
            "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(2),
            "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(1),
        }
    return Worker(
        client,
        task_queue=parts.task_queue,
        workflows=parts.workflows,
        activities=parts.activities,
        activity_executor=executor,
        max_concurrent_activities=1,
        graceful_shutdown_timeout=timedelta(seconds=SHUTDOWN_DRAIN_SECONDS),
        workflow_runner=parts.workflow_runner,
        **polling,
    )


async def ensure_sweep_schedule(client: Client, ctx: StoreContext) -> bool:
    """Create the per-store sweep schedule, at the store's own offset in the minute. True when created
    now, False when it existed (its interval brought up to date: ``schedules.ensure_schedule``)."""
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            SWEEP_WORKFLOW,
            SweepInput(store_id=ctx.store_id),
            id=f"tempomem-sweep-run-{ctx.store_id}",
            task_queue=ctx.task_queue,
        ),
        spec=ScheduleSpec(intervals=[store_interval(ctx.store_id, SWEEP_EVERY)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    return await ensure_schedule(client, schedule_id(ctx.store_id), schedule)


async def run_worker(
    client: Client,
    ctx: StoreContext,
    *,
    stop: asyncio.Event,
    schedule: bool = True,
    snapshot_sinks: list[Sink] | None = None,
    model_slots: asyncio.Semaphore | None = None,
    executor: concurrent.futures.Executor | None = None,
    on_ready: Callable[[SweepResult], None] | None = None,
    few_pollers: bool = False,
) -> SweepResult:
    """Run until ``stop`` is set; shutdown drains for up to 10 s (INTAKE-16). Returns the start sweep.

    Snapshots of the intake are republished after every transition this worker makes (INTAKE-31),
    including the shutdown state. ``model_slots``, shared by the stores one process runs, caps that
    process's model calls in flight across them (each store's own cap is ``memory.llm.concurrency``);
    ``executor``, likewise shared, is the thread pool their activities run on (else one of 4 threads).
    ``on_ready`` is called with the start sweep once the worker polls and its schedules exist;
    ``few_pollers`` is for a process serving many stores (``build_worker``).
    """
    ctx.client = client
    ctx.model_slots = model_slots
    if ctx.capture is not None and ctx.write_mode == "capture":
        check_capture_models(ctx.capture)  # refuse now rather than fail every turn for 44.5 h
    publisher = SnapshotPublisher(ctx.intake, snapshot_sinks)
    try:
        run = functools.partial(
            _run, client, ctx, stop=stop, schedule=schedule, publisher=publisher, few_pollers=few_pollers
        )
        if executor is not None:
            return await run(executor=executor, on_ready=on_ready)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tempomem-act") as own:
            return await run(executor=own, on_ready=on_ready)
    finally:
        publisher.set_shutdown("stopped")
        publisher.close()


async def _run(
    client: Client,
    ctx: StoreContext,
    *,
    stop: asyncio.Event,
    schedule: bool,
    publisher: SnapshotPublisher,
    executor: concurrent.futures.Executor,
    on_ready: Callable[[SweepResult], None] | None = None,
    few_pollers: bool = False,
) -> SweepResult:
    # One worker owns a memory root; the fence also keeps operator commands off a live store (AMB-02).
    with hold_fence(ctx.root, what="second worker"):
        refuse_start_before_rebuild(ctx.root)  # RPL-17: adopt-replay must be followed by a rebuild
        # Finish (or discard) an interrupted `tempomem import` before this worker touches the store.
        recover_interrupted_import(ctx.root)
        # Repair what kills left behind; quarantine records that cannot be trusted (never stop on them).
        tidied = tidy(ctx.intake, now=utc_now())
        if tidied != TidyReport():
            log.warning(
                "intake tidy: %d temp file(s) removed, %d resolve(s) finished, %d orphan(s) removed, "
                "%d commitment(s) finished, quarantined: %s",
                tidied.temp_files_removed,
                tidied.resolves_finished,
                tidied.orphans_removed,
                tidied.commitments_finished,
                ", ".join(f"{q.id} ({q.reason})" for q in tidied.quarantined) or "none",
            )
        worker = build_worker(client, ctx, executor=executor, few_pollers=few_pollers)
        parallel = model_concurrency(ctx) > 1
        ctx.model_task_queue = model_task_queue(ctx.task_queue) if parallel else None
        model_worker = build_model_worker(client, ctx, ctx.model_task_queue) if ctx.model_task_queue else None
        async with worker, model_worker or contextlib.nullcontext():
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
            if on_ready is not None:
                on_ready(swept)
            await stop.wait()
            publisher.set_shutdown("draining")
    return swept


# -- a worker for a command that waits on one (backfill, recurate) -----------------------------------------
async def worker_polling(client: Client, task_queue: str) -> bool:
    """Whether a worker polled ``task_queue`` recently (a hint: the server remembers pollers briefly)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(response.pollers)


@contextlib.asynccontextmanager
async def worker_in_process(
    client: Client, store: MemoryStore, *, enabled: bool
) -> AsyncIterator[asyncio.Task[SweepResult] | None]:
    """With ``enabled``, run the store's worker in this process for the block (yields its task)."""
    if not enabled:
        yield None
        return
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(client, store.worker_context(client), stop=stop))
    try:
        yield task
    finally:
        stop.set()
        if not task.done() or not task.cancelled():
            with contextlib.suppress(Exception):
                await task


async def note_missing_worker(client: Client, store: MemoryStore) -> None:
    """Say so on stderr when no worker polls the store's task queue: the command would wait forever."""
    if not await worker_polling(client, store.task_queue):
        print(
            "note: no worker polls this store's task queue; start `tempomem worker` (or pass --worker)",
            file=sys.stderr,
            flush=True,
        )
