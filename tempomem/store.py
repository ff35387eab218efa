"""``MemoryStore``: the host-facing API (STORE-01, STORE-13, HOST-01).

Admission, deliberate recall (the shaped MemoryRecall result), the journal, the automatic context block,
Remember, search and rebuild. The async methods run their blocking file and index work in a worker
thread, so an asyncio agent host can await them; the blocking ``*_sync`` twins (and ``search``,
``remember``, ``rebuild``) are safe to call from several threads at once: every call opens its own read
snapshot, and writers are serialised by the store's lock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from tempomem.activities.context import StoreContext
from tempomem.capture.settings import CaptureSettings
from tempomem.config import TempomemConfig, secret
from tempomem.messages.capture import capture_workflow_id
from tempomem.storage.admission import admit_turn
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import RecordState
from tempomem.storage.intake_snapshot import Sink, SnapshotPublisher
from tempomem.storage.limits import AUTO_CONTEXT_MAX_BYTES
from tempomem.storage.store_ref import is_path_named, store_id, task_queue_name
from tempomem.storage.turn import AdmissionResult, AdmissionStatus, CompletedTurn
from tempomem.storage.turn_archive import TURN_ARCHIVE_DAYS_DEFAULT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from temporalio.client import Client

    from tempomem.capture.model_client import HostModelClient
    from tempomem.recall.auto_block import AutoLookup
    from tempomem.recall.embedding import EmbeddingProvider
    from tempomem.recall.graph_read import GraphReader
    from tempomem.recall.index import Hit, MemoryIndex, RebuildReport
    from tempomem.recall.journal import JournalResult
    from tempomem.recall.owner_profile import OwnerProfile
    from tempomem.recall.session_receipts import SessionReceiptCache
    from tempomem.recall.tools import RecallResult
    from tempomem.storage.remember import RememberResult

log = logging.getLogger("tempomem.store")


class StoreClosedError(RuntimeError):
    """A call on a ``MemoryStore`` after ``close()``."""


START_TIMEOUT_SECONDS = 2.0  # INTAKE-06: the best-effort workflow start may add at most this much
START_COOLDOWN_SECONDS = 30.0  # after a failed start, skip further tries for a while: the sweeper catches up


def resolve_root(config: TempomemConfig, base_dir: Path | None) -> Path:
    """``memory.path``; a relative one resolves against ``base_dir``, else the folder of the config file
    it was loaded from, else (the embedded defaults) the current folder."""
    path = Path(config.memory.path).expanduser()
    if path.is_absolute():
        return path
    return (base_dir or config.source_dir or Path.cwd()) / path


def embedder_for(config: TempomemConfig) -> EmbeddingProvider | None:
    """Lite never embeds (TIER-02); Journal/BuJo use the configured provider, with no fallback (CFG-08)."""
    memory = config.memory
    if memory.mode == "lite" or memory.embeddings is None:
        return None
    from tempomem.recall.embedding import make_embedder

    emb = memory.embeddings
    return make_embedder(emb.provider, emb.effective_model, emb.effective_dim, emb.effective_endpoint)


def capture_settings(
    config: TempomemConfig, host_client: HostModelClient | None = None
) -> CaptureSettings | None:
    """The plain capture settings activities need; None without a ``memory.llm`` block. API keys are
    read here, from the config or the environment variables it names, and stay in memory."""
    from tempomem.capture.model_client import ProviderEndpoint

    memory = config.memory
    if memory.llm is None:
        return None
    capture = memory.capture
    registry = config.agent_host.providers if config.agent_host else {}
    providers = {
        name: ProviderEndpoint(
            p.endpoint, secret(p.api_key, p.api_key_env, f"agentHost.providers.{name}.apiKeyEnv")
        )
        for name, p in registry.items()
    }
    return CaptureSettings(
        llm_provider=memory.llm.provider,
        llm_model=memory.llm.model,
        llm_endpoint=memory.llm.effective_endpoint,
        timeout_ms=memory.llm.timeout_ms,
        concurrency=memory.llm.concurrency,
        llm_api_key=secret(memory.llm.api_key, memory.llm.api_key_env, "memory.llm.apiKeyEnv"),
        providers=providers,
        host_client=host_client,
        reconcile_model=capture.reconcile_model if capture else None,
        focus=capture.focus if capture else None,
        only=tuple(capture.only) if capture and capture.only is not None else None,
        intent_lifecycle=bool(capture and capture.intent_lifecycle),
    )


_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def in_worker_thread(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
    """The async form of a blocking method: the same arguments, run in a worker thread. Named after it:
    ``recall_sync`` gives ``recall``, ``remember`` gives ``remember_async``."""

    @functools.wraps(method)
    async def run(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    name = method.__name__
    run.__name__ = name.removesuffix("_sync") if name.endswith("_sync") else f"{name}_async"
    run.__qualname__ = f"{method.__qualname__.rpartition('.')[0]}.{run.__name__}"
    run.__doc__ = f"``{name}`` in a worker thread."
    return run


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
        host_model: HostModelClient | None = None,
    ) -> None:
        if not isinstance(config, TempomemConfig):
            raise TypeError(f"config must be a TempomemConfig (load_config), not {type(config).__name__}")
        self.config = config
        self.base_dir = base_dir if base_dir is not None else config.source_dir
        self.root = resolve_root(config, base_dir)
        self._store_id: str | None = None
        self.intake = Intake(self.root)
        # INTAKE-31: republish the content-free snapshot right after each admission.
        self.publisher = SnapshotPublisher(self.intake, snapshot_sinks)
        self.first_delay_seconds = first_delay_seconds
        self._client = client
        self._start_blocked_until = 0.0
        self._receipts: SessionReceiptCache | None = None
        self._embedder: EmbeddingProvider | None = None
        self._index: MemoryIndex | None = None
        self._journal_session: Any = None
        # llm.provider "agent-host": the host's own model client, used by this store's worker (HOST-03)
        self.host_model = host_model
        self._closed = False

    @property
    def store_id(self) -> str:
        """The stable id written in the store (created with it on first use: never at construction)."""
        if self._store_id is None:
            self._store_id = store_id(self.root)
        return self._store_id

    @property
    def task_queue(self) -> str:
        return self.config.temporal.task_queue or task_queue_name(self.store_id)

    def workflow_id(self, intake_id: str) -> str:
        """The CaptureWorkflow id of one of this store's intake records."""
        return capture_workflow_id(self.store_id, intake_id)

    # -- write path ---------------------------------------------------------------------------------
    async def persist_completed_turn(self, turn: CompletedTurn) -> AdmissionResult:
        """Admit one completed turn durably (INTAKE-01), then try to start its workflow.

        Returns once the record is fsynced; raises a typed ``IntakeError`` (conflict, capacity, corrupt)
        with nothing changed on disk. The host keeps its answer either way (INTAKE-05).
        """
        self._check_open()
        if not isinstance(turn, CompletedTurn):
            raise TypeError(f"turn must be a CompletedTurn, not {type(turn).__name__}")
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
        if result.intake_id is not None:
            result = result.model_copy(update={"workflow_id": self.workflow_id(result.intake_id)})
        if result.status is not AdmissionStatus.ADMITTED or result.intake_id is None:
            return result
        started, warning = await self._try_start(result.intake_id)
        return result.model_copy(update={"workflow_started": started, "warning": warning})

    async def wait_until_curated(self, intake_id: str, *, timeout: float = 60.0) -> RecordState:
        """Wait until the worker has resolved (or dead-lettered) a record; returns its state.

        Reads the intake on disk only (no Temporal call), so it works against any worker. Raises
        ``TimeoutError`` when the record is still pending after ``timeout`` seconds. Hosts rarely need
        this (admission is the durable promise); examples, tests and batch tools do.
        """
        self._check_open()
        deadline = time.monotonic() + timeout
        while True:
            state = self.intake.view(intake_id, now=datetime.now(UTC)).state
            if state is not RecordState.PENDING:
                return state
            if time.monotonic() >= deadline:
                raise TimeoutError(f"intake record {intake_id} still pending after {timeout:g} s")
            await asyncio.sleep(0.1)

    async def _try_start(self, intake_id: str) -> tuple[bool, str | None]:
        if time.monotonic() < self._start_blocked_until:
            return False, "temporal unavailable recently; the record stays pending for the sweeper"
        from tempomem.starts import start_capture

        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                client = await self._connect()
                started = await start_capture(
                    client,
                    task_queue=self.task_queue,
                    store_id=self.store_id,
                    intake_id=intake_id,
                    tier=self.config.memory.mode,
                    write_mode=self.config.memory.write_mode,
                    first_delay_seconds=self.first_delay_seconds,
                    path_named=is_path_named(self.root, self.store_id),
                )
            if not started:  # USE_EXISTING found an open run under this id: say so, never claim a start
                return False, (
                    "this record's capture workflow is already open (started by the sweeper, or by the "
                    "previous id form); it curates the record"
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
            from tempomem.connect import connect

            self._client = await connect(self.config, self.base_dir)
        return self._client

    def close(self) -> None:
        """Stop the snapshot publisher (flushes what is pending). Later calls raise ``StoreClosedError``."""
        self._closed = True
        self.publisher.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("this MemoryStore is closed")

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

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
            capture=capture_settings(self.config, self.host_model),
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

    @property
    def index(self) -> MemoryIndex:
        """The store's search index (stateless beyond its root and embedder: safe to share by threads)."""
        if self._index is None:
            from tempomem.recall.index import MemoryIndex

            self._index = MemoryIndex(self.root, self.embedder)
        return self._index

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        """Raw hybrid hits (scores, ranks, text), unshaped; for the model-facing result use ``recall``."""

        self._check_open()
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        return self.index.search(query, limit=limit)

    def _superseded_ids(self) -> set[str] | None:
        if self.config.memory.mode != "bujo":
            return None
        from tempomem.storage.replay_sidecar import superseded

        return set(superseded(self.root))

    def _intent_expiry(self) -> bool:
        memory = self.config.memory
        return bool(memory.recall and memory.recall.intent_expiry and memory.mode == "bujo")

    def recall_sync(
        self,
        query: str | None = None,
        *,
        kind: str | None = None,
        about: str | None = None,
        limit: int = 8,
        use_original_query: bool = False,
        original_hits: Sequence[Hit] | None = None,
        turn_lookup: AutoLookup | None = None,
    ) -> RecallResult:
        """MemoryRecall (REC-01..REC-47): the shaped hits, evidence notes and the text the model sees.
        ``turn_lookup``: this turn's ``automatic_context`` result; the same question reuses it (POL-03).

        Invalid arguments raise ``RecallInputError`` (a ``ValueError`` with a ``code``); a failing backend
        gives ``degraded=True`` and no hits (REC-19), never a raw error.
        """
        from tempomem.recall.graph_read import GraphReader
        from tempomem.recall.tools import memory_recall

        self._check_open()
        bujo = self.config.memory.mode == "bujo"
        return memory_recall(
            self.index,
            query=query,
            use_original_query=use_original_query,
            original_hits=original_hits,
            kind=kind,
            about=about,
            limit=limit,
            superseded_ids=self._superseded_ids(),
            intent_expiry=self._intent_expiry(),
            graph=GraphReader(self.root) if bujo else None,  # GRAPH-09/11: only BuJo keeps a graph
            recency=bool(bujo and self.config.memory.recall and self.config.memory.recall.recency),
            turn_lookup=turn_lookup,
        )

    recall = in_worker_thread(recall_sync)

    async def recall_with_outcome(self, query: str, *, limit: int = 8) -> RecallResult:
        """The reference's programmatic deliberate retrieval (REC-51): ``recall`` under its name. Works on
        every tier; a failing backend gives ``degraded=True`` and no hits, never an exception."""
        return await self.recall(query, limit=limit)

    def journal_sync(
        self,
        from_date: str | None = None,
        through_date: str | None = None,
        *,
        time_zone: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> JournalResult:
        """MemoryJournal (JRN-01..JRN-22): curated entries of a civil date range, oldest first.

        A first call names the range and the IANA zone; a continuation passes only ``cursor`` (cursors are
        valid for this store object, JRN-09). Errors raise ``JournalError`` with a ``code``.
        """
        from tempomem.recall.journal import JournalSession

        self._check_open()
        if self._journal_session is None:
            self._journal_session = JournalSession()
        session: JournalSession = self._journal_session
        return session.call(
            self.root,
            from_date=from_date,
            through_date=through_date,
            time_zone=time_zone,
            limit=limit,
            cursor=cursor,
        )

    journal = in_worker_thread(journal_sync)

    @property
    def session_receipts(self) -> SessionReceiptCache:
        """Volatile receipts of what a retained provider session already holds (PROFILE-12..22): call
        ``prepare(conversation_id, lookup, retained_session=...)`` before the provider and
        ``confirm(injection, invocation_ok=..., retained=...)`` after it. Never persisted."""
        if self._receipts is None:
            from tempomem.recall.session_receipts import SessionReceiptCache

            self._receipts = SessionReceiptCache()
        return self._receipts

    def _profile_enabled(self) -> bool:
        memory = self.config.memory
        return bool(memory.mode == "bujo" and memory.profile and memory.profile.enabled)

    def profile_sync(self, reader: GraphReader | None = None) -> OwnerProfile:
        """The owner profile by the automatic rule (PROFILE-03..09; ``tempomem profile``, CLI-17), whether
        or not ``memory.profile.enabled`` injects it. Read-only; empty off BuJo (PROFILE-01)."""
        from tempomem.recall.graph_read import GraphReader
        from tempomem.recall.owner_profile import NO_PROFILE, owner_profile
        from tempomem.recall.tools import host_zone

        self._check_open()
        if self.config.memory.mode != "bujo":
            return NO_PROFILE
        return owner_profile(
            (reader or GraphReader(self.root)).lines().values(),
            now=datetime.now(UTC),
            tz=host_zone(),
            max_bytes=self.config.memory.max_bytes,
            superseded_ids=self._superseded_ids(),
        )

    def automatic_context_sync(
        self,
        turn_text: str,
        *,
        verified_owner: bool,
        surface: str = "web",
        conversation_id: str | None = None,
        owner_sender: str | None = None,
        process_job_wake: bool = False,
    ) -> AutoLookup:
        """The automatic recall for one turn (AUTO-01..AUTO-32): person cards (BuJo), labelled background
        and the block, in ``.context_text``; ``.hits`` is the bound lookup that ``recall(...,
        use_original_query=True, original_hits=...)`` reuses (REC-10).

        ``verified_owner``, ``surface`` and ``process_job_wake`` are host-stamped facts; the library never
        infers them from text (AUTO-24). A backend failure yields an empty block, never an exception.
        """
        from tempomem.recall.auto_block import BackgroundScopes, TurnGate, automatic_lookup
        from tempomem.recall.graph_read import GraphReader
        from tempomem.recall.tools import host_zone

        self._check_open()
        if not isinstance(turn_text, str):
            raise TypeError(f"turn_text must be a str, not {type(turn_text).__name__}")
        reader = GraphReader(self.root) if self.config.memory.mode == "bujo" else None
        lookup: AutoLookup = automatic_lookup(
            self.index,
            turn_text,
            now=datetime.now(UTC),
            tz=host_zone(),
            gate=TurnGate(verified_owner=verified_owner, surface=surface, process_job_wake=process_job_wake),
            conversation_id=conversation_id,
            # memory.maxBytes (AMB-04, CFG-26) bounds the whole context: what it withholds counts as used
            context_bytes_used=max(0, AUTO_CONTEXT_MAX_BYTES - self.config.memory.max_bytes),
            superseded_ids=self._superseded_ids(),
            intent_expiry=self._intent_expiry(),
            cards_from=reader,
            background=BackgroundScopes(owner_sender=owner_sender),
            # PROFILE-01, PROFILE-24; the same reader as the cards: the daily Markdown is read once a turn
            profile=self.profile_sync(reader) if self._profile_enabled() else None,
        )
        return lookup

    automatic_context = in_worker_thread(automatic_context_sync)

    def remember(
        self,
        text: str,
        *,
        conversation_id: str,
        about: str | None = None,
        supersedes: str | None = None,
        replaceable: bool = False,
        turn_lookup: AutoLookup | None = None,
    ) -> RememberResult:
        """REM-01/02: write one deliberate fact to daily/ and index it in the same critical section.

        Not a Temporal workflow: it must be recallable immediately. Raises ``RememberRejected`` (with a
        reason code, nothing written) for credentials, unsafe text, tier restrictions, unknown targets or
        when ``memory.rememberTool.enabled`` is false (REM-03). ``turn_lookup``: the turn's automatic
        lookup; a write that is not a duplicate makes it stale, so the turn's next recall searches again
        and ``use_original_query`` is no longer offered (REM-20, REM-21).
        """
        from tempomem.storage.remember import RememberRejected, remember

        self._check_open()
        if not self.config.memory.remember_tool.enabled:
            raise RememberRejected("tool_disabled")
        result = remember(
            self.root,
            tier=self.config.memory.mode,
            text=text,
            conversation_id=conversation_id,
            now=datetime.now(UTC),
            about=about,
            supersedes=supersedes,
            replaceable=replaceable,
            index=self.index,
        )
        if turn_lookup is not None and result.status != "duplicate":
            turn_lookup.written.append(result.id)
        return result

    remember_async = in_worker_thread(remember)

    def rebuild(self, *, force: bool = False) -> RebuildReport:
        """A new index generation from canonical Markdown (``RebuildShrinkError`` when it would drop
        most memories, unless ``force``). ``RetainedPlanError`` into Lite or Journal while a BuJo capture
        plan is retained (INTAKE-35), checked before anything is written."""
        from tempomem.storage.fence import clear_rebuild_required
        from tempomem.storage.intake_records import RetainedPlanError

        self._check_open()
        if self.config.memory.mode != "bujo" and self.intake.base.exists():
            retained = self.intake.retained_plan_ids()
            if retained:
                tier = self.config.memory.mode
                raise RetainedPlanError(
                    f"{len(retained)} intake record(s) keep a BuJo capture plan, which {tier} "
                    "cannot replay: start the BuJo configuration, let the intake finish, then change tiers"
                )
        report = self.index.rebuild(force=force)
        clear_rebuild_required(self.root)  # RPL-17: the service may start again
        return report
