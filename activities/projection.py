"""The projection activity: admitted record → tier Markdown → derived index (TIER-01..TIER-10)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext
from tempomem.activities.heartbeat import run_blocking
from tempomem.messages.capture import INDEX_FLUSH, PROJECT, ProjectionResult, RecordRef
from tempomem.storage.fsio import UnsafePathError, exclusive_lock
from tempomem.storage.intake_records import FailureCategory, IntakeError
from tempomem.storage.projection import project
from tempomem.storage.store_ref import STORE_LOCK

if TYPE_CHECKING:
    from tempomem.recall.embedding import EmbeddingProvider
    from tempomem.recall.index import MemoryIndex


class ProjectionActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=PROJECT)
    async def project(self, ref: RecordRef) -> ProjectionResult:
        self.ctx.check(ref.store_id)
        try:
            return await run_blocking(lambda: self.project_now(ref, group_index=False))
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                # INTAKE-16: the drain deadline passed; this attempt is abandoned, the record stays pending.
                raise _failure(FailureCategory.SHUTDOWN_ABORT, TimeoutError()) from None
            raise

    @activity.defn(name=INDEX_FLUSH)
    async def flush_index(self, store_id: str) -> int:
        """Index what the group commit still holds, and the days crash-left markers name (issue #15).
        Returns the lines handed to the index (content-free)."""
        self.ctx.check(store_id)
        return await run_blocking(self.flush_now)

    def flush_now(self) -> int:
        from tempomem.recall.index import MemoryIndex

        ctx = self.ctx
        with exclusive_lock(ctx.root / STORE_LOCK):
            try:
                return ctx.index_backlog.flush(MemoryIndex(ctx.root, self._embedder()))
            except (OSError, UnsafePathError) as exc:  # a marked day's file could not be read
                raise _failure(FailureCategory.STORAGE_ERROR, exc) from None
            except Exception as exc:
                raise _index_failure(exc) from None

    def _embedder(self) -> EmbeddingProvider | None:
        return self.ctx.embedder if self.ctx.tier == "journal" else None

    def project_now(self, ref: RecordRef, *, group_index: bool) -> ProjectionResult:
        """Project the record (blocking). ``group_index``: a batch run's line joins the group commit
        instead of its own upsert; a full or aged group is flushed here."""
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
                if projected.folder == "daily" and group_index:
                    ctx.index_backlog.add(projected.day, projected.bullet)  # durable before the resolve
            except (OSError, UnsafePathError) as exc:  # e.g. a day file that is a folder or a symlink
                raise _failure(FailureCategory.STORAGE_ERROR, exc) from None
            if projected.folder != "daily":
                return ProjectionResult(target=projected.folder, lines_added=len(projected.added), indexed=0)
            embedder = ctx.embedder if payload.tier == "journal" else None
            index = MemoryIndex(ctx.root, embedder)
            if group_index:
                return ProjectionResult("daily", len(projected.added), self._flush_if_due(index))
            # Index even when the line already existed: a crash after the Markdown write must still
            # end with the line searchable (upsert is idempotent by id).
            try:
                indexed = index.upsert([(projected.day, projected.bullet)])
            except Exception as exc:
                raise _index_failure(exc) from None
        return ProjectionResult(target="daily", lines_added=len(projected.added), indexed=indexed)

    def _flush_if_due(self, index: MemoryIndex) -> int:
        """A failed group flush does not fail this turn: its line is in Markdown and marked, and the
        group is flushed again by the next turn or by the batch run's own ``index.flush``, which fails
        visibly."""
        if not self.ctx.index_backlog.due():
            return 0
        try:
            return self.ctx.index_backlog.flush(index)
        except Exception as exc:
            activity.logger.warning("group index flush deferred: %s", type(exc).__name__)
            return 0


def _failure(category: FailureCategory, exc: BaseException) -> ApplicationError:
    """A content-free failure: the category and the exception type, never its message (may hold text)."""
    activity.logger.warning("projection failed: %s (%s)", category.value, type(exc).__name__)
    return ApplicationError(type(exc).__name__, type=category.value, non_retryable=True)


def _index_failure(exc: Exception) -> ApplicationError:
    """An index update that failed: the embedder was unavailable, or the index itself failed."""
    from tempomem.recall.embedding import EmbeddingError

    if isinstance(exc, EmbeddingError):
        return _failure(FailureCategory.EMBEDDING_UNAVAILABLE, exc)
    return _failure(FailureCategory.INDEX_ERROR, exc)
