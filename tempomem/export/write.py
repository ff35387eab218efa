"""``export_store``: a read-only, consistent ``.tar.gz`` of a live store (repeated passes until two agree)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempomem.export.layout import (
    CANONICAL_PREFIX,
    CHUNK,
    DEFAULT_MAX_PASSES,
    FORMAT,
    FORMAT_VERSION,
    INTAKE_META_NAME,
    MANIFEST_NAME,
    UNSTABLE,
    UNSTABLE_META,
    ArchiveError,
    ExportUnstableError,
    Manifest,
    ManifestEntry,
    digest_file,
    list_canonical,
    open_regular,
)
from tempomem.export.verify import verify_archive
from tempomem.storage.fsio import UnsafePathError, fsync_dir, one_writer
from tempomem.storage.instants import format_instant
from tempomem.storage.intake import INTAKE_DIR, Intake
from tempomem.storage.intake_records import IntakeError, RecordState


@dataclass(frozen=True)
class ExportReport:
    path: Path
    files: int
    bytes: int
    passes: int
    intake_records: int
    sha256: str  # of the archive itself


def _intake_metadata(root: Path, now: dt.datetime) -> bytes:
    """Content-free intake metadata: views of pending/dead records (+ payload digests) and receipts."""
    intake = Intake(root)
    records: list[dict[str, Any]] = []
    for state in (RecordState.PENDING, RecordState.DEAD):
        folder = intake.pending_dir if state is RecordState.PENDING else intake.dead_dir
        for record_id in intake.list_ids(state):
            view = intake.view(record_id, now=now).model_dump(mode="json", exclude={"due"})
            view["payload_sha256"] = digest_file(folder / record_id)
            records.append(view)
    receipts: list[dict[str, Any]] = []
    for record_id in intake.list_ids(RecordState.RESOLVED):
        path = intake.resolved_dir / f"{record_id}.receipt.json"
        fd = open_regular(path)
        with os.fdopen(fd, "rb") as f:
            receipts.append(json.loads(f.read(1 << 16)))
    # The permanent ledger's commitments (ids and payload hashes only): imported, so a restored store
    # keeps refusing run ids it has already curated (INTAKE-28).
    commitments = sorted(intake.ledger.entries(intake.has_receipt))
    data = {"records": records, "receipts": receipts, "commitments": commitments}
    return (json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _copy_pass(root: Path, dest: Path, now: dt.datetime) -> dict[str, tuple[str, int]]:
    """Copy every canonical file into ``dest`` (plus the intake metadata); ``{rel: (sha256, size)}``."""
    digests: dict[str, tuple[str, int]] = {}
    for rel in list_canonical(root):
        try:
            src = open_regular(root / rel)
        except FileNotFoundError:
            continue  # gone since the listing: the next pass will differ and settle it
        target = dest / CANONICAL_PREFIX / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        h = hashlib.sha256()
        size = 0
        with os.fdopen(src, "rb") as fin, open(target, "wb") as fout:
            while chunk := fin.read(CHUNK):
                h.update(chunk)
                size += len(chunk)
                fout.write(chunk)
        digests[CANONICAL_PREFIX + rel] = (h.hexdigest(), size)
    if (root / INTAKE_DIR).is_dir():
        try:
            meta = _intake_metadata(root, now)
        except (IntakeError, FileNotFoundError, UnsafePathError, ValueError):
            meta = UNSTABLE_META  # a record moved mid-read: never equal to a real pass, so retry
        (dest / INTAKE_META_NAME).write_bytes(meta)
        digests[INTAKE_META_NAME] = (hashlib.sha256(meta).hexdigest(), len(meta))
    return digests


def _tar_add(tar: tarfile.TarFile, name: str, data_path: Path | None, data: bytes | None, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.mode = 0o600
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        assert data_path is not None
        info.size = data_path.stat().st_size
        with open(data_path, "rb") as f:
            tar.addfile(info, f)


def export_store(
    root: Path,
    out: Path,
    *,
    max_passes: int = DEFAULT_MAX_PASSES,
    pause_seconds: float = 0.05,
    now: dt.datetime | None = None,
) -> ExportReport:
    """Write a consistent ``.tar.gz`` backup of the store at ``root`` to ``out`` (atomically).

    Safe on a live store (read-only, no locks). Raises ``ExportUnstableError`` when no two consecutive
    passes of ``max_passes`` agree, ``ArchiveError`` for a missing root, an unsafe canonical file (a
    symlink, another owner) or an ``out`` inside the root.
    """
    root = Path(root)
    out = Path(out).absolute()
    if not root.is_dir():
        raise ArchiveError(f"no memory store at {root}")
    if out.resolve().is_relative_to(root.resolve()):
        raise ArchiveError("the export archive must be written outside the memory root (export is read-only)")
    if max_passes < 2:
        raise ValueError("max_passes must be at least 2: a snapshot needs two agreeing passes")
    now = now or dt.datetime.now(dt.UTC)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tempomem-export-", dir=out.parent) as tmp:
        previous: tuple[Path, dict[str, tuple[str, int]]] | None = None
        snapshot: tuple[Path, dict[str, tuple[str, int]]] | None = None
        passes = 0
        for n in range(max_passes):
            passes = n + 1
            dest = Path(tmp) / f"pass-{n}"
            dest.mkdir(mode=0o700)
            try:
                digests = _copy_pass(root, dest, now)
            except UnsafePathError as exc:
                raise ArchiveError(f"unsafe canonical file: {exc}") from None
            if previous is not None:
                if digests == previous[1] and digests.get(INTAKE_META_NAME, ("",))[0] != UNSTABLE:
                    snapshot = (dest, digests)
                    shutil.rmtree(previous[0])
                    break
                shutil.rmtree(previous[0])
            previous = (dest, digests)
            time.sleep(pause_seconds)
        if snapshot is None:
            raise ExportUnstableError(
                f"the store at {root} kept changing: no two consecutive passes of {max_passes} agreed"
            )
        dest, digests = snapshot
        manifest = Manifest(
            format=FORMAT,
            version=FORMAT_VERSION,
            created_at=format_instant(now),
            passes=passes,
            files=tuple(ManifestEntry(path=p, sha256=d, size=s) for p, (d, s) in sorted(digests.items())),
        )
        manifest_bytes = (manifest.model_dump_json(indent=1) + "\n").encode("utf-8")
        part = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        mtime = int(now.timestamp())
        with one_writer(part):  # two exports to one path from threads of this process share the name
            try:
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as raw:
                    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                        _tar_add(tar, MANIFEST_NAME, None, manifest_bytes, mtime)
                        for entry in manifest.files:
                            _tar_add(tar, entry.path, dest / entry.path, None, mtime)
                    raw.flush()
                    os.fsync(raw.fileno())
                os.rename(part, out)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
                raise
        fsync_dir(out.parent)
    verified = verify_archive(out)  # proves the archive reads back before we report success
    n_records = len(json.loads(verified.intake_metadata or b"{}").get("records", []))
    return ExportReport(
        path=out,
        files=len(verified.manifest.canonical()),
        bytes=sum(e.size for e in verified.manifest.files),
        passes=passes,
        intake_records=n_records,
        sha256=digest_file(out) or "",
    )
