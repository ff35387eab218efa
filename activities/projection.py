"""The projection activity: admitted record → tier Markdown → derived index (TIER-01..TIER-10)."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext
from tempomem.activities.heartbeat import run_blocking
from tempomem.storage.fsio import UnsafePathError, exclusive_lock
from tempomem.storage.intake import FailureCategory, IntakeError
from tempomem.storage.projection import project
from tempomem.storage.store_ref import STORE_LOCK
from tempomem.workflows.common import PROJECT, ProjectionResult, RecordRef


class ProjectionActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=PROJECT)
    async def project(self, ref: RecordRef) -> ProjectionResult:
        self.ctx.check(ref.store_id)
        try:
            return await run_blocking(lambda: self._project(ref))
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                # INTAKE-16: the drain deadline passed; this attempt is abandoned, the record stays pending.
                raise _failure(FailureCategory.SHUTDOWN_ABORT, TimeoutError()) from None
            raise

    def _project(self, ref: RecordRef) -> ProjectionResult:
        from tempomem.recall.embedding import EmbeddingError
        from tempomem.recall.index import MemoryIndex

        ctx = self.ctx
        try:
            payload = ctx.intake.load_payload(ref.intake_id)
        except IntakeError as exc:
            raise _failure(FailureCategory.STORAGE_ERROR, exc) from None
        if payload.recurate_of is not None:
            # A re-curation record: its observation was projected when the original turn was admitted.
            return ProjectionResult(target="audit", lines_added=0, indexed=0)
        # One writer per store: commits, projection and Remember all hold this lock (INTAKE-15).
        with exclusive_lock(ctx.root / STORE_LOCK):
            try:
                projected = project(ctx.root, payload)
            except (OSError, UnsafePathError) as exc:  # e.g. a day file that is a folder or a symlink
                raise _failure(FailureCategory.STORAGE_ERROR, exc) from None
            if projected.folder != "daily":
                return ProjectionResult(target=projected.folder, lines_added=len(projected.added), indexed=0)
            # Index even when the line already existed: a crash after the Markdown write must still
            # end with the line searchable (upsert is idempotent by id).
            embedder = ctx.embedder if payload.tier == "journal" else None
            try:
                indexed = MemoryIndex(ctx.root, embedder).upsert([(projected.day, projected.bullet)])
            except EmbeddingError as exc:
                raise _failure(FailureCategory.EMBEDDING_UNAVAILABLE, exc) from None
            except Exception as exc:
                raise _failure(FailureCategory.INDEX_ERROR, exc) from None
        return ProjectionResult(target="daily", lines_added=len(projected.added), indexed=indexed)


def _failure(category: FailureCategory, exc: BaseException) -> ApplicationError:
    """A content-free failure: the category and the exception type, never its message (may hold text)."""
    activity.logger.warning("projection failed: %s (%s)", category.value, type(exc).__name__)
    return ApplicationError(type(exc).__name__, type=category.value, non_retryable=True)
