"""Step timings read from a workflow history, shared by the benches (content-free: names and times)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

FIRST_TASK, LATER_TASK = "workflow task (first)", "workflow task (later)"


def step_times(history: Any) -> Iterator[tuple[str, float, float]]:
    """``(step, dispatch ms, work ms)`` for each workflow task and activity of ``history``: dispatch is
    scheduled → started (through the server), work is started → completed."""
    at = {e.event_id: e.event_time.ToDatetime() for e in history.events}
    kind: dict[int, str] = {}

    def ms(later: int, earlier: int) -> float:
        return (at[later] - at[earlier]).total_seconds() * 1000

    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            kind[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.HasField("workflow_task_completed_event_attributes"):
            task = e.workflow_task_completed_event_attributes
            name = FIRST_TASK if task.started_event_id <= 3 else LATER_TASK
            dispatch = ms(task.started_event_id, task.scheduled_event_id)
            yield name, dispatch, ms(e.event_id, task.started_event_id)
        elif e.HasField("activity_task_completed_event_attributes"):
            done = e.activity_task_completed_event_attributes
            yield (
                kind[done.scheduled_event_id],
                ms(done.started_event_id, done.scheduled_event_id),
                ms(e.event_id, done.started_event_id),
            )
