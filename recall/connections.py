"""A per-process cache of read-only DuckDB connections that never keeps a writer waiting for long.

Why: opening ``fts.duckdb`` costs 15-50 ms per call, more than a whole search should take. Why it is
safe: DuckDB takes a shared file lock for a read-only connection and an exclusive one for a writer, so
while a cached connection is open nobody can change the file under it; and it cannot block a writer for
long, because

* a cached connection is closed once it has been idle for ``IDLE_SECONDS``, or within ``POLL_SECONDS``
  once a writer of another process announces on ``.want`` that it waits for the file (a poller thread);
* ``MemoryIndex`` takes a cached connection only after the ``.gate`` turnstile let it pass without
  waiting. A writer holds ``.gate`` exclusively while it waits for the DuckDB lock, so a reader that
  finds the gate taken first closes its cached connections (``drop``) and only then waits;
* a writer in this process drops the cached connection before opening read-write (DuckDB refuses two
  configurations of one file in one process).

A connection is used by one caller at a time; a concurrent caller gets ``None`` and opens its own. After
``fork`` the child forgets the parent's connections without touching them.

**Writer anchors.** The process that writes (the worker) also keeps its last read-write connection open
as an *anchor* for ``ANCHOR_IDLE_SECONDS``. While it is open, DuckDB's instance cache hands every further
``duckdb.connect`` of the same file and configuration the already-open database (WAL replayed, FTS
loaded) in well under a millisecond instead of 15-50 ms, for reads and writes alike. An anchor holds
DuckDB's exclusive file lock, so another process that finds the file locked holds a shared ``flock`` on
``<index>/.want`` while it retries (``waiting``); a poller closes any anchor whose ``.want`` is taken
within ``POLL_SECONDS``, and an idle anchor closes by itself.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

# Long idles are safe because a process that waits for the file says so on ``.want`` and the poller lets
# go within POLL_SECONDS; they keep a worker's or an agent host's index warm between turns.
IDLE_SECONDS = 10.0
ANCHOR_IDLE_SECONDS = 10.0
# At most this many kept connections (and, apart, anchors) per process, least recently used closed
# first: each is an open DuckDB database (~5-15 MB), and one worker process may serve hundreds of
# stores (issue #16), so what is kept must not grow with the number of stores.
KEEP_MAX = 16
POLL_SECONDS = 0.05
WANT_NAME = ".want"


@dataclass
class _Entry:
    con: duckdb.DuckDBPyConnection
    identity: tuple[int, ...]
    last_used: float
    want: Path
    in_use: bool = False


_LOCK = threading.Lock()
_ENTRIES: dict[str, _Entry] = {}
_PID = os.getpid()
_DOOMED: set[int] = set()  # id() of connections dropped while in use: close them on release


@dataclass
class _Anchor:
    con: duckdb.DuckDBPyConnection
    config: dict[str, object]
    want: Path
    last_used: float


_ANCHORS: dict[str, _Anchor] = {}
_POLLER: threading.Thread | None = None
# Held by the poller while it closes connections: at exit, ``_close_all`` waits on it, so no connection is
# still being closed from the daemon thread while the interpreter finalises (a C++ abort, seen in CI).
_CLOSING = threading.Lock()
_SHUTDOWN = False


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
    global _PID, _CLOSING
    if os.getpid() != _PID:
        _ENTRIES.clear()  # the parent's connections are not ours to close
        _ANCHORS.clear()
        _DOOMED.clear()
        _CLOSING = threading.Lock()  # the parent's poller may have held it at the fork
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
    evicted: duckdb.DuckDBPyConnection | None = None
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
            evicted = _evict_idle(_ENTRIES) if len(_ENTRIES) >= KEEP_MAX else None
            if len(_ENTRIES) < KEEP_MAX:
                # ``<index>/gen-N/fts.duckdb`` → ``<index>/.want``
                _ENTRIES[key] = _Entry(con, ident, time.monotonic(), Path(db).parent.parent / WANT_NAME)
                keep = True
        if keep:
            _ensure_poller()
    if not keep:
        con.close()
    if evicted is not None:
        evicted.close()


def _evict_idle(entries: dict[str, _Entry]) -> duckdb.DuckDBPyConnection | None:
    """Remove the least recently used idle entry (caller holds ``_LOCK``); its connection, to close."""
    idle = [(e.last_used, k) for k, e in entries.items() if not e.in_use]
    if not idle:
        return None
    return entries.pop(min(idle)[1]).con


def drop(under: Path, *, anchors: bool = True) -> None:
    """Close every idle cached connection to a file under ``under``; one in use is closed on release.
    ``anchors=False`` keeps this process's writer anchors (a writer about to use one)."""
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
        if anchors:
            for key in list(_ANCHORS):
                if key == prefix or key.startswith(prefix + os.sep):
                    closing.append(_ANCHORS.pop(key).con)
    for con in closing:
        con.close()


def _wanted(want: Path) -> bool:
    """True while another process holds ``want`` (it waits for our file lock)."""
    try:
        fd = os.open(want, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also lets go of our probe lock


class Announcement:
    """A shared ``flock`` on ``<index>/.want``, held from a process's first wait for the index until it
    has its connection (``withdraw``): pollers elsewhere close their kept connections while it is held,
    and a writer lets the announcer in before it takes the gate again (``let_waiters_in``)."""

    def __init__(self, want: Path) -> None:
        self._want = want
        self._fd: int | None = None

    def announce(self) -> None:
        if self._fd is not None:
            return
        try:
            fd = os.open(self._want, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return  # a read-only or foreign folder: wait without announcing
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._fd = fd

    def withdraw(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Announcement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.withdraw()


def let_waiters_in(want: Path, timeout: float) -> None:
    """Before a writer takes the gate: if another reader or process announced on ``want`` that it
    waits, close this process's kept connections under that index and give it up to ``timeout`` to
    get in. Why: a writer in a loop would otherwise retake the gate and its anchor every few
    milliseconds and starve every other process (seen in CI)."""
    if not _wanted(want):
        return
    drop(want.parent)
    deadline = time.monotonic() + timeout
    delay = 0.001
    while _wanted(want) and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def anchored(db: Path) -> dict[str, object] | None:
    """The configuration of this process's open writer anchor on ``db`` (to connect with), or None.
    Closes the anchor instead when another process is waiting for the file."""
    key = str(db)
    with _LOCK:
        _forget_after_fork()
        anchor = _ANCHORS.get(key)
        if anchor is None:
            return None
        if not _wanted(anchor.want):
            anchor.last_used = time.monotonic()
            return anchor.config
        del _ANCHORS[key]
    anchor.con.close()
    return None


def keep_anchor(db: Path, con: duckdb.DuckDBPyConnection, config: dict[str, object], want: Path) -> None:
    """Keep ``con`` (read-write, just used) open as the anchor of ``db``; closes a previous one."""
    key = str(db)
    with _LOCK:
        _forget_after_fork()
        old = _ANCHORS.pop(key, None)
        evicted = []
        while len(_ANCHORS) >= KEEP_MAX:  # the least recently used anchor makes room
            evicted.append(_ANCHORS.pop(min(_ANCHORS, key=lambda k: _ANCHORS[k].last_used)).con)
        _ANCHORS[key] = _Anchor(con, dict(config), want, time.monotonic())
        _ensure_poller()
    if old is not None and old.con is not con:
        old.con.close()
    for stale in evicted:
        stale.close()


def kept() -> tuple[int, int]:
    """How many read-only connections and writer anchors this process keeps open now (for status)."""
    with _LOCK:
        _forget_after_fork()
        return len(_ENTRIES), len(_ANCHORS)


def _ensure_poller() -> None:
    """Start the poller if it is not running (caller holds ``_LOCK``)."""
    global _POLLER
    if _POLLER is None or not _POLLER.is_alive():
        _POLLER = threading.Thread(target=_poll, name="duckdb-connections", daemon=True)
        _POLLER.start()


def _poll() -> None:
    """Close kept connections that are idle or wanted by another process; ends when none is left."""
    global _POLLER
    while True:
        time.sleep(POLL_SECONDS)
        closing = []
        with _LOCK:
            if os.getpid() != _PID or _SHUTDOWN:
                return
            now = time.monotonic()
            for key, anchor in list(_ANCHORS.items()):
                if now - anchor.last_used >= ANCHOR_IDLE_SECONDS or _wanted(anchor.want):
                    closing.append(_ANCHORS.pop(key).con)
            for key, entry in list(_ENTRIES.items()):
                if not entry.in_use and (now - entry.last_used >= IDLE_SECONDS or _wanted(entry.want)):
                    closing.append(_ENTRIES.pop(key).con)
            done = not _ANCHORS and not _ENTRIES
            if done:
                _POLLER = None
            _CLOSING.acquire()  # taken under _LOCK: _close_all cannot slip in between
        try:
            for con in closing:
                con.close()
        finally:
            _CLOSING.release()
        if done:
            return


@atexit.register
def _close_all() -> None:
    """Close every kept connection before the interpreter finalises: a connection closed later, from a
    daemon thread, would release DuckDB's GIL state in a dying interpreter (a fatal error at exit)."""
    global _POLLER, _SHUTDOWN
    with _LOCK:
        if os.getpid() != _PID:
            return
        _SHUTDOWN = True  # the poller stops at its next turn
        closing = [e.con for e in _ENTRIES.values()] + [a.con for a in _ANCHORS.values()]
        _ENTRIES.clear()
        _ANCHORS.clear()
        _POLLER = None
    with _CLOSING:  # wait for a close the poller has in flight
        for con in closing:
            with contextlib.suppress(Exception):
                con.close()
    # Free unreachable DuckDB objects (results, relations in reference cycles) while the interpreter is
    # whole: a database destroyed later, during finalisation, can abort the process (std::terminate).
    gc.collect()
