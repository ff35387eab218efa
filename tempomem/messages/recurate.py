"""What crosses Temporal for a re-curation: names, ids, inputs, results and progress counts — never
memory text.

Shared by the workflow (sandboxed) and its activities and starters, so this module imports nothing but
the stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass

RECURATE_WORKFLOW = "RecurateWorkflow"
RECURATE_ADMIT = "recurate.admit"
RECURATE_DRY_RUN = "recurate.dry_run"
PROGRESS_QUERY = "progress"


def recurate_workflow_id(store_id: str, run_id: str, *, dry_run: bool) -> str:
    return f"recurate-{'dry-' if dry_run else ''}{store_id}-{run_id}"


@dataclass
class RecurateProgress:
    """Content-free counts, answered by the ``progress`` query and returned as the result."""

    turns: int = 0  # archived turns of the range handled so far
    admitted: int = 0  # re-curation records admitted by this run
    duplicates: int = 0  # already admitted by an earlier run with the same run id
    resolved: int = 0
    dead: int = 0
    pending: int = 0  # left pending (the sweeper finishes them)
    model_calls: int = 0  # dry run: the scratch run's; real run: the sum over the captures' outcomes
    continue_as_new_runs: int = 0
    done: bool = False
    diff_path: str = ""  # dry run: the owner-only diff file on the worker host
    diff_sha256: str = ""
    files_changed: int = 0
    lines_added: int = 0  # dry run: of the diff; real run: lines the captures committed
    lines_removed: int = 0
    superseded: int = 0


@dataclass(frozen=True)
class RecurateInput:
    store_id: str
    run_id: str
    since: str  # YYYY-MM-DD, UTC admission day (inclusive)
    until: str | None = None  # YYYY-MM-DD inclusive; None = up to now
    model: str | None = None  # a memory.llm.model name override, never text
    dry_run: bool = False
    batch_size: int = 1  # turns admitted per activity
    window: int = 1  # captures in flight; commits stay in admission order whatever it is
    continue_as_new_every: int = 500
    first_delay_seconds: int = 60
    search_attributes: bool = False
    cursor_at: str = ""  # admission instant of the last archived turn handled (carried across runs)
    cursor_id: str = ""
    progress: RecurateProgress | None = None


@dataclass(frozen=True)
class RecurateAdmitInput:
    store_id: str
    run_id: str
    since: str
    until: str | None
    model: str | None
    cursor_at: str
    cursor_id: str
    max_items: int


@dataclass(frozen=True)
class RecurateAdmitResult:
    cursor_at: str
    cursor_id: str
    eof: bool
    turns: int
    admitted: int
    duplicates: int
    capture: list[str]  # derived intake ids whose records are pending (admitted now or earlier)
    tier: str
    write_mode: str


@dataclass(frozen=True)
class RecurateDryRunInput:
    store_id: str
    run_id: str
    since: str
    until: str | None
    model: str | None


@dataclass(frozen=True)
class RecurateDryRunResult:
    turns: int
    model_calls: int
    diff_path: str
    diff_sha256: str
    files_changed: int
    lines_added: int
    lines_removed: int
    superseded: int
