"""The strict, content-free health audit of a store's intake (CLI-13, INTAKE-31, AMB-02 vocabulary)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from tempomem.storage import replay_sidecar
from tempomem.storage.index_backlog import IndexBacklog
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import IntakeError, RecordState
from tempomem.storage.intake_tidy import (
    check_record,
    foreign_files,
    intake_folders,
    interrupted_resolves,
    leftover_temp_files,
    list_quarantined,
    orphan_side_files,
    quarantine_dir,
)
from tempomem.storage.ledger import LedgerIntegrityError
from tempomem.storage.limits import DIR_MODE
from tempomem.storage.markdown import damaged_bullets, iter_bullets

HealthStatus = Literal["ok", "in_progress", "dead_letters_present", "canonical_mismatch", "degraded"]


class HealthReport(BaseModel):
    status: HealthStatus
    counts: dict[str, int]
    ledger_entries: int | None
    problems: list[str]  # each names a check and an id, never content
    mismatches: list[str] = []  # sidecar entries whose lines are not in canonical Markdown (RPL-10)
    # Days whose lines a batch run's group commit has not indexed yet (issue #15 item 2): a running
    # backfill, or one that crashed and awaits the sweeper. Counted, never named by content.
    index_backlog_days: int = 0


def audit(
    root: Path, *, now: datetime, index_sessions: Mapping[str, str | None] | None = None
) -> HealthReport:
    """Worst state wins: degraded > canonical_mismatch > dead_letters_present > in_progress > ok.

    ``index_sessions`` (``MemoryIndex.provenance()``, passed in so storage never reads the index) adds
    PROV-14: an index row whose session disagrees with its canonical line is a mismatch.
    """
    intake = Intake(root)
    problems: list[str] = []
    entries: int | None = None
    counts = {"pending": 0, "due": 0, "dead": 0, "resolved": 0}
    if intake.base.exists():
        try:
            entries = intake.ledger.verify_all(intake.has_receipt)
        except LedgerIntegrityError as exc:
            problems.append(f"ledger: {exc}")
        for state in (RecordState.PENDING, RecordState.DEAD):
            folder = intake.pending_dir if state is RecordState.PENDING else intake.dead_dir
            for record_id in intake.list_ids(state):
                try:
                    reason = check_record(intake, folder, record_id)
                    view = intake.view(record_id, now=now) if reason is None else None
                except (IntakeError, LedgerIntegrityError) as exc:
                    reason = type(exc).__name__
                    view = None
                if view is None:
                    problems.append(f"record {record_id}: {reason}")
                    continue
                counts[state.value] += 1
                counts["due"] += int(view.due)
        counts["resolved"] = len(intake.list_ids(RecordState.RESOLVED))
        problems += _leftovers(intake)
        problems += _receipts_against_ledger(intake)
    problems += _modes(intake)
    problems += [f"damaged bullet: {where}" for where in damaged_bullets(Path(root), "daily")]
    mismatches = _sidecar_mismatches(Path(root), problems)
    if index_sessions is not None:
        mismatches += _session_mismatches(Path(root), index_sessions)
    backlog_days = len(IndexBacklog(Path(root)).marked_days())
    if problems:
        status: HealthStatus = "degraded"
    elif mismatches:
        status = "canonical_mismatch"
    elif counts["dead"]:
        status = "dead_letters_present"
    elif counts["pending"] or backlog_days:
        status = "in_progress"
    else:
        status = "ok"
    return HealthReport(
        status=status,
        counts=counts,
        ledger_entries=entries,
        problems=problems,
        mismatches=mismatches,
        index_backlog_days=backlog_days,
    )


def _sidecar_mismatches(root: Path, problems: list[str]) -> list[str]:
    """RPL-10: every replay-owned edge must name lines that exist in canonical daily Markdown."""
    try:
        projection = replay_sidecar.load(root)
    except replay_sidecar.SidecarError as exc:
        problems.append(f"sidecar: {exc.reason}")
        return []
    if not projection.entries:
        return []
    lines = {b.id for _, b in iter_bullets(root, "daily")}
    out = []
    for entry in projection.entries:
        ends = [entry.from_] + ([entry.to] if entry.kind in ("thread", "supersede") else [])
        missing = [end for end in ends if end not in lines]
        if missing:
            out.append(f"{entry.kind} {entry.id}: no canonical line {', '.join(missing)}")
    return out


def _session_mismatches(root: Path, index_sessions: Mapping[str, str | None]) -> list[str]:
    """PROV-14: rows in both places must name the same conversation (ids only, never the sessions)."""
    canonical = {b.id: b.source_session for _, b in iter_bullets(root, "daily")}
    return [
        f"index session {memory_id}: differs from the Markdown provenance"
        for memory_id in sorted(index_sessions.keys() & canonical.keys())
        if index_sessions[memory_id] != canonical[memory_id]
    ]


def _leftovers(intake: Intake) -> list[str]:
    """What a kill or a hand leaves behind, and what was quarantined (tidy repairs the first three)."""
    out = [f"leftover temp file: {p.relative_to(intake.root)}" for p in leftover_temp_files(intake)]
    out += [f"interrupted resolve: {i}" for i in interrupted_resolves(intake)]
    out += [f"orphan file: {p.relative_to(intake.root)}" for p in orphan_side_files(intake)]
    out += [f"foreign file: {p.relative_to(intake.root)}" for p in foreign_files(intake)]
    out += [f"quarantined {q.id}: {q.reason}" for q in list_quarantined(intake)]
    return out


def _receipts_against_ledger(intake: Intake) -> list[str]:
    """A receipt must carry the payload hash the ledger committed at admission."""
    out = []
    for record_id in intake.list_ids(RecordState.RESOLVED):
        try:
            receipt_hash = intake.receipt(record_id).payload_sha256
            committed = intake.ledger.lookup(record_id, lambda *_: False)
        except (IntakeError, LedgerIntegrityError) as exc:
            out.append(f"receipt {record_id}: {type(exc).__name__}")
            continue
        if committed is not None and committed != receipt_hash:
            out.append(f"receipt {record_id}: payload hash differs from the ledger")
    return out


def _modes(intake: Intake) -> list[str]:
    """Owner-only folders (LIM-11): 0700 for the root and every intake folder."""
    out = []
    folders = [*intake_folders(intake), quarantine_dir(intake)]
    for folder in folders:
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISDIR(st.st_mode) or mode != DIR_MODE:
            out.append(
                f"mode: {folder.relative_to(intake.root) if folder != intake.root else '.'} is {mode:o}, "
                f"expected {DIR_MODE:o}"
            )
    return out
