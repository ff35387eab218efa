"""The turn archive on its own (issue #6 item 2, AMB-20): exact bytes by admission day, idempotent
writes, conflicts refused, retention by whole days, and the resumable day-ordered listing that
re-curation pages through. Temporal-free; re-curation end to end is tests/test_recurate.py."""

from __future__ import annotations

import json
import stat
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from tempomem.storage.turn_archive import (
    ArchivedTurn,
    TurnArchive,
    TurnArchiveConflictError,
    TurnArchiveError,
)


def payload(admitted_at: str, text: str = "hello") -> bytes:
    return json.dumps({"admitted_at": admitted_at, "text": text}).encode()


def rid(n: int) -> str:
    return f"{n:064x}"


def stock(archive: TurnArchive) -> dict[str, str]:
    """Five turns over three days, deliberately stored out of order."""
    turns = {
        rid(5): "2026-12-03T08:00:00.000Z",
        rid(1): "2026-12-01T10:00:00.000Z",
        rid(2): "2026-12-01T09:00:00.000Z",
        rid(4): "2026-12-02T12:00:00.000Z",
        rid(3): "2026-12-01T10:00:00.000Z",  # same instant as rid(1): ordered by id
    }
    for record, at in turns.items():
        assert archive.store(record, at, payload(at)) == "written"
    return turns


def test_store_writes_exact_bytes_owner_only_and_is_idempotent(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    data = payload("2026-12-01T09:00:00.000Z")
    assert archive.store(rid(1), "2026-12-01T09:00:00.000Z", data) == "written"
    path = tmp_path / ".turn-archive" / "2026-12-01" / f"{rid(1)}.json"
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / ".turn-archive").stat().st_mode) == 0o700
    assert archive.store(rid(1), "2026-12-01T09:00:00.000Z", data) == "present"
    with pytest.raises(TurnArchiveConflictError, match=f"archived turn {rid(1)} exists with different bytes"):
        archive.store(rid(1), "2026-12-01T09:00:00.000Z", payload("2026-12-01T09:00:00.000Z", "other"))
    assert path.read_bytes() == data
    turn = ArchivedTurn(id=rid(1), admitted_at="2026-12-01T09:00:00.000Z", day="2026-12-01")
    assert archive.load(turn) == data


@pytest.mark.parametrize(
    ("record", "admitted_at"),
    [("x" * 64, "2026-12-01T09:00:00Z"), (rid(1)[:-1], "2026-12-01T09:00:00Z"), (rid(1), "yesterday")],
)
def test_store_refuses_a_bad_id_or_instant(tmp_path: Path, record: str, admitted_at: str) -> None:
    with pytest.raises(TurnArchiveError) as err:
        TurnArchive(tmp_path).store(record, admitted_at, b"{}")
    assert str(err.value) == "archive needs a 64-hex id and an ISO admission instant"
    assert not (tmp_path / ".turn-archive").exists()


def test_store_and_load_refuse_unsafe_files(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    at = "2026-12-01T09:00:00.000Z"
    archive.store(rid(1), at, payload(at))
    (tmp_path / ".turn-archive" / "2026-12-01").chmod(0o755)
    with pytest.raises(TurnArchiveError, match="expected 700"):
        archive.store(rid(2), at, payload(at))
    (tmp_path / ".turn-archive" / "2026-12-01").chmod(0o700)
    path = archive.path_for(rid(1), at)
    path.chmod(0o644)
    with pytest.raises(TurnArchiveError, match="expected 600"):
        archive.load(ArchivedTurn(id=rid(1), admitted_at=at, day="2026-12-01"))


def test_days_lists_only_day_folders_in_order(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    assert archive.days() == []
    stock(archive)
    (tmp_path / ".turn-archive" / "notes").mkdir()
    assert archive.days() == ["2026-12-01", "2026-12-02", "2026-12-03"]


def test_turns_are_ordered_by_instant_then_id_within_the_day_range(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    stock(archive)
    (tmp_path / ".turn-archive" / "2026-12-01" / "README").write_text("not a turn")
    every = archive.turns(since=date(2026, 1, 1))
    assert [t.id for t in every] == [rid(2), rid(1), rid(3), rid(4), rid(5)]
    assert every[0] == ArchivedTurn(id=rid(2), admitted_at="2026-12-01T09:00:00.000Z", day="2026-12-01")
    assert [t.id for t in archive.turns(since=date(2026, 12, 2))] == [rid(4), rid(5)]
    assert [t.id for t in archive.turns(since=date(2026, 12, 1), until=date(2026, 12, 1))] == [
        rid(2),
        rid(1),
        rid(3),
    ]
    assert [t.id for t in archive.turns(since=date(2026, 12, 2), until=date(2026, 12, 2))] == [rid(4)]
    assert archive.turns(since=date(2026, 12, 4)) == []


def test_turns_resume_after_a_cursor_and_stop_after_a_whole_day(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    stock(archive)
    after = ("2026-12-01T10:00:00.000Z", rid(1))
    assert [t.id for t in archive.turns(since=date(2026, 1, 1), after=after)] == [rid(3), rid(4), rid(5)]
    # The cursor's day is where reading starts, even when ``since`` is earlier: a bad file in an earlier
    # day is never read.
    bad = tmp_path / ".turn-archive" / "2026-12-01" / f"{rid(9)}.json"
    bad.write_bytes(b"not json")
    bad.chmod(0o600)
    later = archive.turns(since=date(2026, 1, 1), after=("2026-12-02T00:00:00.000Z", ""))
    assert [t.id for t in later] == [rid(4), rid(5)]
    # ``limit`` stops after the first whole day that reaches it.
    bad.unlink()
    assert [t.id for t in archive.turns(since=date(2026, 1, 1), limit=2)] == [rid(2), rid(1), rid(3)]
    assert [t.id for t in archive.turns(since=date(2026, 1, 1), limit=4)] == [rid(2), rid(1), rid(3), rid(4)]


def test_a_turn_in_the_wrong_day_folder_or_unreadable_is_refused(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    stock(archive)
    wrong = tmp_path / ".turn-archive" / "2026-12-02" / f"{rid(9)}.json"
    wrong.write_bytes(payload("2026-12-01T09:00:00.000Z"))
    wrong.chmod(0o600)
    with pytest.raises(TurnArchiveError, match=f"archived turn {rid(9)}.json is in the wrong day folder"):
        archive.turns(since=date(2026, 1, 1))
    wrong.write_bytes(b"not json")
    with pytest.raises(TurnArchiveError, match="is unreadable"):
        archive.turns(since=date(2026, 1, 1))
    wrong.write_bytes(b"[1, 2]")
    with pytest.raises(TurnArchiveError, match="wrong day folder"):
        archive.turns(since=date(2026, 1, 1))


def test_prune_drops_whole_days_before_the_window_and_zero_keeps_nothing(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    stock(archive)
    now = datetime(2026, 12, 4, 23, 0, tzinfo=UTC)
    assert archive.within_retention("2026-12-01T00:00:00.000Z", keep_days=3, now=now)
    assert not archive.within_retention("2026-11-30T23:59:59.999Z", keep_days=3, now=now)
    assert not archive.within_retention("2026-12-04T00:00:00.000Z", keep_days=0, now=now)
    assert archive.prune(keep_days=3, now=now) == 0  # 2026-12-01 is exactly three days back: kept
    assert archive.prune(keep_days=2, now=now) == 1
    assert archive.days() == ["2026-12-02", "2026-12-03"]
    today = "2026-12-04T08:00:00.000Z"
    archive.store(rid(7), today, payload(today))
    assert archive.prune(keep_days=0, now=now) == 3  # 0 keeps nothing, not even today
    assert archive.days() == []
    assert archive.prune(keep_days=0, now=now) == 0


def test_the_archive_itself_must_be_private_and_files_bounded(tmp_path: Path) -> None:
    from tempomem.storage.limits import MAX_RECORD_BYTES

    archive = TurnArchive(tmp_path)
    at = "2026-12-01T09:00:00.000Z"
    archive.store(rid(1), at, payload(at))
    (tmp_path / ".turn-archive").chmod(0o755)
    with pytest.raises(TurnArchiveError, match="expected 700"):
        archive.store(rid(2), at, payload(at))
    (tmp_path / ".turn-archive").chmod(0o700)
    # An archived file opened to others is not trusted: not re-stored over, not loaded, not listed.
    path = archive.path_for(rid(1), at)
    path.chmod(0o644)
    with pytest.raises(TurnArchiveError, match="expected 600"):
        archive.store(rid(1), at, payload(at))
    with pytest.raises(TurnArchiveError, match="is unreadable"):
        archive.turns(since=date(2026, 1, 1))
    path.chmod(0o600)
    # Nor is one larger than a record can be.
    big = json.dumps({"admitted_at": at, "text": "x" * MAX_RECORD_BYTES}).encode()
    path.write_bytes(big)
    turn = ArchivedTurn(id=rid(1), admitted_at=at, day="2026-12-01")
    with pytest.raises(TurnArchiveError, match="more than"):
        archive.load(turn)
    with pytest.raises(TurnArchiveError, match="more than"):
        archive.store(rid(1), at, big)
    with pytest.raises(TurnArchiveError, match="is unreadable"):
        archive.turns(since=date(2026, 1, 1))


def test_listing_skips_names_that_are_not_turns_and_honours_a_cursor_on_the_first_day(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    stock(archive)
    for day in ("2026-12-01", "2026-12-02"):
        (tmp_path / ".turn-archive" / day / ".notes").write_text("sorts first, not a turn")
    assert [t.id for t in archive.turns(since=date(2026, 12, 2))] == [rid(4), rid(5)]
    cursor = ("2026-12-02T00:00:00.000Z", "")
    assert [t.id for t in archive.turns(since=date(2026, 12, 2), after=cursor)] == [rid(4), rid(5)]
    assert [t.id for t in archive.turns(since=date(2026, 1, 1))] == [rid(2), rid(1), rid(3), rid(4), rid(5)]


def test_retention_of_one_day_keeps_today_and_yesterday(tmp_path: Path) -> None:
    archive = TurnArchive(tmp_path)
    stock(archive)
    now = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
    assert archive.within_retention("2026-12-02T00:00:00.000Z", keep_days=1, now=now)
    assert not archive.within_retention("2026-12-01T23:59:59.999Z", keep_days=1, now=now)
    assert archive.prune(keep_days=1, now=now) == 1
    assert archive.days() == ["2026-12-02", "2026-12-03"]
