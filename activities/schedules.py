"""Per-store Temporal Schedules (sweep, consolidation): spread over their interval, kept up to date.

Why the spread: schedules with the same interval and no offset all fire at the same instant, so a worker
serving a hundred stores started a hundred sweeps in the same second every minute, and the turns
admitted in that second waited behind them (issue #16: the p95 admission-to-curated latency). Each store's
offset inside the interval comes from its id, so it is stable across restarts and hosts.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)


def store_interval(store_id: str, every: timedelta) -> ScheduleIntervalSpec:
    """Every ``every``, at this store's own offset inside it (whole seconds, from its id)."""
    seconds = max(1, int(every.total_seconds()))
    offset = int.from_bytes(hashlib.sha256(store_id.encode()).digest()[:8], "big") % seconds
    return ScheduleIntervalSpec(every=every, offset=timedelta(seconds=offset))


def _intervals(schedule: Schedule) -> list[tuple[timedelta, timedelta]]:
    return [(i.every, i.offset or timedelta(0)) for i in schedule.spec.intervals]


async def ensure_schedule(client: Client, schedule_id: str, schedule: Schedule) -> bool:
    """Create ``schedule``. True when created now; an existing one keeps running, its intervals updated
    when they differ (a new interval, or the offset a schedule made before offsets lacks)."""
    try:
        await client.create_schedule(schedule_id, schedule)
    except ScheduleAlreadyRunningError:

        def update(current: ScheduleUpdateInput) -> ScheduleUpdate | None:
            if _intervals(current.description.schedule) == _intervals(schedule):
                return None
            return ScheduleUpdate(schedule=schedule)

        await client.get_schedule_handle(schedule_id).update(update)
        return False
    return True
