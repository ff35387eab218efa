"""Extraction, review and reconciliation activities: names and contracts fixed now, logic in issue #4.

Until the capture pipeline lands, ``writeMode: "capture"`` is refused when a store opens (see
``tempomem.store``), so these are reached only by a record admitted by a newer build. They fail as a
non-retryable, categorised attempt rather than pretend to curate anything.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.context import StoreContext
from storage.intake import FailureCategory
from workflows.common import EXTRACT, RECONCILE, REVIEW, CurationInput, StageResult


class CurationActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    def _unavailable(self, inp: CurationInput, stage: str) -> StageResult:
        self.ctx.check(inp.store_id)
        raise ApplicationError(
            f"{stage} is not available in this build",
            type=FailureCategory.LLM_ERROR.value,
            non_retryable=True,
        )

    @activity.defn(name=EXTRACT)
    def extract(self, inp: CurationInput) -> StageResult:
        return self._unavailable(inp, "extraction")

    @activity.defn(name=REVIEW)
    def review(self, inp: CurationInput) -> StageResult:
        return self._unavailable(inp, "review")

    @activity.defn(name=RECONCILE)
    def reconcile(self, inp: CurationInput) -> StageResult:
        return self._unavailable(inp, "reconciliation")
