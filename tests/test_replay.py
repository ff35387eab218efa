"""Workflow determinism: checked-in CaptureWorkflow histories must replay against the current code.

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

from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_checked_in() -> None:
    names = {p.stem for p in HISTORIES}
    assert {
        "capture_lite_resolved",
        "capture_lite_retry_then_resolved",
        "capture_lite_retry_search_attributes",
        "capture_bujo_review_ran",
        "capture_bujo_review_skipped",
    } <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json("replayed", json.loads(path.read_text()))
    result = await Replayer(workflows=[CaptureWorkflow, IntakeSweepWorkflow]).replay_workflow(history)
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
