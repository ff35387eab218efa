"""One admitted record curated as a child ``CaptureWorkflow`` of a batch workflow (backfill, re-curation).

The child owns its record's retry budget, so it is abandoned, never cancelled, with its parent. When the
sweeper (or a host admission) started the record's capture first, the parent waits on the record on disk
instead; whatever happened, the record's state on disk is the answer. Commands are the same as the
inline code this replaces, so recorded histories replay unchanged.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import (
    RetryPolicy,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from tempomem.messages import search_attributes as sa
    from tempomem.messages.capture import (
        CAPTURE_WORKFLOW,
        INDEX_FLUSH,
        RECORD_STATE,
        STORE_SCOPED_IDS,
        CaptureInput,
        CaptureOutcome,
        RecordRef,
        capture_workflow_id,
        legacy_capture_workflow_id,
    )

# Versioned change (issue #15 item 2): children of batch runs hand their index update to the group commit.
INDEX_GROUP_COMMIT = "index-group-commit-v1"
POLL_CAP_SECONDS = 300


@dataclass(frozen=True)
class ChildCapture:
    state: str  # resolved | dead | pending (the record on disk)
    outcome: CaptureOutcome | None  # the child's result when this parent ran it to the end


@dataclass(frozen=True)
class StoreLabels:
    """What the child's search attributes say about its store (known after the first admitted batch)."""

    tier: str
    write_mode: str


async def capture_child(
    intake_id: str,
    *,
    store_id: str,
    first_delay_seconds: int,
    search_attributes: bool,
    labels: StoreLabels,
    summary: str,
    first_poll_seconds: int = 1,
    group_index: bool = False,
) -> ChildCapture:
    """Run the record's capture as a child and return the record's resulting state. ``group_index``: the
    child's index update joins the store's group commit; the caller flushes it (``flush_index``)."""
    outcome: CaptureOutcome | None = None
    try:
        outcome = await workflow.execute_child_workflow(
            CAPTURE_WORKFLOW,
            CaptureInput(
                intake_id=intake_id,
                store_id=store_id,
                first_delay_seconds=first_delay_seconds,
                search_attributes=search_attributes,
                group_index=group_index,
            ),
            id=child_id(store_id, intake_id),
            result_type=CaptureOutcome,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            # A capture owns its record's retry budget; it must outlive a cancelled parent.
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            search_attributes=_child_attributes(store_id, labels) if search_attributes else None,
            static_summary=summary,
        )
        state = outcome.state
    except WorkflowAlreadyStartedError:
        # The sweeper (or a host admission) started this record's capture first: wait for the record.
        state = await _await_record(store_id, intake_id, first_poll_seconds)
    except ChildWorkflowError:
        state = "failed"
    if state not in ("resolved", "dead"):
        # "not_pending": another run finished the record first; "failed": it stays pending for the
        # sweeper. Either way the record on disk says what happened.
        state = await record_state(store_id, intake_id)
    return ChildCapture(state, outcome)


def admit_retry(*non_retryable: str) -> RetryPolicy:
    """A batch workflow's admission activity: admission is idempotent, so retries are safe; about 15 min
    of them ride out a full intake (capacity) or a restarting worker, then the run fails visibly
    (starting it again resumes it). ``non_retryable``: the error types no retry can fix."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(minutes=1),
        maximum_attempts=20,
        non_retryable_error_types=list(non_retryable),
    )


async def capture_window(
    *,
    window: int,
    admit: Callable[[], Awaitable[tuple[list[str], bool]]],
    roll_over: Callable[[], bool],
    capture: Callable[[str], Awaitable[None]],
    report: Callable[[int], None],
) -> bool:
    """The rolling window of child captures a batch workflow runs: ``window`` in flight, started in
    admission order; the next batch is admitted (``admit`` returns its pending intake ids and whether the
    source is exhausted) once the last one's captures have all started. Returns True at the end of the
    source, False when ``roll_over`` asked to continue as new: then the window is drained, so no child
    outlives the run. ``report`` gets the captures in flight after each start."""
    queue: deque[str] = deque()
    running: list[asyncio.Task[None]] = []
    eof = False
    while True:
        rolling = roll_over()
        if not queue and not eof and not rolling:
            pending, eof = await admit()
            queue.extend(pending)
        while queue and len(running) < window:
            running.append(asyncio.create_task(capture(queue.popleft())))
        report(len(running))
        if running:
            _, running = await workflow.wait(running, return_when=asyncio.FIRST_COMPLETED)
            continue
        if queue:
            continue
        if eof:
            return True
        if rolling:
            return False


async def record_state(store_id: str, intake_id: str) -> str:
    """pending | dead | resolved (a pruned receipt, "unknown", was resolved long ago)."""
    state: str = await workflow.execute_activity(
        RECORD_STATE,
        RecordRef(intake_id, store_id),
        result_type=str,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1)),
        summary="is the record still pending",
    )
    return "resolved" if state == "unknown" else state


async def _await_record(store_id: str, intake_id: str, first_poll_seconds: int) -> str:
    delay = max(1, first_poll_seconds)
    while True:
        state = await record_state(store_id, intake_id)
        if state != "pending":
            return state
        await workflow.sleep(timedelta(seconds=delay), summary="capture owned by another starter")
        delay = min(POLL_CAP_SECONDS, delay * 2)


def _child_attributes(store_id: str, labels: StoreLabels) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(sa.STORE_ID, store_id),
            SearchAttributePair(sa.TIER, labels.tier),
            SearchAttributePair(sa.WRITE_MODE, labels.write_mode),
            SearchAttributePair(sa.STATE, "pending"),
            SearchAttributePair(sa.ATTEMPT, 0),
        ]
    )


def child_id(store_id: str, intake_id: str) -> str:
    """Runs started before store-scoped ids keep the old child id on replay (Temporal patching)."""
    if workflow.patched(STORE_SCOPED_IDS):
        return capture_workflow_id(store_id, intake_id)
    return legacy_capture_workflow_id(intake_id)


async def flush_index(store_id: str) -> int:
    """Index what the store's group commit still holds; the batch run's last step (and before each
    continue-as-new), so the store is fully searchable when the run ends."""
    indexed: int = await workflow.execute_activity(
        INDEX_FLUSH,
        store_id,
        result_type=int,
        start_to_close_timeout=timedelta(minutes=10),
        heartbeat_timeout=timedelta(seconds=10),
        retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1), maximum_attempts=20),
        summary="index the lines this run's captures left to the group commit",
    )
    return indexed
