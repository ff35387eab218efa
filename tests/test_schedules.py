"""Per-store schedules are spread over their interval (issue #16: a worker serving many stores must not
start every store's sweep in the same second), and a schedule made before offsets is brought up to date."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
)

from tempomem.activities.schedules import store_interval
from tempomem.messages.capture import SWEEP_WORKFLOW, SweepInput
from tempomem.worker import SWEEP_EVERY, ensure_sweep_schedule, schedule_id
from tests.conftest import make_store


def test_offsets_are_stable_per_store_and_spread_over_the_interval() -> None:
    ids = [f"{i:016x}" for i in range(100)]
    offsets = [store_interval(sid, SWEEP_EVERY).offset for sid in ids]
    assert offsets == [store_interval(sid, SWEEP_EVERY).offset for sid in ids]  # stable
    assert all(timedelta(0) <= o < SWEEP_EVERY for o in offsets if o is not None)
    # 100 stores over 60 seconds: no second holds more than a handful of their sweeps.
    per_second: dict[timedelta | None, int] = {}
    for o in offsets:
        per_second[o] = per_second.get(o, 0) + 1
    assert len(per_second) >= 40 and max(per_second.values()) <= 6


async def test_sweep_schedule_gets_the_store_offset_also_when_it_existed_without(
    client: Client, tmp_path: Path
) -> None:
    stores = [make_store(tmp_path / name, client, mode="lite") for name in ("a", "b")]
    contexts = [s.worker_context(client) for s in stores]
    old = contexts[1]
    await client.create_schedule(  # the shape made before offsets: every minute, at second 0
        schedule_id(old.store_id),
        Schedule(
            action=ScheduleActionStartWorkflow(
                SWEEP_WORKFLOW, SweepInput(store_id=old.store_id), id="x", task_queue=old.task_queue
            ),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=SWEEP_EVERY)]),
        ),
    )
    try:
        assert await ensure_sweep_schedule(client, contexts[0]) is True
        assert await ensure_sweep_schedule(client, old) is False
        for ctx in contexts:
            described = await client.get_schedule_handle(schedule_id(ctx.store_id)).describe()
            [interval] = described.schedule.spec.intervals
            want = store_interval(ctx.store_id, SWEEP_EVERY)
            assert (interval.every, interval.offset) == (want.every, want.offset)
    finally:
        for ctx in contexts:
            await client.get_schedule_handle(schedule_id(ctx.store_id)).delete()
