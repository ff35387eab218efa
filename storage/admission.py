"""The whole admission of one completed turn: write-mode and skip rules → payload → the durable record.

Shared by ``MemoryStore.persist_completed_turn`` and the backfill activity, so both admit the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tempomem.storage.admission_rules import WriteMode, skip_reason
from tempomem.storage.intake_records import Tier, build_payload
from tempomem.storage.turn import AdmissionResult, AdmissionStatus, CompletedTurn

if TYPE_CHECKING:
    from tempomem.storage.intake import Intake


def admit_turn(
    intake: Intake,
    turn: CompletedTurn,
    *,
    tier: Tier,
    write_mode: WriteMode,
    capture_cron: bool | None = None,
    capture_webhook: bool | None = None,
) -> AdmissionResult:
    """The whole admission of one turn, without any workflow start: skip rules → payload → ``admit``.

    Everything that can reject the turn runs before the one durable write; ``admit`` itself
    changes nothing when it raises (conflict, capacity, corruption).
    """
    reason = skip_reason(
        turn, write_mode=write_mode, capture_cron=capture_cron, capture_webhook=capture_webhook
    )
    if reason is not None:
        return AdmissionResult(status=AdmissionStatus.SKIPPED, skip_reason=reason)
    payload = build_payload(turn, write_mode=write_mode, tier=tier)
    outcome = intake.admit(payload)
    status = AdmissionStatus.ADMITTED if outcome == "admitted" else AdmissionStatus.DUPLICATE
    return AdmissionResult(status=status, intake_id=payload.id)
