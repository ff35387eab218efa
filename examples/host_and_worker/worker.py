"""The worker role: tempomem's workflows and activities on *your* Temporal client.

Run it on the host whose disk holds the store (beside the agent host):

    TEMPORAL_ADDRESS=localhost:7233 python examples/host_and_worker/worker.py

The client is yours: namespace, TLS, API key, interceptors and data converter are whatever your team
uses (here: Temporal's environment configuration, as every Temporal tool reads it).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

from tempomem import MemoryStore, load_config
from tempomem.worker import run_worker

# $TEMPOMEM_CONFIG, else the file beside this one (the host reads the same).
CONFIG = Path(os.environ.get("TEMPOMEM_CONFIG") or Path(__file__).with_name("tempomem.json"))


async def main() -> None:
    client = await Client.connect(**ClientConfig.load_client_connect_config())
    store = MemoryStore(load_config(CONFIG), client=client)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"worker: store {store.store_id} on task queue {store.task_queue}", flush=True)
    await run_worker(client, store.worker_context(client), stop=stop)  # sweeps, schedules, drains on stop
    print("worker: stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
