"""MemoryJournal (JRN-01..JRN-22, LIM-49..LIM-54, AMB-35..AMB-38) over real daily Markdown under tmp_path."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tempomem.recall import journal as jmod
from tempomem.recall.journal import (
    UNSAFE_ID_MARKER,
    UNSAFE_TEXT_MARKER,
    JournalCoverage,
    JournalEntry,
    JournalError,
    JournalSession,
    make_entry,
    render_journal,
    resolve_range,
)
from tempomem.recall.shaping import cut_utf8
from tempomem.recall.tools import JournalErrorResult, memory_journal
from tempomem.storage.markdown import Bullet, append_bullets

_N = 0


def bullet(text: str, recorded: str, **kw: Any) -> Bullet:
    global _N
    _N += 1
    return Bullet(
        signifier=kw.pop("signifier", "–"),
        text=text,
        id=kw.pop("id", f"j{_N:05d}"),
        type=kw.pop("type", "note"),
        status=kw.pop("status", "open"),
        recorded=recorded,
        source_session=kw.pop("source_session", "web:secret-thread-7"),
        **kw,
    )


def write(root: Path, day: str, bullets: list[Bullet], folder: str = "daily") -> None:
    append_bullets(root / folder / f"{day}.md", day, bullets)


def call(session: JournalSession, root: Path, **kw: Any) -> Any:
    return session.call(root, **kw)


def first(session: JournalSession, root: Path, frm: str, thr: str, tz: str = "UTC", **kw: Any) -> Any:
    return session.call(root, from_date=frm, through_date=thr, time_zone=tz, **kw)


def code_of(fn: Any) -> str:
    with pytest.raises(JournalError) as exc:
        fn()
    return exc.value.code


def refusal_of(fn: Any) -> tuple[str, str]:
    """The refusal's code and its model-facing sentence."""
    with pytest.raises(JournalError) as exc:
        fn()
    return exc.value.code, str(exc.value)


def test_LIM49_to_LIM54_journal_limits() -> None:
    assert jmod.JOURNAL_MAX_DAYS == 31
    assert (jmod.JOURNAL_LIMIT_DEFAULT, jmod.JOURNAL_LIMIT_MAX) == (10, 25)
    assert jmod.JOURNAL_SNAPSHOTS_PER_REQUEST == 4
    assert (jmod.JOURNAL_SNAPSHOT_MAX_ENTRIES, jmod.JOURNAL_SNAPSHOT_MAX_BYTES) == (1000, 2 * 1024 * 1024)
    assert (jmod.JOURNAL_PAGE_MAX_ENTRIES, jmod.JOURNAL_PAGE_MAX_BYTES) == (25, 8 * 1024)
    assert jmod.JOURNAL_TEXT_MAX_BYTES == 2 * 1024


# --------------------------------------------------------------------------------------------------
# Range resolution


def test_JRN03_JRN05_reference_example_echoes_half_open_utc_interval() -> None:
    rng, _, _ = resolve_range("2026-09-01", "2026-09-07", "CET")
    assert rng.model_dump() == {
        "fromDate": "2026-09-01",
        "throughDate": "2026-09-07",
        "timeZone": "CET",
        "start": "2026-08-31T22:00:00.000Z",  # CET observes summer time in September
        "end": "2026-09-07T22:00:00.000Z",
    }


def test_JRN04_dst_crossing_days_are_23_and_25_hours() -> None:
    spring, start, end = resolve_range("2026-03-29", "2026-03-29", "Europe/Warsaw")
    assert (spring.start, spring.end) == ("2026-03-28T23:00:00.000Z", "2026-03-29T22:00:00.000Z")
    assert (end - start).total_seconds() == 23 * 3600
    _, start, end = resolve_range("2026-10-25", "2026-10-25", "Europe/Warsaw")
    assert (end - start).total_seconds() == 25 * 3600


def test_JRN04_day_starting_inside_a_dst_gap_starts_at_its_first_instant() -> None:
    # America/Santiago springs forward at 00:00 → 01:00 on 2026-09-06.
    rng, _, _ = resolve_range("2026-09-06", "2026-09-06", "America/Santiago")
    assert rng.start == "2026-09-06T04:00:00.000Z"


def test_JRN06_LIM49_31_days_inclusive_allowed_32_rejected() -> None:
    resolve_range("2026-09-01", "2026-10-01", "UTC")
    assert code_of(lambda: resolve_range("2026-09-01", "2026-10-02", "UTC")) == "range_too_long"


@pytest.mark.parametrize("bad", ["2026-02-30", "2026-13-01", "2026-2-03", "20260203", "", None, 20260203])
def test_JRN06_nonexistent_or_malformed_dates_rejected(bad: Any) -> None:
    assert code_of(lambda: resolve_range(bad, "2026-03-01", "UTC")) == "invalid_date"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "localtime", "../../etc/passwd", "cet", 5])
def test_JRN06_nonexistent_zones_rejected(zone: Any) -> None:
    assert code_of(lambda: resolve_range("2026-03-01", "2026-03-01", zone)) == "invalid_time_zone"


def test_JRN07_missing_zone_is_an_error_never_a_default(tmp_path: Path) -> None:
    assert code_of(lambda: resolve_range("2026-03-01", "2026-03-01", None)) == "missing_time_zone"
    s = JournalSession()
    assert code_of(lambda: call(s, tmp_path, from_date="2026-03-01", through_date="2026-03-01")) == (
        "missing_time_zone"
    )
    assert code_of(lambda: call(s, tmp_path, from_date="2026-03-01", time_zone="UTC")) == "missing_range"


def test_JRN06_reversed_range_rejected() -> None:
    assert code_of(lambda: resolve_range("2026-03-02", "2026-03-01", "UTC")) == "invalid_range"


def test_JRN08_limit_default_cap_and_invalid(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", [bullet(f"e{i}", f"2026-09-01T10:00:{i:02d}.000Z") for i in range(30)])
    s = JournalSession()
    assert len(first(s, tmp_path, "2026-09-01", "2026-09-01").entries) == 10
    assert len(first(s, tmp_path, "2026-09-01", "2026-09-01", limit=500).entries) == 25
    for bad in (0, -1, True, "5", 2.5):
        assert code_of(lambda bad=bad: first(s, tmp_path, "2026-09-01", "2026-09-01", limit=bad)) == (
            "invalid_limit"
        )


# --------------------------------------------------------------------------------------------------
# Entries, ordering, exclusions


def test_AMB38_JRN04_entries_in_zone_range_ordered_by_instant_then_id(tmp_path: Path) -> None:
    write(tmp_path, "2026-08-31", [
        bullet("before start", "2026-08-31T21:59:59.999Z"),
        bullet("at start", "2026-08-31T22:00:00.000Z", id="b-start"),
    ])  # fmt: skip
    write(tmp_path, "2026-09-01", [
        bullet("same instant z", "2026-09-01T08:00:00.000Z", id="z-late"),
        bullet("same instant a", "2026-09-01T08:00:00.000Z", id="a-early"),
        bullet("earlier in file order later", "2026-09-01T07:00:00.000+02:00", id="offset"),
    ])  # fmt: skip
    write(tmp_path, "2026-09-07", [bullet("at end", "2026-09-07T22:00:00.000Z")])
    page = first(JournalSession(), tmp_path, "2026-09-01", "2026-09-07", "Europe/Berlin", limit=25)
    assert [e.text for e in page.entries] == [
        "at start",
        "earlier in file order later",  # 05:00Z
        "same instant a",
        "same instant z",
    ]
    assert page.entries[1].recorded_at == "2026-09-01T05:00:00.000Z"


def test_AMB38_unparseable_recorded_falls_back_to_file_day_midnight_utc(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-02", [bullet("legacy", "yesterday-ish")])
    page = first(JournalSession(), tmp_path, "2026-09-02", "2026-09-02")
    assert [(e.text, e.recorded_at) for e in page.entries] == [("legacy", "2026-09-02T00:00:00.000Z")]


def test_JRN18_dropped_audit_sessions_and_paths_excluded_JRN17_sources_and_state(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", [
        bullet("kept", "2026-09-01T10:00:00.000Z", id="keep1", valid_from="2026-09-01",
               valid_to="2026-09-30"),
        bullet("replaced", "2026-09-01T11:00:00.000Z", status="invalidated"),
        bullet("forgotten", "2026-09-01T12:00:00.000Z", status="dropped"),
    ])  # fmt: skip
    write(tmp_path, "2026-09-01", [bullet("raw audit", "2026-09-01T10:30:00.000Z")], folder="audit")
    page = first(JournalSession(), tmp_path, "2026-09-01", "2026-09-01")
    assert [e.text for e in page.entries] == ["kept", "replaced"]
    assert page.entries[0].model_dump(exclude_none=True) == {
        "id": "keep1",
        "text": "kept",
        "recordedAt": "2026-09-01T10:00:00.000Z",
        "source": "daily/2026-09-01.md",
        "type": "note",
        "status": "open",
        "lifecycle": "current",
        "validFrom": "2026-09-01",
        "validTo": "2026-09-30",
    }
    assert page.entries[1].lifecycle == "superseded"
    dumped = page.model_dump_json()
    assert "secret-thread" not in dumped and str(tmp_path) not in dumped


def test_JRN14_complete_empty_range_is_no_data(tmp_path: Path) -> None:
    page = first(JournalSession(), tmp_path, "2026-09-01", "2026-09-07")
    assert page.no_data is True and page.entries == [] and page.next_cursor is None
    assert page.coverage.model_dump() == {"complete": True, "stopReason": "complete", "entries": 0}
    assert "No entries in this range." in page.text


def test_JRN19_AMB37_unsafe_text_and_ids_replaced_with_markers() -> None:
    b = bullet("pay \u202eevil", "2026-09-01T10:00:00.000Z")
    assert make_entry("2026-09-01", b).text == UNSAFE_TEXT_MARKER
    emoji = bullet("family 👩\u200d👧 ok", "2026-09-01T10:00:00.000Z")
    assert make_entry("2026-09-01", emoji).text == "family 👩\u200d👧 ok"
    odd = bullet("fine", "2026-09-01T10:00:00.000Z")
    object.__setattr__(odd, "id", "../../etc")  # bypass Bullet validation: an id from a foreign store
    assert make_entry("2026-09-01", odd).id == UNSAFE_ID_MARKER


def test_JRN12_LIM54_text_capped_at_2_kib_on_a_utf8_boundary(tmp_path: Path) -> None:
    long = "zażółć " * 400  # multi-byte characters, ~4.4 KB
    entry = make_entry("2026-09-01", bullet(long, "2026-09-01T10:00:00.000Z"))
    raw = entry.text.encode("utf-8")
    assert len(raw) <= 2048 and entry.text.endswith("…") and entry.text_truncated is True
    assert long.startswith(entry.text[:-1])
    assert cut_utf8("ab", 2) == ("ab", False)


# --------------------------------------------------------------------------------------------------
# Snapshots, pages and cursors


def _day_of(n: int) -> list[Bullet]:
    return [bullet(f"entry {i:02d}", f"2026-09-01T10:{i:02d}:00.000Z") for i in range(n)]


def test_JRN09_pages_continue_a_frozen_snapshot_only_by_cursor(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", _day_of(12))
    s = JournalSession()
    p1 = first(s, tmp_path, "2026-09-01", "2026-09-01", limit=5)
    write(tmp_path, "2026-09-01", [bullet("added later", "2026-09-01T09:00:00.000Z")])
    p2 = call(s, tmp_path, cursor=p1.next_cursor)
    p3 = call(s, tmp_path, cursor=p2.next_cursor)
    texts = [e.text for p in (p1, p2, p3) for e in p.entries]
    assert texts == [f"entry {i:02d}" for i in range(12)]  # frozen: the later write is not in it
    assert [len(p.entries) for p in (p1, p2, p3)] == [5, 5, 2] and p3.next_cursor is None
    assert p1.range == p3.range


def test_JRN09_continuation_rejects_range_or_limit_overrides(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", _day_of(3))
    s = JournalSession()
    p1 = first(s, tmp_path, "2026-09-01", "2026-09-01", limit=1)
    for extra in ({"limit": 2}, {"from_date": "2026-09-01"}, {"time_zone": "UTC"}, {"through_date": "x"}):
        assert code_of(lambda extra=extra: call(s, tmp_path, cursor=p1.next_cursor, **extra)) == (
            "invalid_request"
        )


def _decode(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_AMB35_tampered_cursor_or_other_offset_rejected(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", _day_of(6))
    s = JournalSession()
    p1 = first(s, tmp_path, "2026-09-01", "2026-09-01", limit=2)
    raw = _decode(p1.next_cursor)
    assert len(raw) == 16 + 4 + 32
    moved = raw[:16] + (4).to_bytes(4, "big") + raw[20:]  # same MAC, another offset
    flipped = raw[:-1] + bytes([raw[-1] ^ 1])
    for bad in (_encode(moved), _encode(flipped), _encode(raw[:-1]), "not a cursor!", "", 42):
        assert code_of(lambda bad=bad: call(s, tmp_path, cursor=bad)) == "invalid_cursor"
    # a replay of the exact issued cursor returns the same frozen page
    again = call(s, tmp_path, cursor=p1.next_cursor)
    assert [e.id for e in again.entries] == [e.id for e in call(s, tmp_path, cursor=p1.next_cursor).entries]


def test_AMB35_each_cursor_refusal_carries_its_code_and_fixed_message(tmp_path: Path) -> None:
    """The refusals are model-safe and stable: the same code and the same fixed sentence whatever was
    wrong (characters, base64 that does not decode, length, MAC), and an evicted snapshot its own."""
    write(tmp_path, "2026-09-01", _day_of(4))
    s = JournalSession()
    pages = [first(s, tmp_path, "2026-09-01", "2026-09-01", limit=1) for _ in range(5)]
    raw = _decode(pages[1].next_cursor)
    invalid = ("not a cursor!", "A", "A" * 129, _encode(raw + b"x"), _encode(raw[:-1] + bytes([raw[-1] ^ 1])))
    for bad in invalid:
        assert refusal_of(lambda bad=bad: call(s, tmp_path, cursor=bad)) == (
            "invalid_cursor",
            "cursor is not valid for this request",
        )
    # The fifth snapshot evicted the first.
    assert refusal_of(lambda: call(s, tmp_path, cursor=pages[0].next_cursor)) == (
        "cursor_expired",
        "this journal snapshot is no longer available; start again",
    )


@pytest.mark.parametrize(
    ("fields", "code", "message"),
    [
        ({"through_date": "2026-09-01", "time_zone": "UTC"}, "missing_range", None),
        ({"from_date": "2026-09-01", "time_zone": "UTC"}, "missing_range", None),
        (
            {"from_date": "2026-09-01", "through_date": "2026-09-01"},
            "missing_time_zone",
            "timeZone is required (an IANA zone such as Europe/Warsaw)",
        ),
        (
            {"from_date": "2026-09-01", "through_date": "2026-09-01", "time_zone": ""},
            "missing_time_zone",
            "timeZone is required (an IANA zone such as Europe/Warsaw)",
        ),
        (
            {"from_date": "2026-09-01", "through_date": "2026-09-01", "time_zone": "Mars/Base"},
            "invalid_time_zone",
            "timeZone is not a known IANA time zone",
        ),
        (
            {"from_date": "2026-9-1", "through_date": "2026-09-01", "time_zone": "UTC"},
            "invalid_date",
            "fromDate must be a calendar date YYYY-MM-DD",
        ),
        (
            {"from_date": "2026-09-01", "through_date": "2026-02-30", "time_zone": "UTC"},
            "invalid_date",
            "throughDate is not a date that exists",
        ),
        (
            {"from_date": "2026-09-02", "through_date": "2026-09-01", "time_zone": "UTC"},
            "invalid_range",
            "fromDate must not be after throughDate",
        ),
        (
            {"from_date": "2026-09-01", "through_date": "2026-10-02", "time_zone": "UTC"},
            "range_too_long",
            "the range covers more than 31 days",
        ),
        (
            {"from_date": "2026-09-01", "through_date": "2026-09-01", "time_zone": "UTC", "limit": 0},
            "invalid_limit",
            "limit must be a positive integer",
        ),
        ({"cursor": "x", "limit": 3}, "invalid_request", "a continuation takes only the cursor"),
    ],
)
def test_JRN15_each_refusal_carries_its_code_and_fixed_message(
    tmp_path: Path, fields: dict[str, Any], code: str, message: str | None
) -> None:
    """Every refusal of a journal call is a stable code with a fixed, content-free sentence."""
    expected = message or "fromDate, throughDate and timeZone are all required"
    assert refusal_of(lambda: JournalSession().call(tmp_path, **fields)) == (code, expected)


def test_JRN15_a_store_that_cannot_be_read_is_unavailable_without_detail(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    assert refusal_of(lambda: first(JournalSession(), not_a_folder, "2026-09-01", "2026-09-01")) == (
        "journal_unavailable",
        "the journal is unavailable right now",
    )


def test_AMB35_cursor_from_another_request_rejected(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", _day_of(4))
    p1 = first(JournalSession(), tmp_path, "2026-09-01", "2026-09-01", limit=2)
    assert code_of(lambda: call(JournalSession(), tmp_path, cursor=p1.next_cursor)) == "invalid_cursor"


def test_JRN10_AMB36_fifth_snapshot_evicts_least_recently_used(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", _day_of(4))
    s = JournalSession()
    pages = [first(s, tmp_path, "2026-09-01", "2026-09-01", limit=1) for _ in range(4)]
    call(s, tmp_path, cursor=pages[0].next_cursor)  # touch snapshot 0: snapshot 1 is now LRU
    first(s, tmp_path, "2026-09-01", "2026-09-01", limit=1)  # the fifth
    assert code_of(lambda: call(s, tmp_path, cursor=pages[1].next_cursor)) == "cursor_expired"
    for kept in (0, 2, 3):
        call(s, tmp_path, cursor=pages[kept].next_cursor)


def test_JRN12_LIM53_page_holds_at_most_8_kib(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", [bullet("x" * 2000, f"2026-09-01T10:{i:02d}:00.000Z") for i in range(10)])
    s = JournalSession()
    page = first(s, tmp_path, "2026-09-01", "2026-09-01", limit=25)
    size = sum(len(e.model_dump_json(exclude_none=True).encode()) for e in page.entries)
    assert 0 < len(page.entries) < 10 and size <= 8 * 1024
    assert page.next_cursor is not None


def test_JRN11_JRN13_snapshot_entry_cap_reported_in_coverage(tmp_path: Path) -> None:
    write(
        tmp_path,
        "2026-09-01",
        [bullet(f"n{i}", "2026-09-01T10:00:00.000Z", id=f"n{i:05d}") for i in range(1001)],
    )
    page = first(JournalSession(), tmp_path, "2026-09-01", "2026-09-01")
    assert page.coverage.model_dump() == {"complete": False, "stopReason": "entry_cap", "entries": 1000}
    assert page.no_data is False
    assert "Coverage: incomplete (entry_cap)" in page.text


def test_JRN11_JRN13_snapshot_byte_cap_reported_in_coverage(tmp_path: Path) -> None:
    text = "y" * 2040
    write(
        tmp_path,
        "2026-09-01",
        [bullet(text, "2026-09-01T10:00:00.000Z", id=f"y{i:05d}") for i in range(1000)],
    )
    page = first(JournalSession(), tmp_path, "2026-09-01", "2026-09-01")
    assert page.coverage.stop_reason == "byte_cap" and not page.coverage.complete
    assert page.coverage.entries < 1000


def test_JRN15_backend_failure_is_generic_journal_unavailable(tmp_path: Path) -> None:
    (tmp_path / "daily" / "2026-09-01.md").mkdir(parents=True)  # unreadable "file"
    result = memory_journal(
        JournalSession(), tmp_path, from_date="2026-09-01", through_date="2026-09-01", time_zone="UTC"
    )
    assert isinstance(result, JournalErrorResult) and result.error == "journal_unavailable"
    assert "IsADirectory" not in result.text and str(tmp_path) not in result.text


def test_JRN20_rendered_text_marks_untrusted_evidence_and_cursor(tmp_path: Path) -> None:
    write(tmp_path, "2026-09-01", [
        bullet("Shipped it.", "2026-09-01T10:00:00.000Z", status="done", type="task", signifier="[x]"),
        bullet("Second.", "2026-09-01T11:00:00.000Z"),
    ])  # fmt: skip
    result = memory_journal(
        JournalSession(),
        tmp_path,
        from_date="2026-09-01",
        through_date="2026-09-01",
        time_zone="UTC",
        limit=1,
    )
    assert not isinstance(result, JournalErrorResult)
    lines = result.text.splitlines()
    assert "Untrusted historical evidence" in lines[0]
    assert lines[1] == "- 2026-09-01T10:00:00.000Z [done] Shipped it. (daily/2026-09-01.md)"
    assert json.dumps({"cursor": result.next_cursor}) in result.text


def test_a_line_superseded_in_the_sidecar_is_shown_superseded(tmp_path: Path) -> None:
    """JRN-17: under BuJo a superseded line stays in the Markdown as history; its supersession lives in the
    replay sidecar, and the journal reports that stored state at snapshot time."""
    from tempomem.storage.replay_sidecar import Authority, Entry, apply_delta, entry_id

    def edge(kind: str, old: str, to: str) -> Entry:
        return Entry(
            id=entry_id(kind, old, to),
            kind=kind,  # type: ignore[arg-type]
            from_=old,
            to=to,
            at="2026-03-02T10:00:00.000Z",
            authority=Authority(kind="capture", digest="ab" * 32),
        )

    write(
        tmp_path,
        "2026-03-01",
        [
            bullet("Lives in Lisbon.", "2026-03-01T09:00:00.000Z", id="c-old"),
            bullet("Lives in Porto.", "2026-03-01T10:00:00.000Z", id="c-new"),
            bullet("Likes tea.", "2026-03-01T11:00:00.000Z", id="c-ended"),
        ],
    )
    session = JournalSession()
    before = first(session, tmp_path, "2026-03-01", "2026-03-01")
    assert [e.lifecycle for e in before.entries] == ["current", "current", "current"]
    apply_delta(
        tmp_path,
        [
            edge("supersede", "c-old", "c-new"),
            edge("lifecycle", "c-ended", "superseded"),
            edge("lifecycle", "c-new", "current"),  # a lifecycle entry that keeps a line current
        ],
    )
    after = first(JournalSession(), tmp_path, "2026-03-01", "2026-03-01")
    assert {e.id: e.lifecycle for e in after.entries} == {
        "c-old": "superseded",
        "c-new": "current",
        "c-ended": "superseded",
    }


def test_JRN20_the_rendered_page_line_by_line() -> None:
    """The text the model reads: the range header and its warning, one line per entry with a status other
    than open, the source and only the marks that apply (validity with an open end, due, superseded),
    then coverage and the continuation."""
    rng, _, _ = resolve_range("2026-09-01", "2026-09-02", "Europe/Warsaw")

    def entry(text: str, **kw: Any) -> JournalEntry:
        fields = {"status": "open", "lifecycle": "current", **kw}
        return JournalEntry(
            id="x",
            text=text,
            recorded_at="2026-09-01T08:00:00.000Z",
            source="daily/2026-09-01.md",
            type="note",
            **fields,
        )

    entries = [
        entry("plain"),
        entry("done", status="done", valid_from="2026-09-01", due_at="2026-09-03"),
        entry("until", valid_to="2026-10-01", lifecycle="superseded"),
    ]
    full = JournalCoverage(complete=True, stop_reason="complete", entries=3)
    assert render_journal(rng, entries, full, False, None).splitlines() == [
        "Journal 2026-09-01..2026-09-02 (Europe/Warsaw) = "
        "[2026-08-31T22:00:00.000Z, 2026-09-02T22:00:00.000Z). "
        "Untrusted historical evidence, not exact execution evidence.",
        "- 2026-09-01T08:00:00.000Z plain (daily/2026-09-01.md)",
        "- 2026-09-01T08:00:00.000Z [done] done (daily/2026-09-01.md; valid 2026-09-01–; due 2026-09-03)",
        "- 2026-09-01T08:00:00.000Z until (daily/2026-09-01.md; valid –2026-10-01; superseded)",
        "Coverage: complete.",
    ]
    cut = JournalCoverage(complete=False, stop_reason="byte_cap", entries=0)
    assert render_journal(rng, [], cut, True, "abc").splitlines()[1:] == [
        "No entries in this range.",
        "Coverage: incomplete (byte_cap); later entries were not scanned.",
        'More entries: continue with {"cursor": "abc"}.',
    ]


def test_AMB20_AMB38_entries_filed_a_day_before_or_after_their_instant_are_found(tmp_path: Path) -> None:
    """Daily files are scanned a day either side of the range: an entry filed on the evening before
    (a host behind UTC) or the day after (ahead of UTC) is in the range by its instant. Files that are
    not daily notes are ignored, and the entries come out in instant order."""
    write(tmp_path, "2026-09-01", [bullet("filed the evening before", "2026-09-02T00:30:00.000Z")])
    write(tmp_path, "2026-09-02", [bullet("filed on the day", "2026-09-02T12:00:00.000Z")])
    write(tmp_path, "2026-09-03", [bullet("filed the morning after", "2026-09-02T23:30:00.000Z")])
    write(tmp_path, "2026-09-04", [bullet("out of range", "2026-09-04T12:00:00.000Z")])
    (tmp_path / "daily" / "notes.md").write_text("- not a daily file\n")
    (tmp_path / "daily" / "2026-13-01.md").write_text("- not a date\n")
    page = first(JournalSession(), tmp_path, "2026-09-02", "2026-09-02")
    assert [e.text for e in page.entries] == [
        "filed the evening before",
        "filed on the day",
        "filed the morning after",
    ]
    assert page.coverage.complete
