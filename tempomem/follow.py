"""Follow a long workflow from the CLI: poll its content-free ``progress`` query until it ends.

Shared by ``tempomem backfill`` and ``tempomem recurate``; the query follows continue-as-new runs
because the handle names the workflow id, not a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import IO, Any, TypeVar

from temporalio.client import Client

T = TypeVar("T")


async def follow_workflow(
    client: Client,
    workflow_id: str,
    *,
    query: str,
    result_type: type[T],
    on_progress: Callable[[T], None] | None = None,
    poll_interval: float = 0.5,
) -> T:
    """Feed ``on_progress`` with ``query`` snapshots every ``poll_interval`` s, then with the result."""
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(workflow_id, result_type=result_type)
    result = asyncio.ensure_future(handle.result())
    try:
        while not result.done():
            if on_progress is not None:
                # A query can miss between runs (continue-as-new) or before the first task: skip it.
                with contextlib.suppress(RPCError, WorkflowQueryFailedError):
                    on_progress(await handle.query(query, result_type=result_type))
            await asyncio.wait({result}, timeout=poll_interval)
        final = result.result()
    finally:
        if not result.done():
            result.cancel()
    if on_progress is not None:
        on_progress(final)
    return final


class TurnBar:
    """A tqdm bar over turns with a one-line postfix of counts (stderr by default)."""

    def __init__(self, *, total: int | None, desc: str | None = None, stream: IO[str] | None = None) -> None:
        from tqdm import tqdm

        self.bar: Any = tqdm(
            total=total, unit="turn", desc=desc, file=stream or sys.stderr, dynamic_ncols=True, leave=True
        )

    def show(self, done: int, total: int | None, postfix: str) -> None:
        if total and self.bar.total != total:
            self.bar.total = total
        self.bar.n = done
        self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
