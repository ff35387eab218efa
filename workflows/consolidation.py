"""ConsolidationWorkflow: regenerate ``index.md`` on a Temporal Schedule (TIER-13, AMB-01, GRAPH-12..14).

Projection-only: one activity on the store's worker, no model call, no canonical mutation. The input is
the store id; the result is counts and a digest of the index.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from tempomem.messages.consolidation import (
        CONSOLIDATE,
        CONSOLIDATION_WORKFLOW,
        ConsolidationInput,
        ConsolidationResult,
    )


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
