"""One worker process for every memory store under a directory (issue #16 item 1).

Each store keeps its own task queue, fence, sweep, schedules, dead letters and health, exactly as a
single-store worker runs them (``run_worker``); what the stores share is the process: one Temporal
client, one embedder runtime (the local model is loaded once per process), one bounded thread pool
for activities and one cap on model calls in flight. Why a task queue per store rather than one per
host (docs/hosting.md, "Many stores"): the store is the unit that must have a single writer and commit
in admission order, its queue already carries that, and a store's work follows the store to whichever
host mounts it without touching workflow code or the histories of running workflows.

Stores are found by scanning the directory: a child directory is a store when it holds a ``.store-id``
(or the content of a store made before ids were written). Anything else is reported by path, with a
content-free reason, and skipped; a store another live process owns is refused and tried again at the
next scan, so a store whose owner stops is taken over. A store's worker that fails is reported and
restarted at the next scan; it never stops the other stores.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tempomem.storage.fence import AgentRunningError, RebuildRequiredError, fence_is_held
from tempomem.storage.fsio import UnsafePathError, foreign_owner, wrong_mode
from tempomem.storage.limits import DIR_MODE
from tempomem.storage.store_ref import StoreIdError, looks_like_store

if TYPE_CHECKING:
    from temporalio.client import Client

    from tempomem.config import TempomemConfig
    from tempomem.messages.capture import SweepResult
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_snapshot import IntakeSnapshot
    from tempomem.store import MemoryStore

log = logging.getLogger("tempomem.fleet")

SCAN_SECONDS_DEFAULT = 5.0
STATUS_SECONDS_DEFAULT = 60.0
ACTIVITY_THREADS_DEFAULT = 8
# Typed errors whose message is ours and content-free (paths and ids only); any other failure is
# reported by its type name alone.
_OWN_ERRORS = (AgentRunningError, RebuildRequiredError, StoreIdError, UnsafePathError)


class FleetConfigError(ValueError):
    """The config cannot serve many stores (names the field)."""


@dataclass(frozen=True)
class SkippedStore:
    """A path under the stores directory that is not being served, and why (content-free)."""

    path: Path
    reason: str


@dataclass(frozen=True)
class StoreScan:
    stores: list[Path]
    skipped: list[SkippedStore]


def classify_store(path: Path) -> str | None:
    """None when ``path`` is a store a stores worker serves, else why it is skipped (content-free).
    Raises ``FileNotFoundError`` if nothing is there."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "a symlink, not a store directory"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    unsafe = foreign_owner(st) or wrong_mode(st, DIR_MODE)
    if unsafe is not None:
        return f"wrong permissions: {unsafe}"
    try:
        is_store = looks_like_store(path)
    except (StoreIdError, UnsafePathError) as exc:
        return f"corrupt: {exc}"
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"
    return None if is_store else "not a tempomem store (no .store-id)"


def scan_stores(stores_dir: Path) -> StoreScan:
    """The stores directly under ``stores_dir`` and what was skipped there. Hidden entries are ignored.

    Never repairs what it finds: a store with loose permissions is skipped, not tightened, because a
    directory someone else could write into cannot be trusted to hold only what tempomem wrote.
    """
    stores: list[Path] = []
    skipped: list[SkippedStore] = []
    for child in sorted(Path(stores_dir).iterdir()):
        if child.name.startswith("."):
            continue
        try:
            reason = classify_store(child)
        except FileNotFoundError:  # removed while we looked
            continue
        if reason is None:
            stores.append(child)
        else:
            skipped.append(SkippedStore(child, reason))
    return StoreScan(stores, skipped)


def store_config(config: TempomemConfig, root: Path) -> TempomemConfig:
    """``config`` with ``memory.path`` set to ``root`` (made absolute, so no base folder moves it): every
    store of a fleet shares the worker's config."""
    memory = config.memory.model_copy(update={"path": str(Path(root).absolute())})
    return config.model_copy(update={"memory": memory})


def check_fleet_config(config: TempomemConfig) -> None:
    """Refuse settings that cannot hold for many stores at once."""
    if config.temporal.task_queue:
        raise FleetConfigError(
            "temporal.taskQueue names one task queue, but each store needs its own: remove it to serve "
            "a stores directory"
        )
    if config.memory.llm is not None and config.memory.llm.provider == "agent-host":
        raise FleetConfigError(
            "memory.llm.provider 'agent-host' calls the model of one host process; a stores directory "
            "needs a provider the worker can reach itself"
        )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, AgentRunningError):
        return "owned by another live worker (its fence is held)"
    if isinstance(exc, _OWN_ERRORS):
        return f"{type(exc).__name__}: {exc}"
    return f"worker failed: {type(exc).__name__}"


@dataclass
class StoreStatus:
    path: Path
    store_id: str | None = None
    state: str = "starting"  # starting | running | skipped | stopped
    reason: str | None = None
    start_sweep_due: int = 0
    # The store's figures (#16 item 4), as its intake snapshot last published them; ``curated`` counts
    # the turns this process curated since it began serving the store.
    pending: int = 0
    due: int = 0
    dead: int = 0
    curated: int = 0


FIGURES = ("pending", "due", "dead", "curated")


@dataclass
class FleetStatus:
    """What the fleet serves right now: per store and in total (content-free)."""

    stores: dict[Path, StoreStatus] = field(default_factory=dict)

    @property
    def running(self) -> int:
        return sum(1 for s in self.stores.values() if s.state == "running")

    @property
    def skipped(self) -> list[StoreStatus]:
        return [s for s in self.stores.values() if s.state == "skipped"]

    def totals(self) -> dict[str, int]:
        """The figures summed over every store seen (a stopped store keeps its last figures)."""
        return {name: sum(getattr(s, name) for s in self.stores.values()) for name in FIGURES}


class StatusReport:
    """The worker's periodic figures (#16 item 4), content-free: one line per store whose figures
    changed since the last report, then the totals with the turns curated since the last report."""

    def __init__(self, status: FleetStatus) -> None:
        self.status = status
        self._seen: dict[Path, tuple[str, int, int, int, int]] = {}
        self._curated = 0

    def lines(self, seconds: float) -> list[str]:
        out = []
        for path, s in sorted(self.status.stores.items()):
            now = (s.state, s.pending, s.due, s.dead, s.curated)
            before = self._seen.get(path)
            if now == before:
                continue
            delta = s.curated - (before[4] if before else 0)
            out.append(
                f"store {path.name} [{s.store_id or '-'}]: {s.state}  pending={s.pending} due={s.due} "
                f"dead={s.dead} curated={s.curated} (+{delta})"
            )
            self._seen[path] = now
        totals = self.status.totals()
        delta = totals["curated"] - self._curated
        self._curated = totals["curated"]
        rate = delta / seconds if seconds > 0 else 0.0
        out.append(
            f"total: {self.status.running} running, {len(self.status.skipped)} skipped  "
            + " ".join(f"{k}={v}" for k, v in totals.items())
            + f"  (+{delta} in {seconds:g} s, {rate:.2f}/s)"
        )
        return out


@dataclass
class _Served:
    stop: asyncio.Event
    task: asyncio.Task[SweepResult]


class Fleet:
    """Serve every store under ``stores_dir`` until ``stop`` is set (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        config: TempomemConfig,
        stores_dir: Path,
        *,
        scan_seconds: float = SCAN_SECONDS_DEFAULT,
        activity_threads: int = ACTIVITY_THREADS_DEFAULT,
        model_calls: int | None = None,
        schedule: bool = True,
        on_change: Callable[[StoreStatus], None] | None = None,
    ) -> None:
        check_fleet_config(config)
        if not Path(stores_dir).is_dir():
            raise FileNotFoundError(f"no stores directory at {stores_dir}")
        self.client = client
        self.config = config
        self.stores_dir = Path(stores_dir)
        self.scan_seconds = scan_seconds
        self.activity_threads = activity_threads
        self.model_slots = asyncio.Semaphore(model_calls) if model_calls else None
        self.schedule = schedule
        self.on_change = on_change
        self.status = FleetStatus()
        self._served: dict[Path, _Served] = {}

    def _set(self, path: Path, state: str, reason: str | None = None, **extra: object) -> None:
        current = self.status.stores.get(path)
        if current is not None and current.state == state and current.reason == reason:
            return
        status = current or StoreStatus(path)
        status.state, status.reason = state, reason
        for name, value in extra.items():
            setattr(status, name, value)
        self.status.stores[path] = status
        if self.on_change is not None:
            self.on_change(status)

    def _open(self, root: Path) -> MemoryStore:
        from tempomem.store import MemoryStore

        return MemoryStore(store_config(self.config, root), base_dir=self.stores_dir)

    def _start(self, root: Path, executor: concurrent.futures.Executor) -> None:
        from tempomem.worker import run_worker

        if fence_is_held(root):  # cheap probe; run_worker's own fence still decides
            self._set(root, "skipped", _reason(AgentRunningError()))
            return
        try:
            store = self._open(root)
            ctx = store.worker_context(self.client)
        except Exception as exc:  # a broken store is reported, never fatal to the others
            self._set(root, "skipped", _reason(exc))
            return
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_worker(
                self.client,
                ctx,
                stop=stop,
                schedule=self.schedule,
                model_slots=self.model_slots,
                executor=executor,
                on_ready=functools.partial(self._ready, root, ctx.store_id),
                few_pollers=True,
                snapshot_sinks=[functools.partial(self._figures, root, ctx.intake)],
            ),
            name=f"tempomem-store-{ctx.store_id}",
        )
        self._served[root] = _Served(stop, task)
        current = self.status.stores.get(root)
        if current is None or current.state != "skipped":  # a retried store stays reported until it runs
            self._set(root, "starting", store_id=ctx.store_id)

    def _figures(self, root: Path, intake: Intake, snap: IntakeSnapshot) -> None:
        """A snapshot sink (the publisher's thread): plain int stores, read by whoever reports."""
        status = self.status.stores.get(root)
        if status is not None:
            status.pending, status.due, status.dead = snap.pending, snap.due, snap.dead
            status.curated = intake.curated

    def _ready(self, root: Path, sid: str, swept: SweepResult) -> None:
        self._set(root, "running", store_id=sid, start_sweep_due=swept.due)

    def _reap(self) -> None:
        """Note which store workers ended (a refused fence, a failure) so the next scan retries them."""
        for root, served in list(self._served.items()):
            if not served.task.done():
                continue
            del self._served[root]
            exc = served.task.exception() if not served.task.cancelled() else None
            if exc is None:
                self._set(root, "stopped")
            else:
                self._set(root, "skipped", _reason(exc))
                if not isinstance(exc, _OWN_ERRORS):
                    log.warning("store %s: worker failed (%s); retried next scan", root, type(exc).__name__)

    def scan(self, executor: concurrent.futures.Executor) -> StoreScan:
        """Start workers for stores not yet served; report what was skipped."""
        self._reap()
        try:
            found = scan_stores(self.stores_dir)
        except OSError as exc:
            log.warning("cannot scan %s (%s); trying again", self.stores_dir, type(exc).__name__)
            return StoreScan([], [])
        for skipped in found.skipped:
            self._set(skipped.path, "skipped", skipped.reason)
        for root in found.stores:
            if root not in self._served:
                self._start(root, executor)
        return found

    async def run(self, stop: asyncio.Event) -> FleetStatus:
        """Scan every ``scan_seconds`` until ``stop``; then stop every store's worker (each drains)."""
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=self.activity_threads, thread_name_prefix="tempomem-act"
        ) as executor:
            try:
                while not stop.is_set():
                    self.scan(executor)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=self.scan_seconds)
            finally:
                for served in self._served.values():
                    served.stop.set()
                if self._served:
                    await asyncio.wait([s.task for s in self._served.values()])
                self._reap()
        return self.status
