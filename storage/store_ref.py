"""Stable, content-free names of a memory root: its store id and its Temporal task queue."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

STORE_LOCK = ".store.lock"


def store_id(root: Path) -> str:
    """16 hex characters of sha256(realpath(root)): the only store reference that enters Temporal."""
    return hashlib.sha256(os.path.realpath(root).encode("utf-8")).hexdigest()[:16]


def task_queue(root: Path) -> str:
    """One task queue per memory root, so one worker host owns each store (ARCHITECTURE.md §5)."""
    return f"tempomem-{store_id(root)}"
