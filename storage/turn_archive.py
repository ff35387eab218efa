"""The turn archive: immutable payload bytes of successfully resolved capture records (issue #6 item 2).

Resolution keeps only a content-free receipt in the intake, so without this archive nothing could be
re-curated. Layout under the memory root::

    .turn-archive/              0700
      <YYYY-MM-DD>/             0700, the UTC day of the record's admission instant (AMB-20)
        <intake id>.json        0600, exactly the admitted payload bytes (same sha256 as the ledger)

Writes are atomic and fsynced (temp → fsync → rename → fsync dir). Writing the same bytes again is a
no-op, so a resolve that crashed after the archive write simply repeats it; different bytes under the
same id fail closed with :class:`TurnArchiveConflictError`. Retention (``memory.capture.turnArchiveDays``)
drops whole day folders older than the window; 0 keeps nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tempomem.storage.fsio import (
    UnsafePathError,
    atomic_write,
    ensure_private_dir,
    fsync_dir,
    read_private_file,
)
from tempomem.storage.limits import MAX_RECORD_BYTES

ARCHIVE_DIR = ".turn-archive"
TURN_ARCHIVE_DAYS_DEFAULT = 90
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_NAME = re.compile(r"^([0-9a-f]{64})\.json$")


class TurnArchiveError(Exception):
    """Base of every typed archive failure."""


class TurnArchiveConflictError(TurnArchiveError):
    """An archived turn with this id already exists with other bytes; nothing was overwritten."""


class ArchivedTurn(BaseModel):
    """Where one archived turn lives and when it was admitted: ids and instants only, never text."""

    model_config = ConfigDict(frozen=True)

    id: str
    admitted_at: str
    day: str


class TurnArchive:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.base = self.root / ARCHIVE_DIR

    def path_for(self, record_id: str, admitted_at: str) -> Path:
        return self.base / admitted_at[:10] / f"{record_id}.json"

    def store(self, record_id: str, admitted_at: str, data: bytes) -> Literal["written", "present"]:
        """Archive ``data`` durably. Idempotent on identical bytes; raises on different bytes."""
        day = admitted_at[:10]
        if not _DAY.fullmatch(day) or not _NAME.fullmatch(f"{record_id}.json"):
            raise TurnArchiveError("archive needs a 64-hex id and an ISO admission instant")
        try:
            ensure_private_dir(self.base, strict=True)
            folder = ensure_private_dir(self.base / day, strict=True)
            path = folder / f"{record_id}.json"
            if os.path.lexists(path):
                if read_private_file(path, max_bytes=MAX_RECORD_BYTES, strict=True) == data:
                    return "present"
                raise TurnArchiveConflictError(f"archived turn {record_id} exists with different bytes")
            atomic_write(path, data)
        except UnsafePathError as exc:
            raise TurnArchiveError(str(exc)) from exc
        return "written"

    def load(self, turn: ArchivedTurn) -> bytes:
        try:
            return read_private_file(
                self.path_for(turn.id, turn.admitted_at), max_bytes=MAX_RECORD_BYTES, strict=True
            )
        except UnsafePathError as exc:
            raise TurnArchiveError(str(exc)) from exc

    def days(self) -> list[str]:
        try:
            names = os.listdir(self.base)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if _DAY.fullmatch(n))

    def prune(self, *, keep_days: int, now: datetime) -> int:
        """Drop day folders older than ``keep_days`` days before ``now``'s UTC date; returns how many.

        ``keep_days`` 0 keeps nothing (archiving is off, so no text should linger).
        """
        cutoff = (now.date() - timedelta(days=keep_days)).isoformat() if keep_days > 0 else "9999-99-99"
        removed = 0
        for day in self.days():
            if day < cutoff:
                shutil.rmtree(self.base / day)
                removed += 1
        if removed:
            fsync_dir(self.base)
        return removed

    def within_retention(self, admitted_at: str, *, keep_days: int, now: datetime) -> bool:
        return keep_days > 0 and admitted_at[:10] >= (now.date() - timedelta(days=keep_days)).isoformat()

    def turns(
        self,
        *,
        since: date,
        until: date | None = None,
        after: tuple[str, str] | None = None,
        limit: int | None = None,
    ) -> list[ArchivedTurn]:
        """Archived turns whose admission day is in [since, until], ordered by (admitted_at, id).

        ``after`` = (admitted_at, id) of the last turn already handled: only later turns are returned, and
        day folders before its day are not even read (a resumable cursor over a large archive).
        ``limit``: stop after the first whole day that reaches it (the result may hold more; cut it).
        """
        first = since.isoformat()
        if after is not None and after[0][:10] > first:
            first = after[0][:10]
        last = until.isoformat() if until is not None else "9999-12-31"
        out: list[ArchivedTurn] = []
        for day in self.days():
            if not first <= day <= last:
                continue
            for name in sorted(os.listdir(self.base / day)):
                match = _NAME.fullmatch(name)
                if match is None:
                    continue
                admitted_at = _admitted_at(self.base / day / name)
                turn = ArchivedTurn(id=match.group(1), admitted_at=admitted_at, day=day)
                if after is None or (turn.admitted_at, turn.id) > after:
                    out.append(turn)
            if limit is not None and len(out) >= limit:
                break  # later days sort after every turn of this one
        return sorted(out, key=lambda t: (t.admitted_at, t.id))


def _admitted_at(path: Path) -> str:
    try:
        data = json.loads(read_private_file(path, max_bytes=MAX_RECORD_BYTES, strict=True))
    except (UnsafePathError, ValueError) as exc:
        raise TurnArchiveError(f"archived turn {path.name} is unreadable") from exc
    value = data.get("admitted_at") if isinstance(data, dict) else None
    if not isinstance(value, str) or value[:10] != path.parent.name:
        raise TurnArchiveError(f"archived turn {path.name} is in the wrong day folder")
    return value
