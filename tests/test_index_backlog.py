"""The index's group commit for batch runs (issue #15 item 2): lines deferred by a backfill's captures
reach the index in one upsert, a durable marker per day covers a crash between the Markdown write and
the flush, and a failed flush removes nothing. Real Markdown files and a real DuckDB index."""

from __future__ import annotations

import contextlib
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tempomem.recall.index import MemoryIndex
from tempomem.storage.fsio import UnsafePathError
from tempomem.storage.health import audit
from tempomem.storage.index_backlog import IndexBacklog
from tempomem.storage.intake_records import build_payload
from tempomem.storage.limits import INDEX_GROUP_MAX_LINES
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.projection import project
from tempomem.storage.turn import CompletedTurn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def line(root: Path, i: int, *, days: int = 0):  # -> (day, bullet), written to Markdown like a projection
    turn = CompletedTurn(
        run_id=f"grp-{i}",
        conversation_id="import:grp",
        speaker_kind="human-turn",
        user_text=f"question {i}",
        final_answer=f"The greenhouse note number {i} mentions basil{i}.",
        admitted_at=T0 + timedelta(days=days, minutes=i),
    )
    projected = project(root, build_payload(turn, write_mode="append-host-summary", tier="lite"))
    return projected.day, projected.bullet


def indexed_ids(root: Path) -> set[str]:
    return {h.id for h in MemoryIndex(root, None).search("greenhouse note", limit=100)}


def test_deferred_lines_are_indexed_together_at_the_flush_and_their_markers_removed(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    MemoryIndex(tmp_path, None).rebuild()  # an empty, current index
    items = [line(tmp_path, i, days=i % 2) for i in range(5)]
    for day, bullet in items:
        backlog.add(day, bullet)
    # Durable markers, owner-only, one per day; nothing indexed yet (the group has not been flushed).
    assert backlog.marked_days() == ["2026-12-01", "2026-12-02"]
    assert stat.S_IMODE(os.stat(backlog.folder).st_mode) == 0o700
    assert {stat.S_IMODE(os.stat(backlog.folder / d).st_mode) for d in backlog.marked_days()} == {0o600}
    assert indexed_ids(tmp_path) == set()
    assert backlog.pending_lines() == 5
    assert backlog.flush(MemoryIndex(tmp_path, None)) == 5
    assert indexed_ids(tmp_path) == {b.id for _, b in items}
    assert (backlog.marked_days(), backlog.pending_lines()) == ([], 0)
    assert backlog.flush(MemoryIndex(tmp_path, None)) == 0  # nothing left: a no-op


def test_a_group_is_due_when_full(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    assert not backlog.due()
    for i in range(INDEX_GROUP_MAX_LINES - 1):
        backlog.add(*line(tmp_path, i))
    assert not backlog.due()
    backlog.add(*line(tmp_path, INDEX_GROUP_MAX_LINES))
    assert backlog.due()


def test_a_marker_left_by_a_crashed_process_makes_the_flush_index_its_whole_day(tmp_path: Path) -> None:
    crashed = IndexBacklog(tmp_path)  # lines deferred by a process that then died before its flush
    lost = [line(tmp_path, i) for i in range(3)]
    for day, bullet in lost:
        crashed.add(day, bullet)
    del crashed
    restarted = IndexBacklog(tmp_path)
    fresh = line(tmp_path, 7)
    restarted.add(*fresh)  # same day: the marker exists and stays foreign to this process
    assert restarted.marked_days() == ["2026-12-01"]
    assert restarted.flush(MemoryIndex(tmp_path, None)) == 4
    assert indexed_ids(tmp_path) == {b.id for _, b in [*lost, fresh]}
    assert restarted.marked_days() == []


def test_a_failed_flush_removes_no_marker_and_the_next_one_catches_up(tmp_path: Path) -> None:
    crashed = IndexBacklog(tmp_path)
    crashed.add(*line(tmp_path, 1))
    day_file = tmp_path / "daily" / "2026-12-01.md"
    saved = day_file.read_bytes()
    day_file.unlink()
    day_file.mkdir()  # a hand-made mess: the day's file is now a folder
    restarted = IndexBacklog(tmp_path)
    with pytest.raises(UnsafePathError, match="not a regular file"):
        restarted.flush(MemoryIndex(tmp_path, None))
    assert restarted.marked_days() == ["2026-12-01"]
    day_file.rmdir()
    day_file.write_bytes(saved)
    assert restarted.flush(MemoryIndex(tmp_path, None)) == 1
    assert indexed_ids(tmp_path) == {b.id for _, b in iter_bullets(tmp_path, "daily")}
    assert restarted.marked_days() == []


def test_an_invalid_day_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    _, bullet = line(tmp_path, 1)
    with pytest.raises(ValueError, match="invalid day"):
        backlog.add("../../etc", bullet)
    assert not backlog.folder.exists() and backlog.pending_lines() == 0


def test_health_counts_the_days_awaiting_the_flush_and_calls_the_store_in_progress(tmp_path: Path) -> None:
    MemoryIndex(tmp_path, None).rebuild()
    backlog = IndexBacklog(tmp_path)
    backlog.add(*line(tmp_path, 1))
    report = audit(tmp_path, now=T0)
    assert (report.status, report.index_backlog_days, report.problems) == ("in_progress", 1, [])
    backlog.flush(MemoryIndex(tmp_path, None))
    report = audit(tmp_path, now=T0)
    assert (report.status, report.index_backlog_days) == ("ok", 0)


def test_lines_of_a_day_the_index_already_holds_are_not_upserted_again(tmp_path: Path) -> None:
    """This process's own marker means only its pending lines are new: the day is not re-read."""
    line(tmp_path, 0)
    MemoryIndex(tmp_path, None).rebuild()  # line 0 is indexed
    backlog = IndexBacklog(tmp_path)
    backlog.add(*line(tmp_path, 1))
    assert backlog.flush(MemoryIndex(tmp_path, None)) == 1
    assert len(indexed_ids(tmp_path)) == 2


def test_lines_whose_marker_another_process_removed_are_still_flushed(tmp_path: Path) -> None:
    """Another process's flush may take our marker (it saw it as foreign); our lines still go in."""
    backlog = IndexBacklog(tmp_path)
    day, bullet = line(tmp_path, 1)
    backlog.add(day, bullet)
    (backlog.folder / day).unlink()
    assert backlog.flush(MemoryIndex(tmp_path, None)) == 1
    assert indexed_ids(tmp_path) == {bullet.id}
    assert backlog.pending_lines() == 0 and not backlog.due()


def test_a_marker_for_a_day_without_lines_is_removed(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    backlog.folder.mkdir(parents=True, mode=0o700)
    (backlog.folder / "2026-11-30").touch(mode=0o600)  # a crash after the marker, before the Markdown
    assert backlog.flush(MemoryIndex(tmp_path, None)) == 0
    assert backlog.marked_days() == []


class RacingIndex(MemoryIndex):
    """A real index; while it upserts, another process's flush removes the day's marker."""

    def upsert(self, items):  # type: ignore[no-untyped-def]
        for day, _ in items:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / "index" / "backlog" / day)
        return super().upsert(items)


def test_a_marker_removed_during_the_flush_is_not_an_error(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    day, bullet = line(tmp_path, 1)
    backlog.add(day, bullet)
    assert backlog.flush(RacingIndex(tmp_path, None)) == 1
    assert indexed_ids(tmp_path) == {bullet.id} and backlog.marked_days() == []


def test_the_next_group_waits_from_its_own_first_line(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    backlog.add(*line(tmp_path, 1))
    backlog.flush(MemoryIndex(tmp_path, None))
    backlog.add(*line(tmp_path, 2))
    assert not backlog.due()  # one fresh line: neither full nor old
    assert backlog.pending_lines() == 1


def test_a_symlink_in_place_of_a_marker_is_refused_and_never_followed(tmp_path: Path) -> None:
    backlog = IndexBacklog(tmp_path)
    day, bullet = line(tmp_path, 1)
    backlog.folder.mkdir(parents=True, mode=0o700)
    outside = tmp_path / "outside"
    (backlog.folder / day).symlink_to(outside)  # dangling: the marker looks absent
    with pytest.raises(FileExistsError):
        backlog.add(day, bullet)
    assert not outside.exists() and backlog.pending_lines() == 0
