"""The ``memories`` rows of one database state, held per process, so a search takes its candidates' rows
from memory instead of a DuckDB ``id IN (…)`` scan (10-25 ms at 100k rows; a take here is < 1 ms).

A snapshot is keyed like the BM25 snapshot (``recall.fts``): file identity + watermark + rows + digest,
which every writer changes in the transaction that changes the rows. Another process's write moves the
key, so the next search reloads (about 0.15 s at 100k rows); this process's own upserts patch it instead
(``patch``): the changed rows, read back from DuckDB so their values are exactly what a reload reads,
go into an overlay and removed ids are masked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from tempomem.recall.state_cache import StateCache

Row = tuple[object, ...]


class RowSnapshot:
    def __init__(self, table: pa.Table, columns: Sequence[str]) -> None:
        self.columns = tuple(columns)
        self.table = table
        self.position = {rid: i for i, rid in enumerate(table.column("id").to_pylist())}
        self.overlay: dict[str, Row | None] = {}  # id -> row written since the load, or None (removed)

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection, columns: Sequence[str]) -> RowSnapshot:
        return cls(con.execute(f"SELECT {', '.join(columns)} FROM memories").to_arrow_table(), columns)

    def _take(self, positions: list[int]) -> list[Row]:
        if not positions:
            return []
        sub = self.table.take(positions)
        return list(zip(*(sub.column(c).to_pylist() for c in self.columns), strict=True))

    def rows(self, ids: Iterable[str], *, newer_than: int) -> list[Row]:
        """Rows of ``ids`` plus every row whose seq is above ``newer_than`` (the FTS watermark), as the
        two selections of ``MemoryIndex._gather`` return them (a row may come twice)."""
        out: list[Row] = []
        positions: list[int] = []
        for rid in ids:
            if rid in self.overlay:
                row = self.overlay[rid]
                if row is not None:
                    out.append(row)
            elif (i := self.position.get(rid)) is not None:
                positions.append(i)
        out += self._take(positions)
        seq_at = self.columns.index("seq")
        tail = pc.indices_nonzero(pc.greater(self.table.column("seq"), newer_than)).to_pylist()
        out += [r for r in self._take(tail) if r[0] not in self.overlay]
        out += [r for r in self.overlay.values() if r is not None and int(r[seq_at]) > newer_than]  # type: ignore[call-overload]
        return out

    def at_seqs(self, seqs: Sequence[int]) -> list[Row]:
        """The rows whose seq is one of ``seqs`` (a row written since the load replaces its old copy)."""
        if not seqs:
            return []
        wanted = set(seqs)
        seq_at = self.columns.index("seq")
        hits = pc.indices_nonzero(pc.is_in(self.table.column("seq"), pa.array(sorted(wanted), pa.int64())))
        out = [r for r in self._take(hits.to_pylist()) if r[0] not in self.overlay]
        out += [r for r in self.overlay.values() if r is not None and r[seq_at] in wanted]
        return out

    def patched(self, written: Sequence[Row], removed: Iterable[str]) -> RowSnapshot:
        new = object.__new__(RowSnapshot)
        new.columns, new.table, new.position = self.columns, self.table, self.position
        new.overlay = dict(self.overlay)
        for rid in removed:
            new.overlay[rid] = None
        for row in written:
            new.overlay[str(row[0])] = row
        return new


_SNAPSHOTS: StateCache[RowSnapshot] = StateCache()


def snapshot(
    db: str, key: tuple[object, ...], con: duckdb.DuckDBPyConnection, columns: Sequence[str]
) -> RowSnapshot:
    """The cached rows of ``db`` for state ``key`` (loaded from ``con`` when the state moved)."""
    return _SNAPSHOTS.get(db, key, lambda: RowSnapshot.load(con, columns))


def cached(db: str, key: tuple[object, ...]) -> RowSnapshot | None:
    """The rows of ``db`` for state ``key`` if this process holds them (no database needed)."""
    return _SNAPSHOTS.peek(db, key)


def patch(
    db: str, before: tuple[object, ...], after: tuple[object, ...], written: Sequence[Row], removed: list[str]
) -> None:
    """After this process's own committed write: move a snapshot of state ``before`` to ``after``."""
    _SNAPSHOTS.patch(db, before, after, lambda snap: snap.patched(written, removed))
