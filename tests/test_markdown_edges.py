"""Markdown read the way people write it, and text that used to break the index (issue #13 items 5, 9),
plus property tests over arbitrary text for admission and the Markdown reader."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tempomem.recall.index import MemoryIndex, RebuildShrinkError
from tempomem.storage import markdown
from tempomem.storage.admission import admit_turn
from tempomem.storage.fsio import UnsafePathError
from tempomem.storage.health import audit
from tempomem.storage.intake import Intake
from tempomem.storage.markdown import (
    Bullet,
    append_bullets,
    damaged_bullets,
    iter_bullets,
    parse_document,
    read_document,
    serialize_document,
)
from tempomem.storage.projection import project
from tempomem.storage.turn import AdmissionStatus, CompletedTurn

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
HEAD = "# 2026-12-01\n\n"
GOOD = (
    "- – The ferry leaves at seven.\n"
    "  <!--mem id=h-1 type=observation status=open recorded=2026-12-01T10:00:00.000Z-->\n"
)


def daily(root: Path, text: str, day: str = "2026-12-01", *, raw: bytes | None = None) -> Path:
    folder = root / "daily"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{day}.md"
    path.write_bytes(raw if raw is not None else text.encode())
    os.chmod(path, 0o600)
    return path


def test_crlf_and_a_bom_are_read(tmp_path: Path) -> None:
    daily(tmp_path, "", raw=b"\xef\xbb\xbf" + (HEAD + GOOD).replace("\n", "\r\n").encode())
    report = MemoryIndex(tmp_path, None).rebuild()
    assert report.rows == 1
    assert [h.id for h in MemoryIndex(tmp_path, None).search("ferry")] == ["h-1"]


def test_search_over_an_empty_index_returns_nothing(tmp_path: Path) -> None:
    daily(tmp_path, HEAD)
    assert MemoryIndex(tmp_path, None).rebuild().rows == 0
    assert MemoryIndex(tmp_path, None).search("anything at all") == []


def test_a_damaged_bullet_is_kept_and_reported_with_file_and_line(tmp_path: Path) -> None:
    broken = "- – Broken metadata line.\n  <!--mem id=h-2 type=observation status=weird recorded=x-->\n"
    path = daily(tmp_path, HEAD + GOOD + broken)
    report = MemoryIndex(tmp_path, None).rebuild()
    assert (report.rows, report.damaged) == (1, ["daily/2026-12-01.md:6"])
    assert damaged_bullets(tmp_path) == ["daily/2026-12-01.md:6"]
    assert "damaged bullet: daily/2026-12-01.md:6" in audit(tmp_path, now=NOW).problems
    assert broken in path.read_text()  # kept verbatim
    assert [b.id for _, b in iter_bullets(tmp_path)] == ["h-1"]  # its head is not mistaken for a note


def test_a_plain_bullet_a_person_adds_becomes_a_user_note(tmp_path: Path) -> None:
    daily(tmp_path, HEAD + GOOD + "- Call the plumber about the boiler\n- [x] Renew the passport\n")
    notes = [b for _, b in iter_bullets(tmp_path) if b.id.startswith("u-")]
    assert [(b.text, b.type, b.src, b.status) for b in notes] == [
        ("Call the plumber about the boiler", "note", "user", "open"),
        ("Renew the passport", "note", "user", "done"),
    ]
    again = [b.id for _, b in iter_bullets(tmp_path) if b.id.startswith("u-")]
    assert again == [b.id for b in notes]  # stable ids
    MemoryIndex(tmp_path, None).rebuild()
    assert MemoryIndex(tmp_path, None).search("plumber boiler")[0].id == notes[0].id


def test_a_rebuild_that_would_drop_most_memories_refuses_unless_forced(tmp_path: Path) -> None:
    lines = "".join(
        f"- – Memory number {i} about sailing.\n  <!--mem id=h-{i} type=observation status=open "
        f"recorded=2026-12-01T10:00:0{i}.000Z-->\n"
        for i in range(10)
    )
    path = daily(tmp_path, HEAD + lines)
    assert MemoryIndex(tmp_path, None).rebuild().rows == 10
    path.write_text(HEAD + lines.replace("<!--mem", "<!--meme", 8))  # a bad search-and-replace
    with pytest.raises(RebuildShrinkError, match="keep 2 of the active index's 10"):
        MemoryIndex(tmp_path, None).rebuild()
    assert len(MemoryIndex(tmp_path, None).search("sailing", limit=20)) == 10  # untouched
    assert MemoryIndex(tmp_path, None).rebuild(force=True).rows == 2


def test_a_nul_byte_in_a_turn_is_projected_and_indexed(tmp_path: Path) -> None:
    """Item 5: search terms used to be inlined into SQL as literals; a NUL broke the statement."""
    daily(tmp_path, HEAD + GOOD)
    MemoryIndex(tmp_path, None).rebuild()  # the store has an index: the incremental path runs
    intake = Intake(tmp_path)
    turn = CompletedTurn(
        run_id="nul-1",
        conversation_id="web:nul",
        speaker_kind="human-turn",
        final_answer="Tokens with a\x00nul and quote's inside.",
        admitted_at=NOW,
    )
    result = admit_turn(
        intake, turn, tier="lite", write_mode="append-host-summary", capture_cron=None, capture_webhook=None
    )
    assert result.intake_id is not None
    projected = project(tmp_path, intake.load_payload(result.intake_id))
    assert MemoryIndex(tmp_path, None).upsert([(projected.day, projected.bullet)]) == 1
    assert MemoryIndex(tmp_path, None).search("quote's a\x00nul")[0].id == projected.bullet.id


# -- property tests -----------------------------------------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8"), max_size=300) | st.text(max_size=50)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=TEXT, answer=TEXT, run_id=st.text(min_size=1, max_size=40))
def test_admission_of_arbitrary_text_is_typed_and_all_or_nothing(
    tmp_path_factory: pytest.TempPathFactory, user: str, answer: str, run_id: str
) -> None:
    root = tmp_path_factory.mktemp("adm")
    try:
        turn = CompletedTurn(
            run_id=run_id, conversation_id="web:p", user_text=user, final_answer=answer, admitted_at=NOW
        )
    except ValidationError as exc:  # a typed error naming the field, nothing stored
        assert {e["loc"][0] for e in exc.errors()} <= {"run_id", "user_text", "final_answer"}
        assert not (root / ".capture-intake").exists()
        return
    result = admit_turn(
        Intake(root),
        turn,
        tier="lite",
        write_mode="append-host-summary",
        capture_cron=None,
        capture_webhook=None,
    )
    if result.status is not AdmissionStatus.ADMITTED:
        assert not (root / ".capture-intake" / "pending").exists() or not os.listdir(
            root / ".capture-intake" / "pending"
        )
        return
    assert result.intake_id is not None
    projected = project(root, Intake(root).load_payload(result.intake_id))
    [(_, bullet)] = list(iter_bullets(root))
    assert bullet.id == projected.bullet.id and "\n" not in bullet.text
    assert not any(ord(c) < 32 and c != "\t" for c in bullet.text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400) | st.text(st.sampled_from("-–[]x <!-mem=id\r\n\ufeffabc"), max_size=200))
def test_the_markdown_reader_never_raises_and_round_trips(text: str) -> None:
    doc = parse_document(text)
    assert serialize_document(doc) == text or "\r" in text  # every line survives a rewrite verbatim
    again = parse_document(serialize_document(doc))
    assert serialize_document(again) == serialize_document(doc)


def test_single_line_legacy_bullets_and_a_bom_are_not_damage(tmp_path: Path) -> None:
    """The legacy one-line form (head and metadata on one line) parses, also as a file's first line
    behind a BOM; only a line whose metadata does not parse is reported, by file and line."""
    from tempomem.storage.markdown import damaged_bullets

    legacy = "- – A line. <!--mem id=c-0001 type=fact status=open recorded=2026-12-01T09:00:00.000Z-->"
    broken = "- – Broken. <!--mem id=?? -->"
    day = tmp_path / "daily" / "2026-12-01.md"
    day.parent.mkdir(parents=True)
    day.write_bytes(("\ufeff" + legacy + "\r\n" + broken + "\r\n").encode())
    assert damaged_bullets(tmp_path) == ["daily/2026-12-01.md:2"]
    assert [b.id for _, b in iter_bullets(tmp_path, "daily")] == ["c-0001"]


def test_a_day_file_with_bytes_that_are_not_utf8_is_reported_not_fatal(tmp_path: Path) -> None:
    from tempomem.storage.markdown import damaged_bullets

    day = tmp_path / "daily" / "2026-12-01.md"
    day.parent.mkdir(parents=True)
    day.write_bytes(b"# 2026-12-01\n\n- \xe2\x80 torn <!--mem id=c-0001 type=fact-->\n")
    assert damaged_bullets(tmp_path) == ["daily/2026-12-01.md:3"]


def test_a_two_line_bullet_on_the_first_lines_is_whole_and_a_leading_comment_is_damage(
    tmp_path: Path,
) -> None:
    """A file a person wrote without the day heading: its first bullet starts on line 1 and is whole.
    Metadata on line 1 has no head above it (the file's last line is not above it), so it is damage."""
    meta = "  <!--mem id=c-0001 type=fact status=open recorded=2026-12-01T09:00:00.000Z-->"
    day = tmp_path / "daily" / "2026-12-01.md"
    day.parent.mkdir(parents=True)
    day.write_text("- – First line of the file.\n" + meta + "\n")
    assert damaged_bullets(tmp_path) == []
    day.write_text(meta + "\n\n- – A plain bullet at the end")
    assert damaged_bullets(tmp_path) == ["daily/2026-12-01.md:1"]


def test_one_day_reads_like_the_whole_folder_and_names_that_are_not_days_read_nothing(tmp_path: Path) -> None:
    """``iter_day_bullets`` (the index backlog's whole-day read) yields what ``iter_bullets`` yields for
    that day, hand-written notes included; an absent day or a file that is not named by a day yields
    nothing (#13 mutation survivors)."""
    from tempomem.storage.markdown import iter_day_bullets

    daily(tmp_path, HEAD + GOOD + "- Water the ferns on Sunday\n")
    daily(tmp_path, HEAD + GOOD, day="notes")
    whole = [b for day, b in iter_bullets(tmp_path) if day == "2026-12-01"]
    assert [b.id for b in iter_day_bullets(tmp_path, "2026-12-01")] == [b.id for b in whole]
    assert [b.text for b in whole] == ["The ferry leaves at seven.", "Water the ferns on Sunday"]
    assert whole[1].recorded == "2026-12-01T00:00:00.000Z"  # a note is dated by its file's day
    assert list(iter_day_bullets(tmp_path, "2026-12-02")) == []
    assert list(iter_day_bullets(tmp_path, "notes")) == []


@pytest.mark.parametrize("line", ["- Meet Ana <!-- at the dock", "- Meet Ana --> at the dock"])
def test_a_bullet_with_half_a_comment_is_not_a_note(line: str) -> None:
    """Either half of an HTML comment marks a line as metadata or damage, never a hand-written note."""
    from tempomem.storage.markdown import plain_note

    assert plain_note("2026-12-01", "- Meet Ana at the dock") is not None
    assert plain_note("2026-12-01", line) is None


def test_the_same_note_written_three_times_in_one_day_is_three_memories(tmp_path: Path) -> None:
    """A note's id is u- and 40 hex of sha256(day, text, occurrence): stable across versions, since the
    index and the replay sidecar refer to it."""
    import hashlib

    daily(tmp_path, HEAD + "- Buy oat milk\n" * 3)
    notes = [b for _, b in iter_bullets(tmp_path)]
    assert [(b.text, b.attr, b.src) for b in notes] == [("Buy oat milk", "owner", "user")] * 3
    assert [b.id for b in notes] == [
        "u-" + hashlib.sha256(f"2026-12-01\nBuy oat milk\n{k}".encode()).hexdigest()[:40] for k in range(3)
    ]


# Appending to a day file this process wrote last skips the parse (issue #15 item 2: an append used to
# cost O(lines in the day)). The bytes must be exactly those of a full re-read and rewrite (PROV-22), and
# a file anyone else changed since must be read again, never overwritten from memory.
APPEND_DAY = "2026-12-01"


def numbered(i: int, text: str | None = None) -> Bullet:
    return Bullet(
        signifier="–",
        text=text or f"Observation number {i} about the greenhouse.",
        id=f"h-{i:040d}",
        type="observation",
        status="open",
        recorded=f"{APPEND_DAY}T09:{i:02d}:00.000Z",
        src="assistant",
    )


def test_appends_from_memory_write_the_bytes_a_full_rewrite_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remembered, reread = tmp_path / "a" / f"{APPEND_DAY}.md", tmp_path / "b" / f"{APPEND_DAY}.md"
    for i in range(6):
        assert append_bullets(remembered, APPEND_DAY, [numbered(i)]) == 1
        monkeypatch.setattr(markdown, "_WRITTEN", {})  # the other file: parsed again every time
        assert append_bullets(reread, APPEND_DAY, [numbered(i)]) == 1
    assert remembered.read_bytes() == reread.read_bytes()
    assert remembered.read_text() == serialize_document(read_document(remembered))
    assert append_bullets(remembered, APPEND_DAY, [numbered(3), numbered(3)]) == 0  # already there: untouched
    assert append_bullets(remembered, APPEND_DAY, [numbered(9), numbered(9)]) == 1  # one line per id


def test_a_file_changed_by_someone_else_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / f"{APPEND_DAY}.md"
    append_bullets(path, APPEND_DAY, [numbered(1)])
    # A person edits the note in place (same file, other size) and adds a plain line of their own.
    edited = path.read_text().replace("number 1", "number one") + "- bought seeds\n"
    path.write_text(edited)
    assert append_bullets(path, APPEND_DAY, [numbered(2)]) == 1
    text = path.read_text()
    assert "number one" in text and "bought seeds" in text and "number 2" in text
    assert text == serialize_document(read_document(path))
    # Replaced by another file (a restore, an editor's save-as-rename): read again as well.
    other = tmp_path / "other.md"
    other.write_text(f"# {APPEND_DAY}\n\n")
    other.replace(path)
    assert append_bullets(path, APPEND_DAY, [numbered(3)]) == 1
    assert [b.id for b in read_document(path).bullets()] == [numbered(3).id]


def test_appends_to_a_file_with_bytes_that_are_not_utf8_keep_those_bytes(tmp_path: Path) -> None:
    """A torn character someone left in a day file survives our appends byte for byte (read with
    surrogateescape, written back the same way), whether the append parses the file or not."""
    path = tmp_path / f"{APPEND_DAY}.md"
    torn = b"- a note with a torn \xe2\x80 character\n"
    path.write_bytes(f"# {APPEND_DAY}\n\n".encode() + torn)
    assert append_bullets(path, APPEND_DAY, [numbered(1)]) == 1  # parsed
    assert append_bullets(path, APPEND_DAY, [numbered(2)]) == 1  # from memory
    data = path.read_bytes()
    assert torn in data and [b.id for b in read_document(path).bullets()] == [numbered(1).id, numbered(2).id]


META = "  <!--mem id=h-1 type=observation status=open recorded=2026-12-01T10:00:00.000Z{}-->\n"


@pytest.mark.parametrize(
    "extra",
    [
        " source_session",  # a key without "="
        "  source_session=web",  # two spaces: not the canonical form
        " entities=%FF",  # not UTF-8 once decoded
    ],
    ids=["bare_key", "double_space", "bad_escape"],
)
def test_hand_damaged_metadata_is_a_damaged_bullet(tmp_path: Path, extra: str) -> None:
    daily(tmp_path, HEAD + "- – The ferry leaves at seven.\n" + META.format(extra))
    assert damaged_bullets(tmp_path) == ["daily/2026-12-01.md:4"]


def test_a_value_with_an_equals_sign_is_split_at_the_first_one(tmp_path: Path) -> None:
    """``key=value`` splits at the first "=": a hand-typed "=" in a value spoils only that value (an
    unreadable session is unknown, PROV-15), never the bullet."""
    daily(tmp_path, HEAD + "- – The ferry leaves at seven.\n" + META.format(" source_session=web:a=b"))
    assert damaged_bullets(tmp_path) == []
    assert [(b.id, b.source_session) for _, b in iter_bullets(tmp_path)] == [("h-1", None)]


def test_a_plain_line_with_a_torn_character_is_skipped_not_fatal(tmp_path: Path) -> None:
    daily(tmp_path, "", raw=b"# 2026-12-01\n\n- a plain note with a torn \xe2\x80 character\n")
    assert list(iter_bullets(tmp_path)) == []  # not a note Bullet can hold; reading goes on


def test_a_day_file_is_parsed_once_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #15: reconciliation reads the live lines for every turn, so a day file is parsed once per
    file identity. An edit in place that keeps the size (only its times differ), a replacement, or a
    symlink put in its place is read again, and the symlink is refused as before."""
    parsed: list[str] = []
    real = markdown.parse_document
    monkeypatch.setattr(markdown, "parse_document", lambda text: parsed.append(text) or real(text))
    path = daily(tmp_path, HEAD + GOOD)

    def texts() -> list[str]:
        return [b.text for _, b in iter_bullets(tmp_path)]

    assert texts() == texts() == ["The ferry leaves at seven."]
    assert len(parsed) == 1
    path.write_text(HEAD + GOOD.replace("seven", "eight"))  # same size
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert texts() == ["The ferry leaves at eight."]
    other = tmp_path / "other.md"
    other.write_text(HEAD + GOOD.replace("seven", "nine."))
    other.replace(path)
    assert texts() == ["The ferry leaves at nine.."]
    assert len(parsed) == 3
    moved = tmp_path / "moved.md"
    path.replace(moved)
    path.symlink_to(moved)
    with pytest.raises(UnsafePathError):
        texts()


def test_the_parse_cache_is_bounded_by_bullets_least_recently_used_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(markdown, "_PARSED", markdown.OrderedDict())
    monkeypatch.setattr(markdown, "_PARSED_BULLETS", 0)
    monkeypatch.setattr(markdown, "_PARSED_MAX_BULLETS", 5)
    two = GOOD + GOOD.replace("h-1", "h-2")
    paths = [daily(tmp_path, HEAD.replace("01", f"0{d}") + two, f"2026-12-0{d}") for d in (1, 2, 3)]
    assert len(list(iter_bullets(tmp_path))) == 6
    assert [Path(k[0]) for k in markdown._PARSED] == paths[1:]  # the oldest file made room
    assert markdown._PARSED_BULLETS == 4
    daily(tmp_path, HEAD.replace("01", "03") + GOOD, "2026-12-03")  # one bullet fewer, parsed again
    assert len(list(iter_bullets(tmp_path))) == 5
    assert markdown._PARSED_BULLETS == sum(len(v[1]) for v in markdown._PARSED.values()) <= 5


def test_lines_appended_by_this_process_extend_the_kept_parse_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A day file this process parsed and then appended to is not parsed again: the appended lines,
    parsed on their own, extend the kept parse, and what is read equals a fresh parse of the file."""
    parsed: list[str] = []
    real = markdown.parse_document
    monkeypatch.setattr(markdown, "parse_document", lambda text: parsed.append(text) or real(text))
    path = daily(tmp_path, HEAD + GOOD + "- a note typed by hand\n")
    append_bullets(path, "2026-12-01", [numbered(1)])  # not written by this process yet: parsed
    before = list(iter_bullets(tmp_path))  # parsed, and kept
    full = len(parsed)
    for i in (2, 3):
        append_bullets(path, "2026-12-01", [numbered(i), numbered(i + 10)])
    kept = list(iter_bullets(tmp_path))
    assert len(parsed) == full + 2  # only the appended lines, each time
    assert all(text.count("<!--mem") == 2 for text in parsed[full:])
    monkeypatch.setattr(markdown, "_PARSED", markdown.OrderedDict())
    assert kept == list(iter_bullets(tmp_path))  # a fresh parse of the file
    assert [b for _, b in kept][: len(before)] == [b for _, b in before]
    assert [b.id for _, b in kept][len(before) :] == [numbered(i).id for i in (2, 12, 3, 13)]
    assert "u-" in kept[1][1].id and numbered(1).id == kept[2][1].id  # the hand-typed note, then ours


def test_a_loop_over_kept_bullets_may_append_inside_it(tmp_path: Path) -> None:
    """The kept parse is handed out without its lock held: a caller that appends to a day file while it
    iterates another one's kept bullets (the append takes that lock) finishes instead of deadlocking."""
    import threading

    path = daily(tmp_path, HEAD + GOOD)
    append_bullets(path, "2026-12-01", [numbered(1)])
    list(iter_bullets(tmp_path))  # kept
    other = tmp_path / "daily" / "2026-12-02.md"
    append_bullets(other, "2026-12-02", [numbered(2)])
    list(iter_bullets(tmp_path))  # both kept now

    def loop() -> None:
        for n, (day, _) in enumerate(iter_bullets(tmp_path)):
            if day == "2026-12-01":
                append_bullets(other, "2026-12-02", [numbered(10 + n)])

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert [b.id for b in iter_day_bullets_of(tmp_path, "2026-12-02")] == [
        numbered(i).id for i in (2, 10, 11)
    ]


def iter_day_bullets_of(root: Path, day: str) -> list[Bullet]:
    return list(markdown.iter_day_bullets(root, day))
