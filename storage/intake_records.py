"""What an intake record is: its payload, processing state, receipt and view models, the record id (the
SHA-256 of the run id), instants as stored, and building a bounded payload from a completed turn
(INTAKE-02, INTAKE-07, INTAKE-08, INTAKE-11, AMB-12, AMB-29). No file access: ``storage.intake`` owns the
folders."""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tempomem.storage.admission_rules import (
    SourceLabel,
    WriteMode,
    capture_parts,
    host_summary,
    source_label,
)
from tempomem.storage.instants import format_instant
from tempomem.storage.limits import (
    MAX_RECORD_BYTES,
    RUN_ID_HASH_HEX_LEN,
)
from tempomem.storage.turn import CompletedTurn

Tier = Literal["lite", "journal", "bujo"]
_OPTIONAL_EXTENSIONS = ("recurate_of", "model_override")
_RECORD_NAME = re.compile(f"[0-9a-f]{{{RUN_ID_HASH_HEX_LEN}}}")


def is_record_name(name: str) -> bool:
    return _RECORD_NAME.fullmatch(name) is not None


RECORD_VERSION = 1


TRUNCATION_MARKER = "\n[capture text truncated]"


class IntakeError(Exception):
    """Base of every typed intake failure; stored state is untouched when one is raised."""


class IntakeConflictError(IntakeError):
    """INTAKE-04: the run id was admitted before with different payload bytes."""


class IntakeCapacityError(IntakeError):
    """AMB-11: 4,096 active records already; a new run id is refused, nothing is pruned."""


class IntakeCorruptError(IntakeError):
    """A record on disk is malformed, unsafe (symlink, foreign owner) or inconsistent."""


class IntakeIntegrityError(IntakeCorruptError):
    """The permanent ledger, its catalog or the schema marker fail their checks (INTAKE-25..27)."""


class UnknownRecordError(IntakeError):
    """No record with that id in the state asked for."""


class RetainedPlanError(IntakeError):
    """CLI-05: ``resolve`` refuses to drop a record holding a recoverable retained semantic plan."""


class RecordState(StrEnum):
    PENDING = "pending"
    DEAD = "dead"
    RESOLVED = "resolved"


class FailureCategory(StrEnum):
    """AMB-29: the bounded failure vocabulary shown to operators (never a message text)."""

    LLM_TIMEOUT = "llm_timeout"
    LLM_ERROR = "llm_error"
    INVALID_OUTPUT = "invalid_output"
    EMBEDDING_UNAVAILABLE = "embedding_unavailable"
    INDEX_ERROR = "index_error"
    STORAGE_ERROR = "storage_error"
    SHUTDOWN_ABORT = "shutdown_abort"
    UNKNOWN = "unknown"


class IntakePayload(BaseModel):
    """The immutable admitted fields. Its canonical bytes are what INTAKE-03/04 compare."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    version: int
    id: str
    run_id: str
    admitted_at: str
    write_mode: WriteMode
    tier: Tier
    speaker_kind: str
    trigger_kind: str
    source_label: SourceLabel
    conversation_id: str
    summary: str
    # writeMode "capture" only: the owner's (approved) text and the assistant answer, bounded (AMB-12).
    capture_user_text: str | None = None
    capture_answer: str | None = None
    # Re-curation only (issue #6 item 2): the original intake id and an optional ``memory.llm.model``
    # override. Absent (None) they are left out of the canonical bytes, so every record admitted before
    # these fields existed keeps its exact bytes and sha256 (INTAKE-03, the ledger).
    recurate_of: str | None = None
    model_override: str | None = None

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        data = super().model_dump(**kwargs)
        for key in _OPTIONAL_EXTENSIONS:
            if key in data and data[key] is None:
                del data[key]
        return data


class ProcessingState(BaseModel):
    """Mutable, content-free processing state (INTAKE-18)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    state: RecordState = RecordState.PENDING
    attempts: int = 0
    revision: int = 0
    due_at: str | None = None  # None = due now
    failure_category: FailureCategory | None = None
    updated_at: str | None = None
    # A validated capture plan kept with the record (CAP-75); ``resolve`` refuses to drop one (CLI-05).
    retained_plan: bool = False


class Receipt(BaseModel):
    """Content-free proof that a run was resolved; keeps duplicate protection after retirement."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    id: str
    payload_sha256: str
    outcome: Literal["success", "operator_resolved"]
    admitted_at: str
    resolved_at: str
    attempts: int
    reason: str | None = None  # the operator's reason slug for operator_resolved


class RecordView(BaseModel):
    """What inspection may show: ids, states, instants, counters (CLI-03). Never text."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: RecordState
    admitted_at: str
    attempts: int
    revision: int
    due_at: str | None
    due: bool
    failure_category: FailureCategory | None
    write_mode: str
    tier: str


def intake_id(run_id: str) -> str:
    """INTAKE-02: sha256 of the run id, 64 lowercase hex characters."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()


def canonical_json(value: object) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8 (AMB-24 style)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def check_record_id(record_id: str) -> str:
    if not is_record_name(record_id):
        raise UnknownRecordError(f"not a 64-character lowercase hex intake id: {record_id[:80]!r}")
    return record_id


def build_payload(turn: CompletedTurn, *, write_mode: WriteMode, tier: Tier) -> IntakePayload:
    """The record a turn becomes. Deterministic: the same turn always yields the same bytes."""
    payload = IntakePayload(
        version=RECORD_VERSION,
        id=intake_id(turn.run_id),
        run_id=turn.run_id,
        admitted_at=format_instant(turn.admitted_at),
        write_mode=write_mode,
        tier=tier,
        speaker_kind=turn.speaker_kind,
        trigger_kind=turn.trigger_kind,
        source_label=source_label(turn),
        conversation_id=turn.conversation_id,
        summary=host_summary(turn),
    )
    if write_mode == "capture":
        user_text, answer = capture_parts(turn)
        payload = payload.model_copy(update={"capture_user_text": user_text, "capture_answer": answer})
    return _fit_record(payload)


def fit_record(payload: IntakePayload) -> IntakePayload:
    """Public face of the AMB-12 size rule, for records built outside ``build_payload`` (re-curation)."""
    return _fit_record(payload)


def _fit_record(payload: IntakePayload) -> IntakePayload:
    """AMB-12: truncate capture text at a UTF-8 boundary, with a marker, so the record stays ≤ 640 KiB.

    The owner's text is cut first, then the answer; the cut is deterministic, so a retried admission of
    the same turn is byte-identical (INTAKE-03).
    """
    for field in ("capture_user_text", "capture_answer"):
        size = len(canonical_json(payload.model_dump()))
        text = getattr(payload, field)
        # JSON escaping can make a byte cost more than one; shrink until it fits (a few rounds at most).
        while size > MAX_RECORD_BYTES and text:
            excess = size - MAX_RECORD_BYTES + len(TRUNCATION_MARKER.encode())
            raw = text.encode("utf-8")
            text = raw[: max(0, len(raw) - excess)].decode("utf-8", errors="ignore")
            payload = payload.model_copy(update={field: text + TRUNCATION_MARKER})
            size = len(canonical_json(payload.model_dump()))
    size = len(canonical_json(payload.model_dump()))
    if size > MAX_RECORD_BYTES:
        raise IntakeError(f"record is {size} bytes, more than {MAX_RECORD_BYTES}")
    return payload
