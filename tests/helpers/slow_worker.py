"""A worker process whose projection hangs after it starts, so a test can SIGKILL it mid-activity.

Usage: python -m tests.helpers.slow_worker ROOT ADDRESS TASK_QUEUE ENTERED_FILE
It registers the real workflows and activities, except that ``capture.project`` first touches
ENTERED_FILE and then sleeps while heartbeating (the test kills the process there).
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
from tempomem.worker import store_activities
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.common import PROJECT, ProjectionResult, RecordRef
from tempomem.workflows.sweep import IntakeSweepWorkflow


async def main() -> None:
    root, address, queue, entered = sys.argv[1:5]

    @activity.defn(name=PROJECT)
    async def hanging_project(ref: RecordRef) -> ProjectionResult:
        Path(entered).write_text(ref.intake_id)
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.5)

    ctx = StoreContext(root=Path(root), tier="lite", write_mode="append-host-summary", task_queue=queue)
    acts = [a for a in store_activities(ctx) if activity._Definition.from_callable(a).name != PROJECT]
    client = await Client.connect(address)
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[CaptureWorkflow, IntakeSweepWorkflow],
            activities=[*acts, hanging_project],
            activity_executor=executor,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        print("READY", flush=True)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
