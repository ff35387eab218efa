"""A per-process cache of read-only DuckDB connections that never keeps a writer waiting for long.

Why: opening ``fts.duckdb`` costs 15-50 ms per call, more than a whole search should take. Why it is
safe: DuckDB takes a shared file lock for a read-only connection and an exclusive one for a writer, so
while a cached connection is open nobody can change the file under it; and it cannot block a writer for
long, because

* a cached connection is closed once it has been idle for ``IDLE_SECONDS`` (a daemon timer);
* ``MemoryIndex`` takes a cached connection only after the ``.gate`` turnstile let it pass without
  waiting. A writer holds ``.gate`` exclusively while it waits for the DuckDB lock, so a reader that
  finds the gate taken first closes its cached connections (``drop``) and only then waits;
* a writer in this process drops the cached connection before opening read-write (DuckDB refuses two
  configurations of one file in one process).

A connection is used by one caller at a time; a concurrent caller gets ``None`` and opens its own. After
``fork`` the child forgets the parent's connections without touching them.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

IDLE_SECONDS = 0.25


@dataclass
class _Entry:
    con: duckdb.DuckDBPyConnection
    identity: tuple[int, ...]
    last_used: float
    in_use: bool = False


_LOCK = threading.Lock()
_ENTRIES: dict[str, _Entry] = {}
_PID = os.getpid()
_DOOMED: set[int] = set()  # id() of connections dropped while in use: close them on release


def identity(db: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(db)
    except FileNotFoundError:
        return None
    try:
        wal = os.stat(f"{db}.wal")
        wal_id: tuple[int, ...] = (wal.st_ino, wal.st_size, wal.st_mtime_ns)
    except FileNotFoundError:
        wal_id = ()
    return (st.st_ino, st.st_size, st.st_mtime_ns, *wal_id)


def _forget_after_fork() -> None:
    global _PID
    if os.getpid() != _PID:
        _ENTRIES.clear()  # the parent's connections are not ours to close
        _DOOMED.clear()
        _PID = os.getpid()


def acquire(db: Path) -> duckdb.DuckDBPyConnection | None:
    """The cached connection to ``db``, marked in use, or None (none cached, busy, or stale)."""
    key = str(db)
    stale: duckdb.DuckDBPyConnection | None = None
    with _LOCK:
        _forget_after_fork()
        entry = _ENTRIES.get(key)
        if entry is None or entry.in_use:
            return None
        if entry.identity != identity(db):
            stale = _ENTRIES.pop(key).con
        else:
            entry.in_use = True
            return entry.con
    stale.close()
    return None


def release(db: Path, con: duckdb.DuckDBPyConnection) -> None:
    """Give back (or offer for caching) a read-only connection to ``db``; closes it if not kept."""
    key = str(db)
    ident = identity(db)
    keep = False
    with _LOCK:
        _forget_after_fork()
        entry = _ENTRIES.get(key)
        if id(con) in _DOOMED:
            _DOOMED.discard(id(con))
        elif entry is not None and entry.con is con:
            entry.in_use = False
            entry.last_used = time.monotonic()
            keep = True
        elif entry is None and ident is not None:
            _ENTRIES[key] = _Entry(con, ident, time.monotonic())
            keep = True
    if not keep:
        con.close()
        return
    timer = threading.Timer(IDLE_SECONDS, _close_idle)
    timer.daemon = True
    timer.start()


def _close_idle() -> None:
    now = time.monotonic()
    closing = []
    with _LOCK:
        if os.getpid() != _PID:
            return
        for key, entry in list(_ENTRIES.items()):
            if not entry.in_use and now - entry.last_used >= IDLE_SECONDS * 0.9:
                closing.append(_ENTRIES.pop(key).con)
    for con in closing:
        con.close()


def drop(under: Path) -> None:
    """Close every idle cached connection to a file under ``under``; one in use is closed on release."""
    prefix = str(under)
    closing = []
    with _LOCK:
        _forget_after_fork()
        for key, entry in list(_ENTRIES.items()):
            if key == prefix or key.startswith(prefix + os.sep):
                del _ENTRIES[key]
                if entry.in_use:
                    _DOOMED.add(id(entry.con))
                else:
                    closing.append(entry.con)
    for con in closing:
        con.close()
