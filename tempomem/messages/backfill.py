"""What crosses Temporal for a backfill: names, ids, the source reference, inputs, results and progress
counts — never memory text.

Shared by the workflow (sandboxed) and its activities and starters, so this module imports nothing but
the stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BACKFILL_WORKFLOW = "BackfillWorkflow"
ADMIT_BATCH = "backfill.admit_batch"
PROGRESS_QUERY = "progress"

MAX_REPORTED_BAD_LINES = 100  # the count is exact; only the first line numbers are kept
SOURCE_FORMATS = ("jsonl", "locomo-turns", "locomo-pairs")


def backfill_workflow_id(store_id: str, digest: str) -> str:
    """One backfill per store and file content: re-running the same file finds (or re-runs) it."""
    return f"backfill-{store_id}-{digest}"


@dataclass(frozen=True)
class BackfillSource:
    path: str  # absolute, on the worker host that owns the store
    digest: str  # sha256 of the file's bytes; the activity refuses a file that changed
    format: str  # one of SOURCE_FORMATS


@dataclass(frozen=True)
class BadLine:
    line: int  # 1-based line number (JSONL) or turn ordinal (LoCoMo)
    reason: str  # content-free: field names and error codes, never text


@dataclass
class BackfillProgress:
    """Content-free counts answered by the ``progress`` query and returned as the result."""

    total: int = 0  # data lines (JSONL) or turns (LoCoMo) in the file, known after the first batch
    read: int = 0  # data lines read so far, bad ones included
    admitted: int = 0
    duplicates: int = 0
    skipped: int = 0
    bad_lines: int = 0
    completed: int = 0  # captures awaited to their end; minus resolved and dead = left pending (sweeper)
    resolved: int = 0  # records resolved when their capture ended
    dead: int = 0  # records dead-lettered (``tempomem retry`` makes them due again)
    settled: int = 0  # lines fully handled: bad, skipped, already processed, or captured to the end
    in_flight: int = 0
    continue_as_new_runs: int = 0
    done: bool = False
    bad: list[BadLine] = field(default_factory=list)  # the first MAX_REPORTED_BAD_LINES


@dataclass(frozen=True)
class BackfillInput:
    store_id: str
    source: BackfillSource
    position: int = 0  # last line number (JSONL) / turn ordinal (LoCoMo) already consumed
    byte_offset: int = 0  # JSONL: where the line after ``position`` starts
    window: int = 8  # capture children in flight
    batch_size: int = 64  # lines per admission activity
    continue_as_new_every: int = 500  # lines per run before continuing as new
    first_delay_seconds: int = 60  # passed to each CaptureWorkflow (AMB-10 schedule scale)
    poll_seconds: int = 2  # first poll interval when another starter owns a record's capture
    search_attributes: bool = False  # the Tempomem* attributes are registered on the namespace
    progress: BackfillProgress | None = None  # carried across continue-as-new


@dataclass(frozen=True)
class AdmitBatchInput:
    store_id: str
    source: BackfillSource
    position: int
    byte_offset: int
    max_items: int


@dataclass(frozen=True)
class AdmitBatchResult:
    position: int
    byte_offset: int
    eof: bool
    total: int
    read: int
    admitted: int
    duplicates: int
    skipped: int
    bad: list[BadLine]
    capture: list[str]  # intake ids whose records are pending: admitted now, or by an earlier try
    tier: str
    write_mode: str
