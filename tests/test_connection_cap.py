"""One process keeps at most ``KEEP_MAX`` DuckDB connections and as many writer anchors, whatever the
number of stores it touches (issue #16 item 5: a worker serving 100 stores must not hold 100 open
databases, ~6-15 MB each); the least recently used makes room and stays correct to reopen."""

from __future__ import annotations

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
