"""Run blocking store work off the event loop while heartbeating, so a dead worker is noticed in seconds.

The work runs on a daemon thread, not the loop's default executor: a provider call that ignores
cancellation must not keep a stopping worker (or its process) from returning (INTAKE-16, INTAKE-17).
Whatever the abandoned thread still writes is atomic and idempotent, and the record stays pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")
HEARTBEAT_EVERY_SECONDS = 2.0


async def run_blocking(fn: Callable[[], T]) -> T:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop may be gone after an abandoned stop
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="tempomem-blocking", daemon=True).start()
    return await heartbeating(future)


async def heartbeating(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` (a model call, a thread's future) while heartbeating every 2 s.

    Stages have a 10 s heartbeat timeout so a dead worker is noticed fast; a slow but live model call
    (``memory.llm.timeoutMs`` defaults to 60 s) must therefore keep heartbeating while it waits.
    """
    future = asyncio.ensure_future(awaitable)
    # A local activity (capture.settle) has no heartbeat: the SDK keeps its workflow task alive instead.
    local = activity.in_activity() and activity.info().is_local
    try:
        while True:
            done, _ = await asyncio.wait({future}, timeout=HEARTBEAT_EVERY_SECONDS)
            if done:
                return future.result()
            if not local:
                activity.heartbeat()
    finally:
        if not future.done():
            future.cancel()
