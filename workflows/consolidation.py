"""ConsolidationWorkflow: regenerate ``index.md`` on a Temporal Schedule (TIER-13, AMB-01, GRAPH-12..14).

Projection-only: one activity on the store's worker, no model call, no canonical mutation. The input is
the store id; the result is counts and a digest of the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

CONSOLIDATION_WORKFLOW = "ConsolidationWorkflow"
CONSOLIDATE = "consolidation.regenerate_index"


def consolidation_workflow_id(store_id: str) -> str:
    return f"tempomem-consolidate-run-{store_id}"


@dataclass(frozen=True)
class ConsolidationInput:
    store_id: str


@dataclass(frozen=True)
class ConsolidationResult:
    """Content-free: what ``index.md`` now holds, in counts, and its digest."""

    index_sha256: str
    index_bytes: int
    changed: bool
    daily_lines: int
    duplicate_groups: int
    duplicate_lines: int
    graph_rows: int
    graph_rows_scanned: int
    graph_truncated: bool
    graph_error: str | None
    entity_groups: int
    entity_groups_shown: int


@workflow.defn(name=CONSOLIDATION_WORKFLOW)
class ConsolidationWorkflow:
    @workflow.run
    async def run(self, inp: ConsolidationInput) -> ConsolidationResult:
        return await workflow.execute_activity(
            CONSOLIDATE,
            inp,
            result_type=ConsolidationResult,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(seconds=30),
            # Read-only apart from the atomic index.md write, so a retry is always safe.
            retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["wrong_store"]),
            summary="regenerate index.md (no model call, no canonical mutation)",
        )
