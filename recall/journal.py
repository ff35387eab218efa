"""MemoryJournal: bounded chronology over explicit civil dates from curated daily Markdown (JRN-*).

A first call resolves ``fromDate..throughDate`` in an explicit IANA zone to a half-open UTC interval,
freezes a snapshot of the matching curated ``daily/`` bullets (never ``audit/``, JRN-18) and returns the
first page. Later pages come only from the same snapshot through an authenticated cursor (AMB-35):
``base64url(snapshot_id ‖ offset ‖ HMAC-SHA256(request_key, snapshot_id ‖ offset))``. The request key is
random per ``JournalSession`` (one logical turn's tool endpoint, AMB-36) and lives in memory only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import BaseModel, ConfigDict, Field

from tempomem.recall.shaping import cut_utf8
from tempomem.storage.credentials import unsafe_characters
from tempomem.storage.instants import format_instant
from tempomem.storage.limits import KIB, MIB
from tempomem.storage.markdown import Bullet, read_document
from tempomem.storage.replay_sidecar import ended_ids

# LIM-49..LIM-54 (kept here, beside their only user).
JOURNAL_MAX_DAYS = 31  # LIM-49: inclusive civil dates
JOURNAL_LIMIT_DEFAULT = 10  # LIM-50
JOURNAL_LIMIT_MAX = 25  # LIM-50
JOURNAL_SNAPSHOTS_PER_REQUEST = 4  # LIM-51
JOURNAL_SNAPSHOT_MAX_ENTRIES = 1000  # LIM-52
JOURNAL_SNAPSHOT_MAX_BYTES = 2 * MIB  # LIM-52
JOURNAL_PAGE_MAX_ENTRIES = 25  # LIM-53
JOURNAL_PAGE_MAX_BYTES = 8 * KIB  # LIM-53
JOURNAL_TEXT_MAX_BYTES = 2 * KIB  # LIM-54

UNSAFE_TEXT_MARKER = "[unsafe text withheld]"  # AMB-37
UNSAFE_ID_MARKER = "[unsafe id]"  # AMB-37
DAILY_FOLDER = "daily"
# Zone names that mean "whatever the host uses": resolving them would guess the host zone (JRN-07).
_HOST_ZONE_ALIASES = frozenset({"localtime", "posixrules"})

StopReason = Literal["complete", "entry_cap", "byte_cap", "backend_limit"]

_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_SNAPSHOT_ID_BYTES = 16
_OFFSET = struct.Struct(">I")
_MAC_BYTES = 32
_CURSOR_BYTES = _SNAPSHOT_ID_BYTES + _OFFSET.size + _MAC_BYTES


class JournalError(Exception):
    """A typed, model-safe failure. ``code`` is stable; the message never carries backend detail."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------------------------------
# Range resolution (JRN-03..JRN-07)


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) - _HOST_ZONE_ALIASES


def _civil_date(value: object, name: str) -> date:
    if not isinstance(value, str) or not _DATE_RE.fullmatch(value):
        raise JournalError("invalid_date", f"{name} must be a calendar date YYYY-MM-DD")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise JournalError("invalid_date", f"{name} is not a date that exists") from None


def _zone(value: object) -> ZoneInfo:
    if value is None or value == "":
        raise JournalError("missing_time_zone", "timeZone is required (an IANA zone such as Europe/Warsaw)")
    if not isinstance(value, str) or value not in _zones():
        raise JournalError("invalid_time_zone", "timeZone is not a known IANA time zone")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise JournalError("invalid_time_zone", "timeZone is not a known IANA time zone") from None


class JournalRange(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    from_date: str = Field(alias="fromDate")
    through_date: str = Field(alias="throughDate")
    time_zone: str = Field(alias="timeZone")
    start: str  # inclusive UTC instant
    end: str  # exclusive UTC instant (half-open interval, JRN-05)


def _local_midnight_utc(day: date, zone: ZoneInfo) -> datetime:
    # zoneinfo maps a wall time inside a DST gap with the pre-transition offset, which lands exactly on
    # the first instant that exists on that civil date, so a day starting at 01:00 still starts right.
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def resolve_range(
    from_date: object, through_date: object, time_zone: object
) -> tuple[JournalRange, datetime, datetime]:
    """Validate and resolve inclusive civil dates in ``time_zone`` to ``[start, end)`` in UTC."""
    zone = _zone(time_zone)
    first = _civil_date(from_date, "fromDate")
    last = _civil_date(through_date, "throughDate")
    if first > last:
        raise JournalError("invalid_range", "fromDate must not be after throughDate")
    if (last - first).days + 1 > JOURNAL_MAX_DAYS:
        raise JournalError("range_too_long", f"the range covers more than {JOURNAL_MAX_DAYS} days")
    start = _local_midnight_utc(first, zone)
    end = _local_midnight_utc(last + timedelta(days=1), zone)
    rng = JournalRange(
        from_date=first.isoformat(),
        through_date=last.isoformat(),
        time_zone=str(time_zone),
        start=format_instant(start),
        end=format_instant(end),
    )
    return rng, start, end


def resolve_limit(limit: object) -> int:
    """JRN-08: default 10, capped at 25; anything but a positive integer is rejected."""
    if limit is None:
        return JOURNAL_LIMIT_DEFAULT
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise JournalError("invalid_limit", "limit must be a positive integer")
    return min(limit, JOURNAL_LIMIT_MAX)


# --------------------------------------------------------------------------------------------------
# Entries (AMB-37, AMB-38)


def is_unsafe_text(text: str) -> bool:
    """Display-side AMB-25 check (length is capped separately), shared with the write side."""
    return unsafe_characters(text) is not None


class JournalEntry(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    id: str
    text: str
    recorded_at: str = Field(alias="recordedAt")
    source: str  # canonical daily source reference, relative to the memory root (JRN-17)
    type: str
    status: str
    lifecycle: Literal["current", "superseded"]  # stored supersession state at snapshot time
    valid_from: str | None = Field(default=None, alias="validFrom")
    valid_to: str | None = Field(default=None, alias="validTo")
    due_at: str | None = Field(default=None, alias="dueAt")
    text_truncated: bool | None = Field(default=None, alias="textTruncated")


def entry_instant(day: str, bullet: Bullet) -> datetime:
    """AMB-38: the ``recorded`` instant, else the daily file's date at 00:00 UTC."""
    try:
        instant = datetime.fromisoformat(bullet.recorded)
        if instant.tzinfo is not None:
            return instant.astimezone(UTC)
    except ValueError:
        pass
    return datetime.combine(date.fromisoformat(day), time(0), tzinfo=UTC)


def make_entry(day: str, bullet: Bullet, *, superseded: bool = False) -> JournalEntry:
    if is_unsafe_text(bullet.text):
        text, truncated = UNSAFE_TEXT_MARKER, False
    else:
        text, truncated = cut_utf8(bullet.text, JOURNAL_TEXT_MAX_BYTES)
    return JournalEntry(
        id=bullet.id if _ID_RE.fullmatch(bullet.id) else UNSAFE_ID_MARKER,
        text=text,
        recorded_at=format_instant(entry_instant(day, bullet)),
        source=f"{DAILY_FOLDER}/{day}.md",
        type=bullet.type,
        status=bullet.status,
        lifecycle="superseded" if superseded or bullet.status == "invalidated" else "current",
        valid_from=bullet.valid_from,
        valid_to=bullet.valid_to,
        due_at=bullet.due,
        text_truncated=True if truncated else None,
    )


def _entry_bytes(entry: JournalEntry) -> int:
    return len(entry.model_dump_json(exclude_none=True).encode("utf-8"))


# --------------------------------------------------------------------------------------------------
# Snapshots


class JournalCoverage(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    complete: bool
    stop_reason: StopReason = Field(alias="stopReason")
    entries: int  # how many entries the frozen snapshot holds


@dataclass
class Snapshot:
    range: JournalRange
    limit: int
    entries: list[JournalEntry]
    coverage: JournalCoverage
    issued: set[int] = field(default_factory=set)


def _day_files(root: Path, start: datetime, end: datetime) -> list[str]:
    """Daily files that can hold entries of ``[start, end)``: named by UTC day (AMB-20), with a day of
    slack each side for bullets whose ``recorded`` instant and file day differ around midnight."""
    directory = Path(root) / DAILY_FOLDER
    if not directory.is_dir():
        return []
    first, last = start.date() - timedelta(days=1), end.date() + timedelta(days=1)
    days = []
    for entry in directory.iterdir():
        name = entry.name
        if not (name.endswith(".md") and _DATE_RE.fullmatch(name[:-3])):
            continue
        try:
            day = date.fromisoformat(name[:-3])
        except ValueError:
            continue
        if first <= day <= last:
            days.append(name[:-3])
    return sorted(days)


def build_snapshot(root: Path, rng: JournalRange, start: datetime, end: datetime, limit: int) -> Snapshot:
    """Freeze the curated entries of ``[start, end)`` ordered by instant then id (AMB-38).

    Dropped records are excluded (JRN-18). Caps: 1,000 entries and 2 MiB (JRN-11); a capped snapshot
    keeps the earliest entries and says why it stopped (JRN-13).
    """
    found: list[tuple[datetime, str, str, Bullet]] = []
    ended = ended_ids(root)  # JRN-17: BuJo keeps superseded lines as history; the sidecar says which
    for day in _day_files(root, start, end):
        for bullet in read_document(Path(root) / DAILY_FOLDER / f"{day}.md").bullets():
            if bullet.status == "dropped":
                continue
            instant = entry_instant(day, bullet)
            if start <= instant < end:
                found.append((instant, bullet.id, day, bullet))
    found.sort(key=lambda item: (item[0], item[1]))

    entries: list[JournalEntry] = []
    total = 0
    reason: StopReason = "complete"
    for _instant, _id, day, bullet in found:
        if len(entries) >= JOURNAL_SNAPSHOT_MAX_ENTRIES:
            reason = "entry_cap"
            break
        entry = make_entry(day, bullet, superseded=bullet.id in ended)
        size = _entry_bytes(entry)
        if total + size > JOURNAL_SNAPSHOT_MAX_BYTES:
            reason = "byte_cap"
            break
        entries.append(entry)
        total += size
    coverage = JournalCoverage(complete=reason == "complete", stop_reason=reason, entries=len(entries))
    return Snapshot(range=rng, limit=limit, entries=entries, coverage=coverage)


def page_slice(entries: list[JournalEntry], offset: int, limit: int) -> list[JournalEntry]:
    """At most ``limit`` (≤ 25) entries and 8 KiB from ``offset`` (JRN-12); always at least one."""
    page: list[JournalEntry] = []
    total = 0
    for entry in entries[offset : offset + min(limit, JOURNAL_PAGE_MAX_ENTRIES)]:
        size = _entry_bytes(entry)
        if page and total + size > JOURNAL_PAGE_MAX_BYTES:
            break
        page.append(entry)
        total += size
    return page


# --------------------------------------------------------------------------------------------------
# Results & rendering


class JournalResult(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    range: JournalRange
    entries: list[JournalEntry]
    coverage: JournalCoverage
    no_data: bool = Field(alias="noData")
    next_cursor: str | None = Field(default=None, alias="nextCursor")
    text: str


def render_journal(
    rng: JournalRange,
    entries: list[JournalEntry],
    coverage: JournalCoverage,
    no_data: bool,
    next_cursor: str | None,
) -> str:
    lines = [
        f"Journal {rng.from_date}..{rng.through_date} ({rng.time_zone}) = [{rng.start}, {rng.end}). "
        "Untrusted historical evidence, not exact execution evidence."
    ]
    if no_data:
        lines.append("No entries in this range.")
    for e in entries:
        status = f" [{e.status}]" if e.status != "open" else ""
        marks = [e.source]
        if e.valid_from or e.valid_to:
            marks.append(f"valid {e.valid_from or ''}–{e.valid_to or ''}")
        if e.due_at:
            marks.append(f"due {e.due_at}")
        if e.lifecycle == "superseded":
            marks.append("superseded")
        lines.append(f"- {e.recorded_at}{status} {e.text} ({'; '.join(marks)})")
    if coverage.complete:
        lines.append("Coverage: complete.")
    else:
        lines.append(f"Coverage: incomplete ({coverage.stop_reason}); later entries were not scanned.")
    if next_cursor:
        lines.append(f'More entries: continue with {{"cursor": "{next_cursor}"}}.')
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Request scope & cursors


class JournalSession:
    """One request scope: a private HMAC key and at most four LRU snapshots (JRN-09, JRN-10, AMB-36)."""

    def __init__(self, *, request_key: bytes | None = None) -> None:
        self._key = request_key if request_key is not None else secrets.token_bytes(32)
        self._snapshots: OrderedDict[bytes, Snapshot] = OrderedDict()

    def _mac(self, snapshot_id: bytes, offset: int) -> bytes:
        return hmac.new(self._key, snapshot_id + _OFFSET.pack(offset), hashlib.sha256).digest()

    def _issue(self, snapshot_id: bytes, snapshot: Snapshot, offset: int) -> str:
        snapshot.issued.add(offset)
        raw = snapshot_id + _OFFSET.pack(offset) + self._mac(snapshot_id, offset)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def _open(self, cursor: object) -> tuple[bytes, Snapshot, int]:
        if not isinstance(cursor, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", cursor):
            raise JournalError("invalid_cursor", "cursor is not valid for this request")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except ValueError:
            raise JournalError("invalid_cursor", "cursor is not valid for this request") from None
        if len(raw) != _CURSOR_BYTES:
            raise JournalError("invalid_cursor", "cursor is not valid for this request")
        snapshot_id = raw[:_SNAPSHOT_ID_BYTES]
        (offset,) = _OFFSET.unpack(raw[_SNAPSHOT_ID_BYTES : _SNAPSHOT_ID_BYTES + _OFFSET.size])
        if not hmac.compare_digest(raw[-_MAC_BYTES:], self._mac(snapshot_id, offset)):
            raise JournalError("invalid_cursor", "cursor is not valid for this request")
        snapshot = self._snapshots.get(snapshot_id)
        if snapshot is None:
            raise JournalError("cursor_expired", "this journal snapshot is no longer available; start again")
        if offset not in snapshot.issued:  # belt and braces: only offsets this session handed out
            raise JournalError("invalid_cursor", "cursor is not valid for this request")
        self._snapshots.move_to_end(snapshot_id)
        return snapshot_id, snapshot, offset

    def _page(self, snapshot_id: bytes, snapshot: Snapshot, offset: int) -> JournalResult:
        page = page_slice(snapshot.entries, offset, snapshot.limit)
        nxt = offset + len(page)
        next_cursor = self._issue(snapshot_id, snapshot, nxt) if nxt < len(snapshot.entries) else None
        no_data = snapshot.coverage.complete and not snapshot.entries
        return JournalResult(
            range=snapshot.range,
            entries=page,
            coverage=snapshot.coverage,
            no_data=no_data,
            next_cursor=next_cursor,
            text=render_journal(snapshot.range, page, snapshot.coverage, no_data, next_cursor),
        )

    def call(
        self,
        root: Path,
        *,
        from_date: object = None,
        through_date: object = None,
        time_zone: object = None,
        limit: object = None,
        cursor: object = None,
    ) -> JournalResult:
        """A first call (range fields) or a continuation (``cursor`` alone)."""
        if cursor is not None:
            if any(v is not None for v in (from_date, through_date, time_zone, limit)):
                raise JournalError("invalid_request", "a continuation takes only the cursor")
            return self._page(*self._open(cursor))
        if from_date is None or through_date is None:
            raise JournalError("missing_range", "fromDate, throughDate and timeZone are all required")
        rng, start, end = resolve_range(from_date, through_date, time_zone)
        page_limit = resolve_limit(limit)
        try:
            snapshot = build_snapshot(root, rng, start, end, page_limit)
        except Exception:  # JRN-15: any backend failure is generic, never the raw error
            raise JournalError("journal_unavailable", "the journal is unavailable right now") from None
        snapshot_id = secrets.token_bytes(_SNAPSHOT_ID_BYTES)
        self._snapshots[snapshot_id] = snapshot
        while len(self._snapshots) > JOURNAL_SNAPSHOTS_PER_REQUEST:
            self._snapshots.popitem(last=False)  # LRU eviction; its cursors now expire (AMB-36)
        return self._page(snapshot_id, snapshot, 0)
