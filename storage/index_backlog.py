"""Group commit of the index for batch runs (issue #15 item 2).

A batch capture (a backfill's child) writes its line to canonical Markdown and leaves the index update
to its group: the line joins this process's pending list, and a durable, empty marker
``index/backlog/<day>`` says that day's Markdown may hold lines the index has not seen. A flush upserts
the pending lines in one transaction and then removes their markers. A marker this process did not
create (a crash left it, or another process) makes the flush upsert its whole day from Markdown.

What a crash can lose is unchanged: the Markdown line and the marker are durable before the record
resolves, and the index is derived from the Markdown. Callers hold the store lock (``STORE_LOCK``)
around ``add`` and ``flush``, so no projection lands between a flush's upsert and its marker removal.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tempomem.storage.fsio import ensure_private_dir, fsync_dir
from tempomem.storage.limits import FILE_MODE, INDEX_GROUP_MAX_LINES, INDEX_GROUP_MAX_SECONDS
from tempomem.storage.markdown import Bullet, is_day, iter_day_bullets

if TYPE_CHECKING:
    from tempomem.recall.index.query import MemoryIndex

BACKLOG_DIR = "backlog"


@dataclass
class IndexBacklog:
    """One store's deferred index updates in this process, and their durable markers."""

    root: Path
    _pending: dict[str, tuple[str, Bullet]] = field(default_factory=dict)  # bullet id -> (day, bullet)
    _mine: set[str] = field(default_factory=set)  # days whose marker this process created
    _oldest: float | None = None  # monotonic time the oldest pending line joined
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    @property
    def folder(self) -> Path:
        return self.root / "index" / BACKLOG_DIR

    def marked_days(self) -> list[str]:
        """Days with a marker on disk: their Markdown may be ahead of the index."""
        with contextlib.suppress(FileNotFoundError):
            return sorted(n for n in os.listdir(self.folder) if is_day(n))
        return []

    def add(self, day: str, bullet: Bullet) -> None:
        """Defer ``bullet``'s index update. Its marker is durable when this returns (caller holds the
        store lock, after the Markdown write and before the record resolves)."""
        if not is_day(day):
            raise ValueError(f"invalid day {day!r}, expected YYYY-MM-DD")
        with self._lock:
            if day not in self._mine:
                marker = self.folder / day
                if not marker.exists():
                    ensure_private_dir(self.folder)
                    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
                    os.close(fd)
                    fsync_dir(self.folder)
                    self._mine.add(day)
                # else: a marker left by a crash or another process; the flush upserts its whole day.
            self._pending[bullet.id] = (day, bullet)
            if self._oldest is None:
                self._oldest = time.monotonic()

    def due(self) -> bool:
        """Time to flush: a full group, or the oldest pending line has waited long enough."""
        with self._lock:
            if not self._pending:
                return False
            assert self._oldest is not None
            waited = time.monotonic() - self._oldest
            return len(self._pending) >= INDEX_GROUP_MAX_LINES or waited >= INDEX_GROUP_MAX_SECONDS

    def flush(self, index: MemoryIndex) -> int:
        """Upsert every pending line and every day a foreign marker names, in one upsert; then remove
        those markers. Returns the lines handed to the index. On failure nothing is removed: the next
        flush tries again."""
        with self._lock:
            marked = self.marked_days()
            foreign = [d for d in marked if d not in self._mine]
            items: dict[str, tuple[str, Bullet]] = dict(self._pending)
            for day in foreign:
                for bullet in iter_day_bullets(self.root, day):
                    items[bullet.id] = (day, bullet)
            if not items and not marked:
                return 0
            if items:
                index.upsert(list(items.values()))
            for day in marked:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.folder / day)
            if marked:
                fsync_dir(self.folder)
            self._pending.clear()  # add() waits on the lock, so nothing joined meanwhile
            self._mine.clear()
            self._oldest = None
            return len(items)

    def pending_lines(self) -> int:
        with self._lock:
            return len(self._pending)
