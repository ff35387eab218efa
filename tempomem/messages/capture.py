"""What crosses Temporal for one turn's capture and the sweep: workflow and activity names, ids, and the
inputs and results — ids, counts, digests and flags only, never memory text.

Shared by workflows (sandboxed) and activities, so this module imports nothing but the stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass

CAPTURE_WORKFLOW = "CaptureWorkflow"
SWEEP_WORKFLOW = "IntakeSweepWorkflow"

# Activity names: the workflow's shape is fixed here even where a stage arrives later (issue #4).
BEGIN_ATTEMPT = "intake.begin_attempt"
RECORD_FAILURE = "intake.record_failure"
DEAD_LETTER = "intake.dead_letter"
RESOLVE = "intake.resolve"
SWEEP = "intake.sweep"
PROJECT = "capture.project"
EXTRACT = "capture.extract"
REVIEW = "capture.review"
RECONCILE = "capture.reconcile"
SETTLE = "capture.settle"  # local activity: begin the attempt; settle a Lite or Journal turn in it
INDEX_FLUSH = "index.flush"  # the group commit's remainder, at the end of a batch run
RECORD_STATE = "backfill.record_state"  # a batch child's record on disk; registered on every worker
# Signalled to a capture waiting for its turn to commit when the turn ahead of it stops being in flight.
COMMIT_TURN_SIGNAL = "commit_turn"


# Versioned change (#13 item 3): child captures started by backfill and re-curation carry the store id.
STORE_SCOPED_IDS = "store-scoped-capture-ids-v1"


def capture_workflow_id(store_id: str, intake_id: str) -> str:
    """``capture-<store id>-<64-hex intake id>``: a start for the same run of the same store is
    idempotent, and two stores that admit the same run id never share a workflow (ARCHITECTURE.md)."""
    return f"capture-{store_id}-{intake_id}"


def model_task_queue(task_queue: str) -> str:
    """The queue a store's model stages run on when they run in parallel (``memory.llm.concurrency``)."""
    return f"{task_queue}-model"


def legacy_capture_workflow_id(intake_id: str) -> str:
    """The id form used before store ids were written (still open in older stores, and in histories)."""
    return f"capture-{intake_id}"


@dataclass(frozen=True)
class CaptureInput:
    intake_id: str
    store_id: str
    # Scales the AMB-10 schedule; 60 s in production, a few seconds in tests.
    first_delay_seconds: int = 60
    # True when the namespace has the Tempomem* search attributes registered (older inputs lack it).
    search_attributes: bool = False
    # Set by batch workflows (backfill): a Lite or Journal line's index update joins the group commit.
    group_index: bool = False


@dataclass(frozen=True)
class RecordRef:
    intake_id: str
    store_id: str


@dataclass(frozen=True)
class SettleInput:
    intake_id: str
    store_id: str
    # A batch run's child: the index update joins the store's group commit (issue #15 item 2).
    group_index: bool = False
    # A capture-mode turn's observation is projected in this step too (patch "capture-lean-steps-v1"),
    # so no projection activity takes the store's serial queue; False in inputs recorded before it.
    project_capture: bool = False


@dataclass(frozen=True)
class AttemptInfo:
    attempt: int
    pending: bool
    write_mode: str
    tier: str
    # Where extraction and review run: the store's model queue when its worker runs them in parallel
    # (issue #15); None (and in results recorded before it existed) on the store's own serial queue.
    model_task_queue: str | None = None
    # Set by capture.settle, which also projects and resolves a turn of a non-capture write mode in the
    # same step (issue #15 item 2); absent from results recorded before it existed.
    settled: bool = False  # projected and resolved: the capture is done
    lines_added: int = 0
    failure: str | None = None  # the AMB-29 category of a failed projection or resolve (no message)
    projected: bool = False  # a capture-mode turn's observation projected here (``project_capture``)


@dataclass(frozen=True)
class FailureInput:
    intake_id: str
    store_id: str
    category: str
    retry_in_seconds: int


@dataclass(frozen=True)
class CurationInput:
    intake_id: str
    store_id: str
    final_attempt: bool
    # False once the capture waited ORDER_WAIT_MAX for earlier turns: then it commits without waiting.
    ordered: bool = True
    # Extraction and review: also say whether an earlier-admitted turn is in flight when the stage ends
    # (StageResult.turn_ahead), so the workflow waits for its turn before dispatching reconciliation.
    ask_order: bool = False


@dataclass(frozen=True)
class StageResult:
    """Counts and a digest of what a stage persisted to the intake record."""

    model_calls: int
    items: int
    digest: str
    # Extraction only: whether any line is eligible for review (CAP-40). False lets the workflow skip the
    # review activity; absent from payloads recorded before it existed, hence True (review runs).
    review_needed: bool = True
    # Reconciliation only: an earlier-admitted turn is still in flight, so nothing was decided or written;
    # the workflow waits for its turn (COMMIT_TURN_SIGNAL) and asks again.
    deferred: bool = False
    # Extraction and review asked with ``ask_order``: an earlier-admitted turn was in flight as the stage
    # ended. The workflow waits for COMMIT_TURN_SIGNAL before its first reconciliation (one dispatch of
    # the serial queue fewer); reconciliation still checks the order itself.
    turn_ahead: bool = False


@dataclass(frozen=True)
class ProjectionResult:
    target: str  # "daily" | "audit"
    lines_added: int
    indexed: int


@dataclass(frozen=True)
class CaptureOutcome:
    intake_id: str
    state: str  # "resolved" | "dead" | "not_pending"
    attempts: int
    lines_added: int  # projection lines plus lines the reconciliation added (ADD, SUPERSEDE)
    model_calls: int = 0  # of the successful attempt; absent from results recorded before it existed


@dataclass(frozen=True)
class CaptureStatus:
    """Content-free snapshot answered by the ``status`` query."""

    intake_id: str
    state: str
    attempt: int
    stage: str
    last_failure: str | None


@dataclass(frozen=True)
class SweepInput:
    store_id: str


@dataclass(frozen=True)
class SweepResult:
    due: int
    started: int
    already_running: int
    indexed: int = 0  # lines a crashed batch run's group commit left unindexed, indexed by this sweep
