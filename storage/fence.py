"""The liveness fence (AMB-02): an exclusive flock on ``<root>/.agent.lock`` held for the lifetime of the
store's worker. Operator commands that need a stopped agent try it without blocking and refuse."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tempomem.storage.fsio import atomic_write, ensure_private_dir, exclusive_lock, fsync_dir

FENCE_FILE = ".agent.lock"


class AgentRunningError(Exception):
    """The store's agent/worker holds the fence; stop it first."""


@contextlib.contextmanager
def hold_fence(root: Path, *, what: str = "operator command") -> Iterator[None]:
    """Hold the fence for the block, or raise ``AgentRunningError`` at once if someone else holds it."""
    ensure_private_dir(Path(root))
    lock = contextlib.ExitStack()
    try:
        lock.enter_context(exclusive_lock(Path(root) / FENCE_FILE, blocking=False))
    except BlockingIOError:
        raise AgentRunningError(
            f"the agent or worker of {root} is running; stop it before this {what}"
        ) from None
    with lock:
        yield


def fence_is_held(root: Path) -> bool:
    """True when an agent or worker holds the fence right now (a probe, not a reservation)."""
    try:
        with hold_fence(root):
            return False
    except AgentRunningError:
        return True


# RPL-17: between adopt-replay and the rebuild that must follow it the service must not start. Adoption
# writes this marker (before the sidecar, so a kill in between still blocks a start); a worker refuses to
# start while it exists; only a completed rebuild removes it.
REBUILD_REQUIRED_FILE = ".rebuild-required"


class RebuildRequiredError(Exception):
    """adopt-replay ran and no rebuild has completed since: run ``tempomem rebuild`` before the worker."""


def mark_rebuild_required(root: Path) -> None:
    atomic_write(Path(root) / REBUILD_REQUIRED_FILE, b"adopt-replay\n")


def rebuild_required(root: Path) -> bool:
    return os.path.lexists(Path(root) / REBUILD_REQUIRED_FILE)


def clear_rebuild_required(root: Path) -> None:
    path = Path(root) / REBUILD_REQUIRED_FILE
    if os.path.lexists(path):
        path.unlink()
        fsync_dir(Path(root))


def refuse_start_before_rebuild(root: Path) -> None:
    if rebuild_required(root):
        raise RebuildRequiredError(
            f"adopt-replay ran on {root} and no rebuild has completed since: "
            "run tempomem rebuild before starting the worker (RPL-17)"
        )
