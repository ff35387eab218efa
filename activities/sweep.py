"""Starting capture workflows idempotently, from admission and from the intake sweeper (AMB-54).

A start for a run that already has a running workflow is a no-op (id conflict policy USE_EXISTING);
a finished one may be started again (reuse policy ALLOW_DUPLICATE) because only a still-pending record
is ever started, e.g. after ``tempomem retry``.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from activities.context import StoreContext, utc_now
from workflows.common import (
    CAPTURE_WORKFLOW,
    SWEEP,
    CaptureInput,
    SweepInput,
    SweepResult,
    capture_workflow_id,
)


async def start_capture(
    client: Client, *, task_queue: str, store_id: str, intake_id: str, first_delay_seconds: int = 60
) -> bool:
    """Start (or find) the CaptureWorkflow of one record. True when this call started a new run."""
    handle = await client.start_workflow(
        CAPTURE_WORKFLOW,
        CaptureInput(intake_id=intake_id, store_id=store_id, first_delay_seconds=first_delay_seconds),
        id=capture_workflow_id(intake_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=f"capture of intake record {intake_id[:12]}… (store {store_id})",
    )
    # The server says whether it started a run or USE_EXISTING found one (StartWorkflowExecutionResponse).
    response = getattr(handle, "_start_workflow_response", None)
    return bool(getattr(response, "started", True))


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
            first_delay_seconds=ctx.first_delay_seconds,
        ):
            started += 1
    return SweepResult(due=len(due), started=started, already_running=len(due) - started)


class SweepActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=SWEEP)
    async def sweep(self, inp: SweepInput) -> SweepResult:
        self.ctx.check(inp.store_id)
        return await sweep_store(self.ctx)
