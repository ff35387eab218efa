"""One process keeps at most ``KEEP_MAX`` DuckDB connections and as many writer anchors, whatever the
number of stores it touches (issue #16 item 5: a worker serving 100 stores must not hold 100 open
databases, ~6-15 MB each); the least recently used makes room and stays correct to reopen."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from tempomem.recall import connections


def _db(tmp_path: Path, i: int) -> Path:
    index = tmp_path / f"store-{i}" / "index"
    gen = index / "gen-1"
    gen.mkdir(parents=True)
    db = gen / "fts.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t(x INTEGER)")
    con.execute("INSERT INTO t VALUES (?)", [i])
    con.close()
    return db


def test_read_only_connections_kept_are_capped_least_recent_first(tmp_path: Path) -> None:
    dbs = [_db(tmp_path, i) for i in range(connections.KEEP_MAX + 4)]
    try:
        for db in dbs:
            connections.release(db, duckdb.connect(str(db), read_only=True))
        assert connections.kept()[0] == connections.KEEP_MAX
        assert connections.acquire(dbs[0]) is None  # the oldest made room
        newest = connections.acquire(dbs[-1])
        assert newest is not None and newest.execute("SELECT x FROM t").fetchone() == (len(dbs) - 1,)
        connections.release(dbs[-1], newest)
    finally:
        connections.drop(tmp_path)
    assert connections.kept()[0] == 0


def test_writer_anchors_kept_are_capped(tmp_path: Path) -> None:
    dbs = [_db(tmp_path, i) for i in range(connections.KEEP_MAX + 3)]
    try:
        for db in dbs:
            con = duckdb.connect(str(db))
            connections.keep_anchor(db, con, {}, db.parent.parent / connections.WANT_NAME)
        assert connections.kept()[1] == connections.KEEP_MAX
        assert connections.anchored(dbs[0]) is None and connections.anchored(dbs[-1]) == {}
        # An evicted anchor was closed: another connection may open the file read-write again.
        again = duckdb.connect(str(dbs[0]))
        assert again.execute("SELECT x FROM t").fetchone() == (0,)
        again.close()
    finally:
        connections.drop(tmp_path)
    assert connections.kept()[1] == 0


def _poller_running() -> bool:
    return any(t.name == "duckdb-connections" and t.is_alive() for t in threading.enumerate())


def _until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_poller_closes_what_stayed_idle_and_then_ends(tmp_path: Path, monkeypatch) -> None:
    """A kept connection and an anchor are closed once idle for their idle time, not before; a
    connection in use is never closed under its user; with nothing left the poller thread ends."""
    monkeypatch.setattr(connections, "IDLE_SECONDS", 0.3)
    monkeypatch.setattr(connections, "ANCHOR_IDLE_SECONDS", 0.3)
    read, write, busy = (_db(tmp_path, i) for i in range(3))
    connections.drop(tmp_path.parents[1])  # what earlier tests left under pytest's temporary root
    try:
        connections.release(read, duckdb.connect(str(read), read_only=True))
        connections.release(busy, duckdb.connect(str(busy), read_only=True))
        in_use = connections.acquire(busy)
        assert in_use is not None
        connections.keep_anchor(write, duckdb.connect(str(write)), {}, write.parent.parent / ".want")
        assert connections.kept() == (2, 1) and _poller_running()
        assert _until(lambda: connections.kept() == (1, 0))  # the idle ones went; the busy one stays
        assert in_use.execute("SELECT x FROM t").fetchone() == (2,)
        connections.release(busy, in_use)
        assert _until(lambda: connections.kept() == (0, 0))
        assert _until(lambda: not _poller_running())
        # Closed for real: another connection opens the anchor's file read-write.
        again = duckdb.connect(str(write))
        again.close()
    finally:
        connections.drop(tmp_path)


def test_the_poller_lets_go_at_once_for_a_process_that_waits(tmp_path: Path) -> None:
    """With the default idle time (seconds), an announcement on ``.want`` closes the kept connection and
    the anchor within a few polls."""
    read, write = _db(tmp_path, 0), _db(tmp_path, 1)
    connections.drop(tmp_path.parents[1])
    try:
        connections.release(read, duckdb.connect(str(read), read_only=True))
        connections.keep_anchor(write, duckdb.connect(str(write)), {}, write.parent.parent / ".want")
        assert connections.kept() == (1, 1)
        with connections.Announcement(read.parent.parent / ".want") as first:
            first.announce()
            assert _until(lambda: connections.kept() == (0, 1), connections.IDLE_SECONDS / 4)
        with connections.Announcement(write.parent.parent / ".want") as second:
            second.announce()
            assert _until(lambda: connections.kept() == (0, 0), connections.IDLE_SECONDS / 4)
    finally:
        connections.drop(tmp_path)
