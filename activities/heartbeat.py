"""Run blocking store work in a thread while heartbeating, so a dead worker is noticed in seconds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")
HEARTBEAT_EVERY_SECONDS = 2.0


async def run_blocking(fn: Callable[[], T]) -> T:
    task = asyncio.ensure_future(asyncio.to_thread(fn))
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS)
        if done:
            return task.result()
        activity.heartbeat()
