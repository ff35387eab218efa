"""Workflow determinism: checked-in histories of every workflow type must replay against the current code.

A change that breaks replay fails here; evolve workflows with ``workflow.patched`` instead.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tempomem.messages.backfill import BACKFILL_WORKFLOW
from tempomem.messages.capture import CAPTURE_WORKFLOW, SWEEP_WORKFLOW
from tempomem.messages.consolidation import CONSOLIDATION_WORKFLOW
from tempomem.messages.recurate import RECURATE_WORKFLOW
from tempomem.workflows.backfill import BackfillWorkflow
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.consolidation import ConsolidationWorkflow
from tempomem.workflows.recurate import RecurateWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow

# Every workflow type a store's worker registers (tempomem.worker.store_worker_parts), by its name.
WORKFLOW_NAMES = [
    CAPTURE_WORKFLOW,
    SWEEP_WORKFLOW,
    BACKFILL_WORKFLOW,
    CONSOLIDATION_WORKFLOW,
    RECURATE_WORKFLOW,
]
WORKFLOWS = [CaptureWorkflow, IntakeSweepWorkflow, BackfillWorkflow, ConsolidationWorkflow, RecurateWorkflow]

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_checked_in() -> None:
    names = {p.stem for p in HISTORIES}
    assert {
        "capture_lite_resolved",
        "capture_lite_retry_then_resolved",
        "capture_lite_retry_search_attributes",
        "capture_bujo_review_ran",
        "capture_bujo_review_skipped",
        "sweep_started_one",
        "backfill_jsonl",
        "consolidation_regenerated",
        "recurate_dry_run",
        "recurate_real",
        # #15 item 1: extraction/review on the model queue, a deferred reconcile, the commit_turn signal
        "capture_bujo_parallel_deferred",
        # #15 item 1: patch "recurate-window-v1", two captures in flight
        "recurate_windowed",
        # #15 item 2: a Lite turn settled in one local activity (and failing there first), a backfill
        # whose children group their index updates and whose last step is index.flush
        "capture_lite_settled",
        "capture_lite_settle_failed_then_resolved",
        "backfill_grouped",
        # #15 item 1, patch "capture-lean-steps-v1": projection in capture.settle, a local resolve, and a
        # later turn that waits for its signal before its only reconcile
        "capture_bujo_lean",
        "capture_bujo_parallel_lean",
    } <= names


def test_every_workflow_type_has_a_recorded_history() -> None:
    recorded = {
        json.loads(p.read_text())["events"][0]["workflowExecutionStartedEventAttributes"]["workflowType"][
            "name"
        ]
        for p in HISTORIES
    }
    assert recorded == {w.__name__ for w in WORKFLOWS} == set(WORKFLOW_NAMES)


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json("replayed", json.loads(path.read_text()))
    result = await Replayer(workflows=WORKFLOWS).replay_workflow(history)
    assert result.replay_failure is None


@workflow.defn(name="CaptureWorkflow")
class ChangedCaptureWorkflow:
    """A CaptureWorkflow whose first command differs from the recorded one (a timer, not an activity)."""

    @workflow.run
    async def run(self, inp: dict) -> None:
        await workflow.sleep(timedelta(seconds=1))


async def test_replay_detects_a_changed_workflow() -> None:
    """The check can fail: a changed command sequence must be flagged as non-deterministic."""
    path = next(p for p in HISTORIES if p.stem == "capture_lite_resolved")
    history = WorkflowHistory.from_json("replayed", json.loads(path.read_text()))
    result = await Replayer(workflows=[ChangedCaptureWorkflow]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
