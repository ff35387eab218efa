"""IntakeSweepWorkflow: run by a Temporal Schedule; starts a CaptureWorkflow for every due record.

The sweep itself is an activity (it reads the intake folder and talks to the Temporal client), so this
workflow stays deterministic and tiny.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from tempomem.messages.capture import SWEEP, SweepInput, SweepResult


@workflow.defn(name="IntakeSweepWorkflow")
class IntakeSweepWorkflow:
    @workflow.run
    async def run(self, inp: SweepInput) -> SweepResult:
        return await workflow.execute_activity(
            SWEEP,
            inp,
            result_type=SweepResult,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary="start capture workflows for due intake records",
        )
