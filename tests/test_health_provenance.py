"""PROV-14: strict health reports an index row whose session disagrees with the Markdown provenance.
Real daily Markdown and a real DuckDB index (Lite: no embedder) under tmp_path."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from tempomem.recall.index import MemoryIndex
from tempomem.storage.health import audit
from tempomem.storage.markdown import Bullet, append_bullets

NOW = datetime(2026, 12, 2, tzinfo=UTC)
DAY = "2026-12-01"


def bullet(i: int, session: str | None) -> Bullet:
    return Bullet(
        signifier="–",
        text=f"Line number {i} about the ferry.",
        id=f"h-{i}",
        type="observation",
        status="open",
        recorded=f"{DAY}T10:0{i}:00.000Z",
        source_session=session,
    )


def test_an_index_session_that_disagrees_with_markdown_is_a_canonical_mismatch(tmp_path: Path) -> None:
    lines = [bullet(1, "web:a"), bullet(2, "web:b"), bullet(3, None)]
    append_bullets(tmp_path / "daily" / f"{DAY}.md", DAY, lines)
    index = MemoryIndex(tmp_path, None)
    index.rebuild()
    assert index.provenance() == {"h-1": "web:a", "h-2": "web:b", "h-3": None}
    assert audit(tmp_path, now=NOW, index_sessions=index.provenance()).status == "ok"

    # The index row of h-2 names another conversation than its canonical line (a stale or edited row).
    index.upsert([(DAY, dataclasses.replace(lines[1], source_session="web:elsewhere"))])
    report = audit(tmp_path, now=NOW, index_sessions=index.provenance())
    assert report.status == "canonical_mismatch"
    assert report.mismatches == ["index session h-2: differs from the Markdown provenance"]
    assert "web:" not in " ".join(report.mismatches)  # content-free: no session names


def test_without_an_index_there_is_nothing_to_compare(tmp_path: Path) -> None:
    append_bullets(tmp_path / "daily" / f"{DAY}.md", DAY, [bullet(1, "web:a")])
    assert MemoryIndex(tmp_path, None).provenance() is None
    assert audit(tmp_path, now=NOW, index_sessions=None).status == "ok"


def test_the_cli_health_reports_the_session_mismatch(tmp_path: Path, capsys) -> None:
    import json

    from tempomem.cli import main

    root = tmp_path / "mem"
    lines = [bullet(1, "web:a"), bullet(2, "web:b")]
    append_bullets(root / "daily" / f"{DAY}.md", DAY, lines)
    index = MemoryIndex(root, None)
    index.rebuild()
    index.upsert([(DAY, dataclasses.replace(lines[0], source_session="web:elsewhere"))])
    config = tmp_path / "lite.json"
    config.write_text(json.dumps({"memory": {"mode": "lite", "path": str(root)}}))
    assert main(["--config", str(config), "health"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("canonical_mismatch")
    assert "mismatch: index session h-1: differs from the Markdown provenance" in out
    assert "web:" not in out


def test_only_rows_in_both_places_are_compared_and_sidecar_mismatches_stay(tmp_path: Path) -> None:
    """An id only the index has, or only the Markdown has, is no session mismatch (other checks own
    those); a session mismatch adds to the sidecar's mismatches, never replaces them."""
    from tempomem.storage import replay_sidecar
    from tests.test_health_audit import edge

    append_bullets(tmp_path / "daily" / f"{DAY}.md", DAY, [bullet(1, "web:a"), bullet(2, "web:b")])
    only_one_side = {"h-1": "web:a", "h-9": "web:zzz"}  # h-2 has no index row; h-9 no Markdown line
    assert audit(tmp_path, now=NOW, index_sessions=only_one_side).mismatches == []
    replay_sidecar.apply_delta(tmp_path, [edge("supersede", "c-gone", "h-1")])
    entry = replay_sidecar.load(tmp_path).entries[0]
    report = audit(tmp_path, now=NOW, index_sessions={"h-1": "web:other", "h-2": "web:b"})
    assert report.mismatches == [
        f"supersede {entry.id}: no canonical line c-gone",
        "index session h-1: differs from the Markdown provenance",
    ]
