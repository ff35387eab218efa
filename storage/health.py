"""The strict, content-free health audit of a store's intake (CLI-13, INTAKE-31, AMB-02 vocabulary)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from tempomem.storage import replay_projection
from tempomem.storage.intake import Intake, IntakeError, RecordState
from tempomem.storage.ledger import LedgerIntegrityError
from tempomem.storage.markdown import iter_bullets

HealthStatus = Literal["ok", "in_progress", "dead_letters_present", "canonical_mismatch", "degraded"]


class HealthReport(BaseModel):
    status: HealthStatus
    counts: dict[str, int]
    ledger_entries: int | None
    problems: list[str]  # each names a check and an id, never content
    mismatches: list[str] = []  # sidecar entries whose lines are not in canonical Markdown (RPL-10)


def audit(root: Path, *, now: datetime) -> HealthReport:
    """Worst state wins: degraded > dead_letters_present > in_progress > ok."""
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
            for record_id in intake.list_ids(state):
                try:
                    view = intake.view(record_id, now=now)
                except IntakeError as exc:
                    problems.append(f"record {record_id}: {type(exc).__name__}")
                    continue
                counts[state.value] += 1
                counts["due"] += int(view.due)
        counts["resolved"] = len(intake.list_ids(RecordState.RESOLVED))
    mismatches = _sidecar_mismatches(Path(root), problems)
    if problems:
        status: HealthStatus = "degraded"
    elif mismatches:
        status = "canonical_mismatch"
    elif counts["dead"]:
        status = "dead_letters_present"
    elif counts["pending"]:
        status = "in_progress"
    else:
        status = "ok"
    return HealthReport(
        status=status, counts=counts, ledger_entries=entries, problems=problems, mismatches=mismatches
    )


def _sidecar_mismatches(root: Path, problems: list[str]) -> list[str]:
    """RPL-10: every replay-owned edge must name lines that exist in canonical daily Markdown."""
    try:
        projection = replay_projection.load(root)
    except replay_projection.SidecarError as exc:
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
