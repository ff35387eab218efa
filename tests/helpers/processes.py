"""Killing a real worker process at a chosen moment (durability is proven by SIGKILL, not by a stop)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable


async def kill_when(
    proc: asyncio.subprocess.Process, ready: Callable[[], bool], *, timeout: float, step: float = 0.2
) -> None:
    """SIGKILL ``proc`` (no drain, no cleanup) as soon as ``ready()`` holds; fail if it never does. The
    process is gone when this returns, whatever happened."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError("the moment to kill never came")
            if proc.returncode is not None:
                raise AssertionError(f"the process ended by itself (rc {proc.returncode}) before the kill")
            await asyncio.sleep(step)
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
