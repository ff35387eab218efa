"""Batch the normal path (issue #15 item 2), on a real dev server with real Markdown and DuckDB files.

* A Lite turn settles in one local activity (attempt, projection, resolve): its capture workflow
  schedules no activity task, and the record's receipt, ledger entry and line are there once.
* A backfill's captures hand their index updates to the group commit; the backfill's last step flushes
  it, so the store is fully searchable when the run ends and no day stays marked.
* A crash between a deferred line and its flush leaves a marker; the sweeper indexes that day.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from tempomem.activities.context import StoreContext
from tempomem.activities.projection import ProjectionActivities
from tempomem.backfill import follow_backfill, write_jsonl
from tempomem.messages.capture import INDEX_FLUSH, SETTLE, RecordRef, SweepInput, SweepResult
from tempomem.recall.index import MemoryIndex
from tempomem.starts import start_backfill
from tempomem.storage.intake_records import RecordState, intake_id
from tempomem.workflows.sweep import IntakeSweepWorkflow
from tests.conftest import make_store
from tests.test_backfill import backfill_worker, daily_ids, states, turns


def indexed(root: Path, query: str = "boiler code") -> set[str]:
    return {h.id for h in MemoryIndex(root, None).search(query, limit=200)}


def event_types(history: WorkflowHistory) -> list[int]:
    return [e.event_type for e in history.events]


async def test_backfill_ends_fully_searchable_with_one_settle_step_per_turn(
    client: Client, tmp_path: Path
) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    path = tmp_path / "turns.jsonl"
    write_jsonl(path, turns(20, prefix="grp"))
    async with backfill_worker(client, store):
        handle = await start_backfill(client, store, path, window=4, batch_size=8)
        result = await follow_backfill(client, handle.id)
    assert (result.admitted + result.duplicates, result.resolved, result.dead) == (20, 20, 0)
    run_ids = [f"grp-{i}" for i in range(20)]
    assert states(store, run_ids) == {RecordState.RESOLVED}
    assert store.intake.ledger.verify_all(store.intake.has_receipt) == 20
    lines = daily_ids(store)
    assert len(lines) == len(set(lines)) == 20
    # Searchable when the run ended: every line in the index, nothing left marked for the group commit.
    assert indexed(store.root) == set(lines)
    assert store.worker_context(client).index_backlog.marked_days() == []
    # The backfill's last step is the group commit's flush.
    history = await client.get_workflow_handle(handle.id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled[-1] == INDEX_FLUSH
    # A child settled its turn in one local activity: a marker, no activity task at all.
    child = client.get_workflow_handle(f"capture-{store.store_id}-{intake_id(run_ids[0])}")
    child_history = await child.fetch_history()
    types = event_types(child_history)
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in types
    markers = [
        e.marker_recorded_event_attributes
        for e in child_history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert any(m.marker_name == "core_local_activity" for m in markers)
    assert SETTLE.encode() in b"".join(m.SerializeToString() for m in markers)


async def test_the_sweeper_indexes_a_day_a_crashed_batch_left_marked(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    turn = turns(1, prefix="crashed")[0]
    admitted = await make_store(tmp_path / "mem", None, mode="lite").persist_completed_turn(turn)
    assert admitted.intake_id is not None
    MemoryIndex(store.root, None).rebuild()  # the store's index, current before the batch
    # A process whose captures deferred this line to its group commit, then died before the flush.
    crashed = StoreContext(root=store.root, tier="lite", write_mode="append-host-summary", task_queue="gone")
    ref = RecordRef(admitted.intake_id, crashed.store_id)
    ProjectionActivities(crashed).project_now(ref, group_index=True)
    crashed.intake.resolve(admitted.intake_id, outcome="success", now=turn.admitted_at)
    assert daily_ids(store) != [] and indexed(store.root) == set()
    assert crashed.index_backlog.marked_days() == [turn.admitted_at.date().isoformat()]
    async with backfill_worker(client, store):
        result = await client.execute_workflow(
            IntakeSweepWorkflow.run,
            SweepInput(store.store_id),
            id=f"sweep-test-{store.store_id}",
            task_queue=store.task_queue,
            result_type=SweepResult,
        )
    assert result.indexed == 1
    assert indexed(store.root) == set(daily_ids(store))
    assert store.worker_context(client).index_backlog.marked_days() == []
