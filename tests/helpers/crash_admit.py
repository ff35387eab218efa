"""Admit one turn in a process that SIGKILLs itself at a chosen point inside admission.

Usage: python -m tests.helpers.crash_admit ROOT RUN_ID POINT
POINT: after_record (record fsynced, no ledger entry) | before_catalog (ledger append fsynced, catalog
not committed) | none (complete admission).
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import build_payload
from tempomem.storage.ledger import Ledger
from tempomem.storage.turn import CompletedTurn


def crash_turn(run_id: str) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id,
        conversation_id="crash:conv",
        final_answer=f"Answer for {run_id}.",
        admitted_at=datetime(2026, 12, 3, 12, 0, tzinfo=UTC),
    )


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    root, run_id, point = sys.argv[1:4]
    if point == "after_record":
        Intake.after_record_write = lambda self: die()  # type: ignore[method-assign]
    elif point == "before_catalog":
        Ledger.before_catalog_commit = lambda self: die()  # type: ignore[method-assign]
    intake = Intake(Path(root))
    print(intake.admit(build_payload(crash_turn(run_id), write_mode="append-host-summary", tier="lite")))


if __name__ == "__main__":
    main()
