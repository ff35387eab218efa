"""Keeping the intake honest after kills and hand edits: quarantine and tidy (issue #13, items 2, 6, 7, 10).

* ``check_record`` says why a pending or dead record cannot be trusted (content-free reason), or None.
* ``quarantine`` moves such a record, with its state and plan, to ``.capture-intake/quarantine/`` and
  writes a content-free reason file: it is never curated, never stops the worker, and is reported by
  ``health`` and ``inspect`` by id and reason.
* ``tidy`` (the worker runs it at start) removes what a SIGKILL can leave behind: temp files of
  ``atomic_write``, the payload/state/plan beside a receipt (a resolve killed before its unlinks), state
  and plan files without a payload; it finishes a ledger commitment a kill interrupted, and quarantines
  records that fail ``check_record``.

Everything runs under the intake lock, which every intake writer holds, so no live write is touched.
The snapshot publisher writes without that lock: a temp file of this process is removed only after
its writer let go of it (``one_writer``), and the publisher rewrites one another process removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from tempomem.storage.fsio import (
    UnsafePathError,
    atomic_write,
    ensure_private_dir,
    fsync_dir,
    one_writer,
    read_private_file,
)
from tempomem.storage.instants import format_instant
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import IntakePayload, ProcessingState, RecordState, canonical_json
from tempomem.storage.limits import MAX_RECORD_BYTES

QUARANTINE_DIR = "quarantine"
_TEMP = re.compile(r"^\..+\.tmp-(\d+)$")
_SIDE_FILE = re.compile(r"^([0-9a-f]{64})\.(state|plan)\.json$")
_RECORD = re.compile(r"^[0-9a-f]{64}$")


class QuarantinedRecord(BaseModel):
    """Content-free: which record, why, when."""

    model_config = ConfigDict(frozen=True)

    id: str
    reason: str
    at: str


class TidyReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    temp_files_removed: int = 0
    resolves_finished: int = 0
    orphans_removed: int = 0
    commitments_finished: int = 0
    quarantined: list[QuarantinedRecord] = []


def quarantine_dir(intake: Intake) -> Path:
    return intake.base / QUARANTINE_DIR


def check_record(intake: Intake, folder: Path, record_id: str) -> str | None:
    """Why the record ``folder/record_id`` cannot be curated, or None when it can."""
    try:
        data = read_private_file(folder / record_id, max_bytes=MAX_RECORD_BYTES, strict=True)
    except UnsafePathError:
        return "unsafe_file"  # a symlink, another owner, extra links, wrong mode or too large
    except OSError:
        return "unreadable"
    try:
        payload = IntakePayload.model_validate_json(data)
    except ValidationError:
        return "malformed"
    if payload.id != record_id:
        return "wrong_id"
    state = folder / f"{record_id}.state.json"
    if os.path.lexists(state):
        try:
            ProcessingState.model_validate_json(
                read_private_file(state, max_bytes=MAX_RECORD_BYTES, strict=True)
            )
        except (UnsafePathError, OSError, ValidationError):
            return "state_malformed"
    committed = intake.ledger.lookup(record_id, intake.has_receipt)
    if committed is not None and committed != hashlib.sha256(data).hexdigest():
        return "payload_changed"  # edited after admission: the ledger commits other bytes
    return None


def quarantine(
    intake: Intake, folder: Path, record_id: str, reason: str, *, now: datetime
) -> QuarantinedRecord:
    """Move a record out of the flow (caller holds the intake lock). Nothing is deleted."""
    target = ensure_private_dir(quarantine_dir(intake))
    entry = QuarantinedRecord(id=record_id, reason=reason, at=format_instant(now))
    atomic_write(target / f"{record_id}.reason.json", canonical_json(entry.model_dump()))
    for name in (f"{record_id}.state.json", f"{record_id}.plan.json", record_id):
        if os.path.lexists(folder / name):
            os.replace(folder / name, target / name)
    fsync_dir(target)
    fsync_dir(folder)
    return entry


def quarantine_if_corrupt(intake: Intake, record_id: str, *, now: datetime) -> QuarantinedRecord | None:
    """Check one pending or dead record under the lock; quarantine it when it cannot be trusted."""
    with intake.lock():
        for folder in (intake.pending_dir, intake.dead_dir):
            if os.path.lexists(folder / record_id):
                reason = check_record(intake, folder, record_id)
                if reason is not None:
                    return quarantine(intake, folder, record_id, reason, now=now)
    return None


def list_quarantined(intake: Intake) -> list[QuarantinedRecord]:
    folder = quarantine_dir(intake)
    found = []
    for name in sorted(_names(folder)):
        if name.endswith(".reason.json"):
            try:
                found.append(QuarantinedRecord.model_validate_json(read_private_file(folder / name)))
            except (UnsafePathError, OSError, ValidationError):
                found.append(QuarantinedRecord(id=name.removesuffix(".reason.json"), reason="unknown", at=""))
    return found


def intake_folders(intake: Intake) -> list[Path]:
    """The root and every folder the intake writes (health checks their modes, tidy their temp files)."""
    return [intake.root, intake.base, intake.pending_dir, intake.dead_dir, intake.resolved_dir,
            intake.base / "ledger"]  # fmt: skip


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):  # a file in a folder's place is reported elsewhere
        return []


def leftover_temp_files(intake: Intake) -> list[Path]:
    """``atomic_write`` temp files in the intake folders (a writer killed between create and rename)."""
    return [folder / n for folder in intake_folders(intake) for n in _names(folder) if _TEMP.match(n)]


def interrupted_resolves(intake: Intake) -> list[str]:
    """Ids with a receipt and still a payload, state or plan file beside it."""
    found = set()
    for folder in (intake.pending_dir, intake.dead_dir):
        for name in _names(folder):
            if (_RECORD.match(name) or _SIDE_FILE.match(name)) and os.path.lexists(
                intake.resolved_dir / f"{name[:64]}.receipt.json"
            ):
                found.add(name[:64])
    return sorted(found)


_RECEIPT = re.compile(r"^[0-9a-f]{64}\.receipt\.json$")


def foreign_files(intake: Intake) -> list[Path]:
    """Files in the record folders that tempomem never writes there (reported, never read or moved)."""
    found = []
    for folder in (intake.pending_dir, intake.dead_dir):
        found += [
            folder / n
            for n in _names(folder)
            if not (_RECORD.match(n) or _SIDE_FILE.match(n) or _TEMP.match(n))
        ]
    folder = intake.resolved_dir
    found += [folder / n for n in _names(folder) if not (_RECEIPT.match(n) or _TEMP.match(n))]
    return sorted(found)


def orphan_side_files(intake: Intake) -> list[Path]:
    """State or plan files whose payload is gone (and that no receipt explains)."""
    found = []
    for folder in (intake.pending_dir, intake.dead_dir):
        for name in _names(folder):
            match = _SIDE_FILE.match(name)
            if match and not any(
                os.path.lexists(p)
                for p in (folder / match.group(1), intake.resolved_dir / f"{match.group(1)}.receipt.json")
            ):
                found.append(folder / name)
    return found


def tidy(intake: Intake, *, now: datetime) -> TidyReport:
    """Repair what kills leave behind and quarantine what cannot be trusted (see the module docstring)."""
    if not intake.root.exists():
        return TidyReport()
    with intake.lock():
        # The intake lock keeps intake writers out; a writer of this process that takes no intake lock
        # (the snapshot publisher) is waited for by its temp name, so only true leftovers go.
        temp = [path for path in leftover_temp_files(intake) if _unlink_leftover(path)]
        finished = interrupted_resolves(intake)
        for record_id in finished:
            for folder in (intake.pending_dir, intake.dead_dir):
                for name in (record_id, f"{record_id}.state.json", f"{record_id}.plan.json"):
                    _unlink(folder / name)
        orphans = orphan_side_files(intake)
        for path in orphans:
            _unlink(path)
        quarantined: list[QuarantinedRecord] = []
        commitments = 0
        for state, folder in ((RecordState.PENDING, intake.pending_dir), (RecordState.DEAD, intake.dead_dir)):
            for record_id in intake.list_ids(state):
                reason = check_record(intake, folder, record_id)
                if reason is not None:
                    quarantined.append(quarantine(intake, folder, record_id, reason, now=now))
                    continue
                # a kill between the record write and its ledger append: finish the commitment
                digest = hashlib.sha256(read_private_file(folder / record_id)).hexdigest()
                if intake.ledger.append(record_id, digest, intake.has_receipt):
                    commitments += 1
        for folder in (intake.pending_dir, intake.dead_dir):
            if folder.exists():
                fsync_dir(folder)
    return TidyReport(
        temp_files_removed=len(temp),
        resolves_finished=len(finished),
        orphans_removed=len(orphans),
        commitments_finished=commitments,
        quarantined=quarantined,
    )


def _unlink_leftover(path: Path) -> bool:
    """Remove a temp file once no thread of this process writes it; False when it was renamed meanwhile."""
    with one_writer(path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
    return True


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
