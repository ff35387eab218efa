"""``MemoryStore``: the host-facing API — admit completed turns, search, rebuild (STORE-01, STORE-13)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from activities.context import CaptureSettings, StoreContext
from activities.sweep import start_capture
from storage.intake import Intake, admit_turn
from storage.snapshot import Sink, SnapshotPublisher
from storage.store_ref import store_id, task_queue
from storage.turn import AdmissionResult, AdmissionStatus, CompletedTurn
from storage.turn_archive import TURN_ARCHIVE_DAYS_DEFAULT
from tempomem.config import TempomemConfig

if TYPE_CHECKING:
    from temporalio.client import Client

    from recall.embedding import EmbeddingProvider
    from recall.index import Hit, RebuildReport
    from storage.remember import RememberResult

log = logging.getLogger("tempomem.store")

START_TIMEOUT_SECONDS = 2.0  # INTAKE-06: the best-effort workflow start may add at most this much
START_COOLDOWN_SECONDS = 30.0  # after a failed start, skip further tries for a while: the sweeper catches up


def resolve_root(config: TempomemConfig, base_dir: Path | None) -> Path:
    path = Path(config.memory.path).expanduser()
    return path if path.is_absolute() else (base_dir or Path.cwd()) / path


def embedder_for(config: TempomemConfig) -> EmbeddingProvider | None:
    """Lite never embeds (TIER-02); Journal/BuJo use the configured provider, with no fallback (CFG-08)."""
    memory = config.memory
    if memory.mode == "lite" or memory.embeddings is None:
        return None
    from recall.embedding import make_embedder

    emb = memory.embeddings
    return make_embedder(emb.provider, emb.effective_model, emb.effective_dim, emb.effective_endpoint)


def capture_settings(config: TempomemConfig) -> CaptureSettings | None:
    """The plain capture settings activities need; None without a ``memory.llm`` block."""
    memory = config.memory
    if memory.llm is None:
        return None
    capture = memory.capture
    return CaptureSettings(
        llm_provider=memory.llm.provider,
        llm_model=memory.llm.model,
        llm_endpoint=memory.llm.endpoint,
        timeout_ms=memory.llm.timeout_ms,
        reconcile_model=capture.reconcile_model if capture else None,
        focus=capture.focus if capture else None,
        only=tuple(capture.only) if capture and capture.only is not None else None,
        intent_lifecycle=bool(capture and capture.intent_lifecycle),
    )


class MemoryStore:
    """The built-in store of one memory root.

    Admission is filesystem-only and never waits on Temporal beyond ``START_TIMEOUT_SECONDS``; a record
    whose workflow could not be started stays pending and the worker's sweeper starts it later.
    """

    def __init__(
        self,
        config: TempomemConfig,
        *,
        base_dir: Path | None = None,
        client: Client | None = None,
        first_delay_seconds: int = 60,
        snapshot_sinks: list[Sink] | None = None,
    ) -> None:
        self.config = config
        self.base_dir = base_dir
        self.root = resolve_root(config, base_dir)
        self.store_id = store_id(self.root)
        self.task_queue = config.temporal.task_queue or task_queue(self.root)
        self.intake = Intake(self.root)
        # INTAKE-31: republish the content-free snapshot right after each admission.
        self.publisher = SnapshotPublisher(self.intake, snapshot_sinks)
        self.first_delay_seconds = first_delay_seconds
        self._client = client
        self._start_blocked_until = 0.0
        self._embedder: EmbeddingProvider | None = None

    # -- write path ---------------------------------------------------------------------------------
    async def persist_completed_turn(self, turn: CompletedTurn) -> AdmissionResult:
        """Admit one completed turn durably (INTAKE-01), then try to start its workflow.

        Returns once the record is fsynced; raises a typed ``IntakeError`` (conflict, capacity, corrupt)
        with nothing changed on disk. The host keeps its answer either way (INTAKE-05).
        """
        memory = self.config.memory
        capture = memory.capture
        result = admit_turn(
            self.intake,
            turn,
            tier=memory.mode,
            write_mode=memory.write_mode,
            capture_cron=capture.cron if capture else None,
            capture_webhook=capture.webhook if capture else None,
        )
        if result.status is not AdmissionStatus.ADMITTED or result.intake_id is None:
            return result
        started, warning = await self._try_start(result.intake_id)
        return result.model_copy(update={"workflow_started": started, "warning": warning})

    async def _try_start(self, intake_id: str) -> tuple[bool, str | None]:
        if time.monotonic() < self._start_blocked_until:
            return False, "temporal unavailable recently; the record stays pending for the sweeper"
        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                client = await self._connect()
                await start_capture(
                    client,
                    task_queue=self.task_queue,
                    store_id=self.store_id,
                    intake_id=intake_id,
                    tier=self.config.memory.mode,
                    write_mode=self.config.memory.write_mode,
                    first_delay_seconds=self.first_delay_seconds,
                )
            return True, None
        except Exception as exc:  # any failure here is a warning: the durable record is what counts
            self._start_blocked_until = time.monotonic() + START_COOLDOWN_SECONDS
            log.warning("capture workflow not started (%s); record stays pending", type(exc).__name__)
            return (
                False,
                f"temporal unreachable ({type(exc).__name__}); the record stays pending for the sweeper",
            )

    async def _connect(self) -> Client:
        if self._client is None:
            from temporalio.client import Client

            from tempomem.codec import data_converter_for_config

            temporal = self.config.temporal
            self._client = await Client.connect(
                temporal.address,
                namespace=temporal.namespace,
                api_key=temporal.api_key,
                tls=temporal.tls,
                data_converter=data_converter_for_config(temporal, self.base_dir),
            )
        return self._client

    def close(self) -> None:
        """Stop the snapshot publisher (flushes what is pending)."""
        self.publisher.close()

    def worker_context(self, client: Client | None = None) -> StoreContext:
        """Everything a worker of this store needs (see ``tempomem.worker.run_worker``)."""
        return StoreContext(
            root=self.root,
            tier=self.config.memory.mode,
            write_mode=self.config.memory.write_mode,
            task_queue=self.task_queue,
            embedder=self.embedder,
            client=client,
            first_delay_seconds=self.first_delay_seconds,
            capture=capture_settings(self.config),
            turn_archive_days=self.turn_archive_days,
        )

    @property
    def turn_archive_days(self) -> int:
        capture = self.config.memory.capture
        return capture.turn_archive_days if capture is not None else TURN_ARCHIVE_DAYS_DEFAULT

    # -- read path ----------------------------------------------------------------------------------
    @property
    def embedder(self) -> EmbeddingProvider | None:
        if self._embedder is None:
            self._embedder = embedder_for(self.config)
        return self._embedder

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        from recall.index import MemoryIndex

        return MemoryIndex(self.root, self.embedder).search(query, limit=limit)

    def remember(
        self,
        text: str,
        *,
        conversation_id: str,
        about: str | None = None,
        supersedes: str | None = None,
        replaceable: bool = False,
    ) -> RememberResult:
        """REM-01/02: write one deliberate fact to daily/ and index it in the same critical section.

        Not a Temporal workflow: it must be recallable immediately. Raises ``RememberRejected`` (with a
        reason code, nothing written) for credentials, unsafe text, tier restrictions, unknown targets or
        when ``memory.rememberTool.enabled`` is false (REM-03).
        """
        from recall.index import MemoryIndex
        from storage.remember import RememberRejected, remember

        if not self.config.memory.remember_tool.enabled:
            raise RememberRejected("tool_disabled")
        return remember(
            self.root,
            tier=self.config.memory.mode,
            text=text,
            conversation_id=conversation_id,
            now=datetime.now(UTC),
            about=about,
            supersedes=supersedes,
            replaceable=replaceable,
            index=MemoryIndex(self.root, self.embedder),
        )

    def rebuild(self) -> RebuildReport:
        from recall.index import MemoryIndex

        return MemoryIndex(self.root, self.embedder).rebuild()
