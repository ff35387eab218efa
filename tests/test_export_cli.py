"""The export and import commands (CLI-10, CLI-11), and archived turns and the ledger travelling with an
archive (re-curation's input; curated run ids stay duplicates).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from tempomem import export as ex
from tempomem.storage.fence import AgentRunningError, hold_fence
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import build_payload
from tempomem.storage.markdown import append_bullets
from tempomem.storage.turn import CompletedTurn
from tests.helpers.export_store import (
    SECRET,
    T0,
    bullet,
    canonical,
    make_store,
    members,
    rewrite,
    tree,
)


# -- CLI --------------------------------------------------------------------------------------------------
def test_cli_export_then_restore_and_fence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tempomem import cli
    from tempomem.cli import common as cli_common

    commands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices  # type: ignore[union-attr]
    assert {"export", "import"} <= set(commands)  # wired into the tempomem CLI
    make_store(tmp_path / "src")
    for name in ("src", "dst"):
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"memory": {"mode": "lite", "writeMode": "append-host-summary", "path": name}})
        )
    archive = tmp_path / "b.tar.gz"
    assert cli.main(["--config", str(tmp_path / "src.json"), "export", str(archive), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == 5
    dst = ["--config", str(tmp_path / "dst.json")]
    assert cli.main([*dst, "import", "restore", str(archive), "--no-rebuild"]) == 0
    assert canonical(tmp_path / "dst") == canonical(tmp_path / "src")
    with hold_fence(tmp_path / "dst"):
        assert (
            cli.main([*dst, "import", "apply", str(archive), "--no-rebuild"]) == cli_common.EXIT_AGENT_RUNNING
        )
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(archive.read_bytes()[:100])
    assert cli.main([*dst, "import", "apply", str(bad), "--no-rebuild"]) == cli_common.EXIT_ERROR


def test_export_and_import_commands_via_their_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The handlers `tempomem.cli` registers, driven through a parser of their own (independent of cli.py)."""
    import argparse

    from tempomem.cli import common as cli_common
    from tempomem.cli.archive import register_export

    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    register_export(parser.add_subparsers(dest="command", required=True), cli_common.load_args_config)

    def run(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        return args.func(args)

    make_store(tmp_path / "src")
    for name in ("src", "dst"):
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"memory": {"mode": "lite", "writeMode": "append-host-summary", "path": name}})
        )
    src, dst = ["--config", str(tmp_path / "src.json")], ["--config", str(tmp_path / "dst.json")]
    archive = tmp_path / "b.tar.gz"
    assert run(*src, "export", str(archive)) == 0
    assert "exported 5 canonical file(s)" in capsys.readouterr().out
    assert run(*src, "export", str(tmp_path / "src" / "inside.tar.gz")) == 1
    assert "outside the memory root" in capsys.readouterr().err
    assert run(*dst, "import", "restore", str(archive), "--json") == 0  # lite: the rebuild needs no embedder
    out = json.loads(capsys.readouterr().out)
    assert out["files_written"] == 5 and out["index_rows"] == 2
    assert run(*dst, "import", "apply", str(archive)) == 0
    assert "merged 0 bullet(s) (3 already present)" in capsys.readouterr().out
    with hold_fence(tmp_path / "dst"), pytest.raises(AgentRunningError):
        run(*dst, "import", "apply", str(archive))


def test_import_refuses_a_store_with_a_symlinked_canonical_file(tmp_path: Path) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    (dst / "daily").mkdir(parents=True, mode=0o700)
    outside = tmp_path / "outside.md"
    outside.write_text("# not yours\n")
    os.symlink(outside, dst / "daily" / "2026-03-04.md")
    for verb in (ex.import_restore, ex.import_apply):
        with pytest.raises(ex.ArchiveError, match=r"unsafe|differ"):
            verb(dst, archive)
    assert outside.read_text() == "# not yours\n" and (dst / "daily" / "2026-03-04.md").is_symlink()


# -- archived turns (re-curation's input) ------------------------------------------------------------------
def _archive_turn(root: Path, run_id: str, text: str = "I moved to Porto in May") -> tuple[str, bytes]:
    """Archive a capture turn's payload as a successful resolve does; (relative path, bytes)."""
    from tempomem.storage.intake_records import canonical_json
    from tempomem.storage.turn_archive import TurnArchive

    turn = CompletedTurn(
        run_id=run_id,
        conversation_id="web:1",
        speaker_kind="human-turn",
        user_text=text,
        final_answer="Noted.",
        admitted_at=T0,
    )
    payload = build_payload(turn, write_mode="capture", tier="bujo")
    data = canonical_json(payload.model_dump())
    assert TurnArchive(root).store(payload.id, payload.admitted_at, data) == "written"
    return f".turn-archive/{payload.admitted_at[:10]}/{payload.id}.json", data


def test_archived_turns_travel_with_export_restore_and_apply(tmp_path: Path) -> None:
    """A restored or merged store can still be re-curated: export carries ``.turn-archive`` byte for
    byte; restore puts it back owner-only; apply adds what is missing, keeps what is equal, and refuses
    (untouched) a turn archived with other bytes under the same id."""
    from datetime import date

    from tempomem.storage.turn_archive import TurnArchive

    src = make_store(tmp_path / "src")
    rel, data = _archive_turn(src, "run-archived")
    report = ex.export_store(src, tmp_path / "b.tar.gz")
    assert members(report.path)[f"canonical/{rel}"] == data and report.files == 6

    dst = tmp_path / "dst"
    assert ex.import_restore(dst, report.path).files_written == 6
    assert (dst / rel).read_bytes() == data
    assert (dst / rel).stat().st_mode & 0o777 == 0o600
    assert (dst / rel).parent.stat().st_mode & 0o777 == 0o700
    assert [t.id for t in TurnArchive(dst).turns(since=date(2026, 1, 1))] == [Path(rel).stem]

    merged = tmp_path / "merged"
    append_bullets(merged / "daily" / "2026-03-05.md", "2026-03-05", [bullet("own", "Own memory")])
    first = ex.import_apply(merged, report.path)
    assert first.archived_turns_added == 1 and rel in first.changed_paths
    assert (merged / rel).read_bytes() == data
    settled = tree(merged)
    again = ex.import_apply(merged, report.path)
    assert again.archived_turns_added == 0 and again.files_written == 0 and tree(merged) == settled

    other = tmp_path / "other"
    append_bullets(other / "daily" / "2026-03-05.md", "2026-03-05", [bullet("own", "Own memory")])
    (other / rel).parent.mkdir(parents=True, mode=0o700)
    (other / rel).write_bytes(data + b"\n")
    before = tree(other)
    with pytest.raises(ex.ImportConflictError, match="archived turn"):
        ex.import_apply(other, report.path)
    assert tree(other) == before


@pytest.mark.parametrize("case", ["renamed", "wrong_day", "not_a_payload"])
def test_an_archived_turn_that_is_not_what_its_name_says_refuses_the_import(
    tmp_path: Path, case: str
) -> None:
    src = make_store(tmp_path / "src")
    rel, data = _archive_turn(src, "run-archived")
    good = ex.export_store(src, tmp_path / "good.tar.gz").path
    member = f"canonical/{rel}"
    if case == "renamed":
        new_member = member.replace(Path(rel).stem, "ab" * 32)
        new_data = data
    elif case == "wrong_day":
        new_member = member.replace("2026-03-04", "2026-03-09")
        new_data = data
    else:
        new_member, new_data = member, b'{"not": "a payload"}'

    def edit(info: tarfile.TarInfo, blob: bytes):
        if info.name == "manifest.json":
            manifest = json.loads(blob)
            for entry in manifest["files"]:
                if entry["path"] == member:
                    entry.update(
                        path=new_member, sha256=hashlib.sha256(new_data).hexdigest(), size=len(new_data)
                    )
            return info, json.dumps(manifest).encode()
        if info.name == member:
            info.pax_headers.pop("path", None)  # a long name is carried in a PAX header
            info.name = new_member
            return info, new_data
        return info, blob

    bad = rewrite(good, tmp_path / "bad.tar.gz", edit)
    for verb in (ex.import_restore, ex.import_apply):
        dst = tmp_path / f"dst-{verb.__name__}"
        append_bullets(dst / "daily" / "2026-01-01.md", "2026-01-01", [bullet("keep", "keep me")])
        before = tree(dst)
        with pytest.raises(ex.ArchiveError, match="archived turn"):
            verb(dst, bad)
        assert tree(dst) == before


def test_restore_and_apply_keep_the_ledger_so_curated_run_ids_stay_duplicates(tmp_path: Path) -> None:
    """#13: a restored store used to admit the same run ids again (the ledger did not travel)."""
    src = make_store(tmp_path / "src")  # admits run-1
    turn = CompletedTurn(
        run_id="run-1", conversation_id="web:1", speaker_kind="human-turn", user_text=SECRET,
        final_answer="Noted.", admitted_at=T0,
    )  # fmt: skip
    payload = build_payload(turn, write_mode="append-host-summary", tier="lite")
    Intake(src).resolve(payload.id, outcome="success", now=T0)
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    meta = json.loads(members(archive)[ex.INTAKE_META_NAME])
    assert [a for a, _ in meta["commitments"]] == [payload.id]  # ids and hashes only
    assert SECRET not in json.dumps(meta)
    dst = tmp_path / "dst"
    assert ex.import_restore(dst, archive).commitments_added == 1
    assert Intake(dst).admit(payload) == "duplicate"
    # apply into another store: the commitment is merged; the same id with other bytes refuses it all
    other = tmp_path / "other"
    append_bullets(other / "daily" / "2026-03-06.md", "2026-03-06", [bullet("m-7", "unrelated")])
    assert ex.import_apply(other, archive).commitments_added == 1
    assert Intake(other).admit(payload) == "duplicate"
    clash = tmp_path / "clash"
    Intake(clash).admit(
        build_payload(
            turn.model_copy(update={"final_answer": "Other bytes."}),
            write_mode="append-host-summary",
            tier="lite",
        )
    )
    before = tree(clash)
    with pytest.raises(ex.ImportConflictError, match="other bytes"):
        ex.import_apply(clash, archive)
    assert tree(clash) == before
