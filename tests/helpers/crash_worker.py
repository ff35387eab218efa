"""A capture worker process that SIGKILLs itself right after one commit boundary.

Usage: python -m tests.helpers.crash_worker ROOT ADDRESS TASK_QUEUE MODEL_URL STEP
STEP is one of the names passed to ``capture.commit.commit_step``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

import tempomem.capture.commit as commit
from tempomem.activities.context import StoreContext
from tempomem.capture.settings import CaptureSettings
from tempomem.recall.embedding import LocalMiniLMEmbedder
from tempomem.worker import store_activities
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow


async def main() -> None:
    root, address, queue, model_url, step = sys.argv[1:6]

    def crash_at(name: str) -> None:
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    commit.commit_step = crash_at
    ctx = StoreContext(
        root=Path(root),
        tier="bujo",
        write_mode="capture",
        task_queue=queue,
        embedder=LocalMiniLMEmbedder(),
        capture=CaptureSettings(llm_provider="ollama", llm_model="scripted", llm_endpoint=model_url),
    )
    client = await Client.connect(address)
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[CaptureWorkflow, IntakeSweepWorkflow],
            activities=store_activities(ctx),
            activity_executor=executor,
            max_concurrent_activities=1,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        print("READY", flush=True)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
