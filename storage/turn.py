"""The completed turn a host hands to tempomem (STORE-04, STORE-05, WM-*), and what admission did with it."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SpeakerKind = Literal["human-turn", "trigger", "unknown"]
TriggerKind = Literal["cron", "webhook", "none"]


class CompletedTurn(BaseModel):
    """One turn that reached the host's successful commit boundary (WM-08).

    ``admitted_at`` is the host-owned admission instant (INTAKE-08). A retried admission of the same turn
    must pass the same instant: the record's bytes, and so its duplicate check, depend on it (INTAKE-03).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, hide_input_in_errors=True)

    run_id: str = Field(min_length=1, max_length=1024)
    conversation_id: str = Field(min_length=1, max_length=4096)
    speaker_kind: SpeakerKind = "unknown"  # STORE-04: unknown is the default for direct callers
    trigger_kind: TriggerKind = "none"  # WM-16: host metadata only, never a conversation-id prefix
    user_text: str = ""
    final_answer: str
    capture_text: str | None = None  # host-approved capture text, used by writeMode "capture" only
    admitted_at: datetime

    @field_validator("run_id", "conversation_id", "user_text", "final_answer", "capture_text")
    @classmethod
    def _valid_unicode(cls, value: str | None) -> str | None:
        # A lone surrogate cannot be stored as UTF-8: refuse it here, naming the field, not at the write.
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("contains a lone surrogate (not valid Unicode text)") from None
        return value

    @field_validator("admitted_at")
    @classmethod
    def _aware_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("admitted_at must be timezone-aware")
        return value.astimezone(UTC)


class SkipReason(StrEnum):
    WRITE_DISABLED = "write_disabled"  # WM-02
    NO_OP_SENTINEL = "no_op_sentinel"  # WM-05, AMB-19
    CRON_SWITCH_OFF = "cron_switch_off"  # WM-15
    WEBHOOK_SWITCH_OFF = "webhook_switch_off"  # WM-15
    EMPTY_ANSWER = "empty_answer"  # append-host-summary with nothing to summarise


class AdmissionStatus(StrEnum):
    ADMITTED = "admitted"
    DUPLICATE = "duplicate"  # INTAKE-03: same run id, same bytes
    SKIPPED = "skipped"


class AdmissionResult(BaseModel):
    """Content-free: ids and flags only, safe to log."""

    model_config = ConfigDict(frozen=True)

    status: AdmissionStatus
    intake_id: str | None = None
    skip_reason: SkipReason | None = None
    workflow_started: bool = False
    warning: str | None = None  # e.g. Temporal unreachable: the record stays pending for the sweeper
    workflow_id: str | None = None  # the record's CaptureWorkflow id (set by MemoryStore on admission)
