"""`tempomem export` / `import apply|restore` on real files (WM-21, CLI-10, CLI-11, AMB-34): export,
restore, apply and crash recovery.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from datetime import datetime
from pathlib import Path

import pytest

from tempomem import export as ex
from tempomem.export import restore as ex_restore
from tempomem.export import write as ex_write
from tempomem.storage import graph as graph_store
from tempomem.storage import replay_sidecar
from tempomem.storage.fence import AgentRunningError, hold_fence
from tempomem.storage.markdown import append_bullets, iter_bullets
from tests.helpers.export_store import (
    SECRET,
    bullet,
    canonical,
    make_store,
    members,
    rewrite,
    sup,
    tree,
)


# -- export --------------------------------------------------------------------------------------------------
def test_export_is_read_only_complete_and_content_free(tmp_path: Path) -> None:
    root = make_store(tmp_path / "store")
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}
    dirs_before = sorted(p for p in root.rglob("*"))
    report = ex.export_store(root, tmp_path / "backup.tar.gz")
    assert sorted(p for p in root.rglob("*")) == dirs_before  # nothing created (no lock, no temp)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()} == before

    got = members(report.path)
    assert next(iter(got)) == "manifest.json"
    assert {
        k.removeprefix("canonical/"): v for k, v in got.items() if k.startswith("canonical/")
    } == canonical(root)
    assert set(canonical(root)) == {
        "daily/2026-03-04.md",
        "daily/2026-03-05.md",
        "audit/2026-03-05.md",
        "graph.jsonl",
        ".replay-projection-v1.json",
    }
    manifest = json.loads(got["manifest.json"])
    for entry in manifest["files"]:
        assert hashlib.sha256(got[entry["path"]]).hexdigest() == entry["sha256"]
    # Intake metadata: the record is there, its content is not (a backup, content-free).
    meta = json.loads(got["intake-metadata.json"])
    assert [r["state"] for r in meta["records"]] == ["pending"] and len(meta["records"][0]["id"]) == 64
    assert meta["records"][0]["payload_sha256"]
    blob = b"".join(got.values())
    assert SECRET.encode() not in blob and b"Noted." not in blob
    assert report.files == 5 and report.intake_records == 1 and report.passes >= 2
    assert (tmp_path / "backup.tar.gz").stat().st_mode & 0o077 == 0


def test_export_refuses_archive_inside_root_and_symlinked_canonical_file(tmp_path: Path) -> None:
    root = make_store(tmp_path / "store")
    with pytest.raises(ex.ArchiveError, match="outside the memory root"):
        ex.export_store(root, root / "b.tar.gz")
    (tmp_path / "elsewhere.md").write_text("x")
    os.symlink(tmp_path / "elsewhere.md", root / "daily" / "2026-01-01.md")
    with pytest.raises(ex.ArchiveError, match="unsafe"):
        ex.export_store(root, tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists()


def test_export_retries_until_two_passes_agree_and_gives_up_on_a_churning_store(tmp_path: Path) -> None:
    root = make_store(tmp_path / "store")
    stop = threading.Event()
    counter = {"n": 0}

    def churn() -> None:  # a live agent committing constantly
        while not stop.is_set():
            counter["n"] += 1
            append_bullets(
                root / "daily" / "2026-03-06.md", "2026-03-06", [bullet(f"c-{counter['n']}", "tick")]
            )

    t = threading.Thread(target=churn)
    t.start()
    try:
        with pytest.raises(ex.ExportUnstableError):
            ex.export_store(root, tmp_path / "b.tar.gz", max_passes=3, pause_seconds=0.01)
    finally:
        stop.set()
        t.join()
    assert not (tmp_path / "b.tar.gz").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tempomem-export-")]

    # A store that changes once, during the first pass, settles on the next two passes.
    real = ex_write._copy_pass
    calls = {"n": 0}

    def once(root_: Path, dest: Path, now: datetime) -> dict:
        calls["n"] += 1
        digests = real(root_, dest, now)
        if calls["n"] == 1:  # a commit lands right after the first pass read everything
            append_bullets(root / "daily" / "2026-03-07.md", "2026-03-07", [bullet("late", "late")])
        return digests

    ex_write._copy_pass = once  # type: ignore[assignment]
    try:
        report = ex.export_store(root, tmp_path / "b.tar.gz", pause_seconds=0)
    finally:
        ex_write._copy_pass = real  # type: ignore[assignment]
    assert report.passes == 3
    assert "canonical/daily/2026-03-07.md" in members(report.path)


# -- restore -------------------------------------------------------------------------------------------------
def test_restore_into_empty_store_reproduces_canonical_files(tmp_path: Path) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    report = ex.import_restore(dst, archive)
    assert report.files_written == 5
    assert canonical(dst) == canonical(src)
    for rel in canonical(dst):
        assert (dst / rel).stat().st_mode & 0o777 == 0o600
    assert graph_store.load_graph(dst).entities["ana"].memories == ("m-1",)
    assert replay_sidecar.load(dst).entries == replay_sidecar.load(src).entries
    assert not [p for p in dst.iterdir() if p.name.startswith(ex.STAGING_PREFIX)]
    # Re-running onto a matching store is a no-op; a differing store is refused untouched.
    assert ex.import_restore(dst, archive).files_written == 0
    append_bullets(dst / "daily" / "2026-03-05.md", "2026-03-05", [bullet("m-9", "new since")])
    before = tree(dst)
    with pytest.raises(ex.ImportConflictError, match="import apply"):
        ex.import_restore(dst, archive)
    assert tree(dst) == before


def test_restore_completes_a_partially_restored_store(tmp_path: Path) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    append_bullets(dst / "daily" / "2026-03-04.md", "2026-03-04", [bullet("m-1", "Ana lives in Lisbon")])
    assert ex.import_restore(dst, archive).files_written == 4
    assert canonical(dst) == canonical(src)


def test_import_refuses_while_the_fence_is_held(tmp_path: Path) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    dst.mkdir(mode=0o700)
    # A worker holds the fence in another process; flock is per open file description, so a second
    # open in this process conflicts just the same.
    with hold_fence(dst, what="worker"):
        with pytest.raises(AgentRunningError):
            ex.import_restore(dst, archive)
        with pytest.raises(AgentRunningError):
            ex.import_apply(dst, archive)
        assert canonical(dst) == {}
    # Export is allowed on a live store.
    with hold_fence(src, what="worker"):
        assert ex.export_store(src, tmp_path / "live.tar.gz").files == 5


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("tampered", "does not match its manifest digest"),
        ("absolute", "absolute path"),
        ("dotdot", r"'\.\.'"),
        ("symlink", "is a link"),
        ("hardlink", "is a link"),
        ("unlisted", "not listed in the manifest"),
        ("missing", "lacks 1 file"),
        ("noncanonical", "not a canonical file"),
        ("no_manifest_first", "must be the first member"),
        ("truncated", "corrupt or truncated|not a readable"),
    ],
)
def test_bad_archives_are_refused_and_leave_the_store_untouched(
    tmp_path: Path, case: str, match: str
) -> None:
    src = make_store(tmp_path / "src")
    good = ex.export_store(src, tmp_path / "good.tar.gz").path
    bad = tmp_path / "bad.tar.gz"
    target = "canonical/daily/2026-03-04.md"

    def edit(info: tarfile.TarInfo, data: bytes):
        if case == "tampered" and info.name == target:
            return info, data.replace(b"Lisbon", b"Berlin")
        if case in ("absolute", "dotdot") and info.name == target:
            info.name = "/etc/evil.md" if case == "absolute" else "canonical/../../evil.md"
        if case == "missing" and info.name == target:
            return None
        if case == "no_manifest_first" and info.name == "manifest.json":
            return None
        return info, data

    if case == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    else:
        rewrite(good, bad, edit)
    if case in ("symlink", "hardlink", "unlisted", "noncanonical"):
        with tarfile.open(bad, "r:gz") as tar:  # a .tar.gz cannot be appended to: rewrite it whole
            items = [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar]  # type: ignore[union-attr]
        extra = tarfile.TarInfo("canonical/daily/2026-03-09.md")
        if case == "symlink":
            extra.type, extra.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif case == "hardlink":
            extra.type, extra.linkname = tarfile.LNKTYPE, target
        if case == "noncanonical":
            manifest = json.loads(items[0][1])
            manifest["files"].append({"path": "canonical/.agent.lock", "sha256": "0" * 64, "size": 0})
            items[0] = (items[0][0], json.dumps(manifest).encode())
            extra = tarfile.TarInfo("canonical/.agent.lock")
        with tarfile.open(bad, "w:gz") as tar:
            for m, data in [*items, (extra, b"x" if case == "unlisted" else b"")]:
                m.size = len(data) if m.isfile() else 0
                tar.addfile(m, io.BytesIO(data) if m.isfile() else None)

    for verb in (ex.import_restore, ex.import_apply):
        dst = tmp_path / f"dst-{verb.__name__}"
        append_bullets(dst / "daily" / "2026-01-01.md", "2026-01-01", [bullet("keep", "keep me")])
        before = tree(dst)
        with pytest.raises(ex.ArchiveError, match=match):
            verb(dst, bad)
        assert tree(dst) == before, verb.__name__
        assert not [p for p in dst.iterdir() if p.name.startswith(ex.STAGING_PREFIX)]
    assert not (tmp_path / "etc").exists() and not (tmp_path / "evil.md").exists()


# -- apply ---------------------------------------------------------------------------------------------------
def test_apply_merges_bullets_graph_and_sidecar_idempotently(tmp_path: Path) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    # The destination already knows m-1 (another day, other text: the store's version wins).
    append_bullets(dst / "daily" / "2026-02-01.md", "2026-02-01", [bullet("m-1", "Ana lived in Porto")])
    append_bullets(dst / "daily" / "2026-03-05.md", "2026-03-05", [bullet("own", "Own memory")])
    graph_store.apply(dst, [{"id": "ana", "name": "Ana", "type": "person", "memories": ["own"]}], [])

    report = ex.import_apply(dst, archive)
    assert (report.bullets_added, report.bullets_skipped) == (2, 1)
    days = {(d, b.id) for d, b in iter_bullets(dst)}
    assert days == {("2026-02-01", "m-1"), ("2026-03-05", "own"), ("2026-03-05", "m-2")}
    assert {b.id for _, b in iter_bullets(dst, "audit")} == {"a-1"}
    assert graph_store.load_graph(dst).entities["ana"].memories == ("m-1", "own")
    assert replay_sidecar.load(dst).entries == replay_sidecar.load(src).entries
    assert report.graph_rows_changed == 1 and report.sidecar_entries_added == 1
    assert set(report.changed_paths) == {
        "daily/2026-03-05.md",
        "audit/2026-03-05.md",
        "graph.jsonl",
        ".replay-projection-v1.json",
    }

    settled = tree(dst)
    again = ex.import_apply(dst, archive)
    assert again.files_written == 0 and again.bullets_added == 0 and tree(dst) == settled


def test_apply_conflicting_sidecar_refuses_everything(tmp_path: Path) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    dst.mkdir(mode=0o700)
    replay_sidecar.apply_delta(dst, [sup("m-0", "m-other")])  # m-0 already superseded by something else
    before = tree(dst)
    with pytest.raises(ex.ImportConflictError, match="conflict"):
        ex.import_apply(dst, archive)
    assert tree(dst) == before  # no bullets merged either: never half-applied


def test_crash_after_commit_is_rolled_forward_and_crash_before_is_discarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    real_rename = os.rename
    moves = {"n": 0}

    def crashing_rename(a, b) -> None:  # dies after the journal and the first rename into the store
        if ex.STAGING_PREFIX in str(a) and ex.STAGING_PREFIX not in str(b):
            moves["n"] += 1
            if moves["n"] == 2:
                raise KeyboardInterrupt("power cut")
        real_rename(a, b)

    monkeypatch.setattr(os, "rename", crashing_rename)
    with pytest.raises(KeyboardInterrupt):
        ex.import_restore(dst, archive)
    monkeypatch.setattr(os, "rename", real_rename)
    staged = [p for p in dst.iterdir() if p.name.startswith(ex.STAGING_PREFIX)]
    assert len(staged) == 1 and (staged[0] / ex.COMMIT_NAME).exists()
    assert 0 < len(canonical(dst)) < 5  # half-moved on disk …
    with hold_fence(dst):
        assert ex.recover_interrupted_import(dst) == 4  # … and finished by recovery (worker start, import)
    assert canonical(dst) == canonical(src)
    assert not [p for p in dst.iterdir() if p.name.startswith(ex.STAGING_PREFIX)]

    # An uncommitted staging folder is discarded; the store is as before.
    (dst / f"{ex.STAGING_PREFIX}dead").mkdir()
    (dst / f"{ex.STAGING_PREFIX}dead" / "graph.jsonl").write_text("junk")
    before = canonical(dst)
    assert ex.import_apply(dst, archive).files_written == 0
    assert canonical(dst) == before and not (dst / f"{ex.STAGING_PREFIX}dead").exists()


def test_recovery_refuses_to_overwrite_a_file_changed_since_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_store(tmp_path / "src")
    archive = ex.export_store(src, tmp_path / "b.tar.gz").path
    dst = tmp_path / "dst"
    append_bullets(dst / "daily" / "2026-03-05.md", "2026-03-05", [bullet("own", "Own")])
    monkeypatch.setattr(ex_restore, "_roll_forward", lambda root, staging: 0)  # crash right after the journal
    ex.import_apply(dst, archive)
    monkeypatch.undo()
    append_bullets(dst / "daily" / "2026-03-05.md", "2026-03-05", [bullet("late", "written after")])
    with pytest.raises(ex.ImportRecoveryError, match="changed since it was staged"):
        ex.recover_interrupted_import(dst)
    assert {b.id for _, b in iter_bullets(dst)} == {"own", "late"}
