"""A worker process whose settle step hangs after the attempt is counted, so a test can SIGKILL it there.

Usage: python -m tests.helpers.slow_worker ROOT ADDRESS TASK_QUEUE ENTERED_FILE
It registers the real workflows and activities, except that the local activity ``capture.settle``
counts the attempt as the real one does, then touches ENTERED_FILE and sleeps before projecting (the
test kills the process there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from tempomem.activities.context import StoreContext
from tempomem.activities.intake_ops import IntakeActivities
from tempomem.messages.capture import SETTLE, AttemptInfo, RecordRef, SettleInput
from tempomem.worker import store_activities
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow


async def main() -> None:
    root, address, queue, entered = sys.argv[1:5]

    ctx = StoreContext(root=Path(root), tier="lite", write_mode="append-host-summary", task_queue=queue)

    @activity.defn(name=SETTLE)
    async def hanging_settle(inp: SettleInput) -> AttemptInfo:
        await asyncio.to_thread(IntakeActivities(ctx).begin, RecordRef(inp.intake_id, inp.store_id))
        Path(entered).write_text(inp.intake_id)
        while True:
            await asyncio.sleep(0.5)

    acts = [a for a in store_activities(ctx) if activity._Definition.from_callable(a).name != SETTLE]
    client = await Client.connect(address)
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[CaptureWorkflow, IntakeSweepWorkflow],
            activities=[*acts, hanging_settle],
            activity_executor=executor,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        print("READY", flush=True)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
