"""One in-memory copy per index folder, valid for one database state (``MemoryIndex``'s state key).

Used by the BM25 postings (``recall.fts``) and the row copy (``recall.row_snapshot``): a search takes the
copy whose key matches the database it reads, or loads a new one (replacing the folder's older
generation); this process's own committed write moves the copy from the state before to the state after
(``patch``) instead of dropping it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
Key = tuple[object, ...]


class StateCache(Generic[T]):
    def __init__(self) -> None:
        self.items: dict[str, tuple[Key, T]] = {}  # database path → (state key, copy)
        self._lock = threading.Lock()

    def peek(self, db: str, key: Key) -> T | None:
        """The copy of ``db`` at state ``key`` if one is held, without loading anything."""
        with self._lock:
            cached = self.items.get(db)
        return cached[1] if cached is not None and cached[0] == key else None

    def get(self, db: str, key: Key, load: Callable[[], T]) -> T:
        """The copy of ``db`` at state ``key``, loaded (outside the lock) when the state moved."""
        with self._lock:
            cached = self.items.get(db)
            if cached is not None and cached[0] == key:
                return cached[1]
        value = load()
        with self._lock:
            folder = os.path.dirname(os.path.dirname(db))
            for other in [k for k in self.items if os.path.dirname(os.path.dirname(k)) == folder]:
                del self.items[other]  # one generation per index folder
            self.items[db] = (key, value)
        return value

    def patch(self, db: str, before: Key, after: Key, move: Callable[[T], T | None]) -> None:
        """Move the copy of state ``before`` to ``after`` with ``move`` (None: forget it)."""
        with self._lock:
            cached = self.items.pop(db, None)
        if cached is None or cached[0] != before:
            return
        value = move(cached[1])
        if value is not None:
            with self._lock:
                self.items.setdefault(db, (after, value))
