"""The liveness fence (AMB-02): an exclusive flock on ``<root>/.agent.lock`` held for the lifetime of the
store's worker. Operator commands that need a stopped agent try it without blocking and refuse."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from tempomem.storage.fsio import ensure_private_dir
from tempomem.storage.limits import FILE_MODE

FENCE_FILE = ".agent.lock"


class AgentRunningError(Exception):
    """The store's agent/worker holds the fence; stop it first."""


@contextlib.contextmanager
def hold_fence(root: Path, *, what: str = "operator command") -> Iterator[None]:
    """Hold the fence for the block, or raise ``AgentRunningError`` at once if someone else holds it."""
    ensure_private_dir(Path(root))
    fd = os.open(Path(root) / FENCE_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AgentRunningError(
                f"the agent or worker of {root} is running; stop it before this {what}"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def fence_is_held(root: Path) -> bool:
    """True when an agent or worker holds the fence right now (a probe, not a reservation)."""
    try:
        with hold_fence(root):
            return False
    except AgentRunningError:
        return True
