"""Appending to a day file this process wrote last skips the parse (issue #15 item 2: an append used to
cost O(lines in the day)). The bytes must be exactly those of a full re-read and rewrite (PROV-22), and
a file anyone else changed since must be read again, never overwritten from memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tempomem.storage import markdown
from tempomem.storage.markdown import Bullet, append_bullets, read_document, serialize_document

DAY = "2026-12-01"


def bullet(i: int, text: str | None = None) -> Bullet:
    return Bullet(
        signifier="–",
        text=text or f"Observation number {i} about the greenhouse.",
        id=f"h-{i:040d}",
        type="observation",
        status="open",
        recorded=f"{DAY}T09:{i:02d}:00.000Z",
        src="assistant",
    )


def test_appends_from_memory_write_the_bytes_a_full_rewrite_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remembered, reread = tmp_path / "a" / f"{DAY}.md", tmp_path / "b" / f"{DAY}.md"
    for i in range(6):
        assert append_bullets(remembered, DAY, [bullet(i)]) == 1
        monkeypatch.setattr(markdown, "_WRITTEN", {})  # the other file: parsed again every time
        assert append_bullets(reread, DAY, [bullet(i)]) == 1
    assert remembered.read_bytes() == reread.read_bytes()
    assert remembered.read_text() == serialize_document(read_document(remembered))
    assert append_bullets(remembered, DAY, [bullet(3), bullet(3)]) == 0  # already there: untouched
    assert append_bullets(remembered, DAY, [bullet(9), bullet(9)]) == 1  # one line per id


def test_a_file_changed_by_someone_else_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / f"{DAY}.md"
    append_bullets(path, DAY, [bullet(1)])
    # A person edits the note in place (same file, other size) and adds a plain line of their own.
    edited = path.read_text().replace("number 1", "number one") + "- bought seeds\n"
    path.write_text(edited)
    assert append_bullets(path, DAY, [bullet(2)]) == 1
    text = path.read_text()
    assert "number one" in text and "bought seeds" in text and "number 2" in text
    assert text == serialize_document(read_document(path))
    # Replaced by another file (a restore, an editor's save-as-rename): read again as well.
    other = tmp_path / "other.md"
    other.write_text(f"# {DAY}\n\n")
    other.replace(path)
    assert append_bullets(path, DAY, [bullet(3)]) == 1
    assert [b.id for b in read_document(path).bullets()] == [bullet(3).id]
