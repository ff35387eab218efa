"""What every activity of one store needs: its root, tier, write mode and (optionally) embedder."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tempomem.capture.settings import CaptureSettings
from tempomem.storage.commit_order import CommitOrder
from tempomem.storage.index_backlog import IndexBacklog
from tempomem.storage.intake import Intake
from tempomem.storage.store_ref import store_id
from tempomem.storage.turn_archive import TURN_ARCHIVE_DAYS_DEFAULT

if TYPE_CHECKING:
    from temporalio.client import Client

    from tempomem.recall.embedding import EmbeddingProvider


class WrongStoreError(Exception):
    """A task for another memory root reached this worker (mis-routed task queue)."""


@dataclass
class StoreContext:
    root: Path
    tier: str  # lite | journal | bujo
    write_mode: str
    task_queue: str
    embedder: EmbeddingProvider | None = None
    client: Client | None = None  # the sweeper starts workflows through it
    first_delay_seconds: int = 60
    capture: CaptureSettings | None = None
    turn_archive_days: int = TURN_ARCHIVE_DAYS_DEFAULT  # memory.capture.turnArchiveDays
    # Set by run_worker when it runs this store's model stages on their own queue (issue #15 item 1).
    model_task_queue: str | None = None
    # Shared by every store a process runs, to cap the process's model calls (run_worker model_slots).
    model_slots: asyncio.Semaphore | None = None
    store_id: str = field(init=False)
    # One Intake per context, so a SnapshotPublisher attached to it sees every transition.
    intake: Intake = field(init=False)
    commit_order: CommitOrder = field(init=False)
    index_backlog: IndexBacklog = field(init=False)  # batch runs' deferred index updates (issue #15)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.store_id = store_id(self.root)
        self.intake = Intake(self.root)
        self.intake.archive_days = self.turn_archive_days
        self.commit_order = CommitOrder(self.intake)
        self.index_backlog = IndexBacklog(self.root)

    def check(self, requested_store_id: str) -> None:
        if requested_store_id != self.store_id:
            raise WrongStoreError(
                f"task for store {requested_store_id} reached the worker of {self.store_id}"
            )


def utc_now() -> datetime:
    return datetime.now(UTC)
