"""Backfill and consolidation, host side: start the workflows, follow their progress, the CLI commands.

``tempomem backfill FILE`` admits every completed turn of a JSONL file (one ``CompletedTurn`` JSON object
per line; schema in ``activities.backfill``) or a LoCoMo-style conversation JSON through the store's
intake, in a ``BackfillWorkflow`` run by the store's worker, and shows a progress bar fed by the
workflow's content-free ``progress`` query. Re-running the same file admits nothing twice. Interrupting
the command does not stop the backfill: it is durable, and running the command again re-attaches.

``tempomem consolidate`` regenerates ``index.md`` once (through the worker when one is polling, else in
process), or with ``--schedule`` keeps a Temporal Schedule that does it periodically.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from tempomem.follow import TurnBar
    from tempomem.messages.backfill import BackfillProgress
    from tempomem.messages.consolidation import ConsolidationResult
    from tempomem.store import MemoryStore

__all__ = [
    "consolidate_now",
    "detect_format",
    "follow_backfill",
    "run_backfill",
    "start_backfill",
]


# The CLI imports this module to build its parser: keep Temporal and the activities out of that path.
FORMATS = ("jsonl", "locomo-turns", "locomo-pairs")  # == workflows.backfill.SOURCE_FORMATS


def detect_format(path: Path, requested: str = "auto") -> str:
    """``auto``: ``.jsonl``/``.ndjson`` → jsonl; ``.json`` or a file starting with ``[`` → locomo-turns."""
    if requested != "auto":
        if requested not in FORMATS:
            raise ValueError(f"unknown format {requested!r}; one of auto, {', '.join(FORMATS)}")
        return requested
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        return "locomo-turns"
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    return "locomo-turns" if head.startswith(b"[") else "jsonl"


# Captures in flight: a Lite or Journal capture is one short workflow, so a backfill's throughput keeps
# rising up to about 32 on a 2-core machine (issue #15 item 2, docs/benchmarks.md).
BACKFILL_WINDOW_DEFAULT = 32


async def start_backfill(
    client: Client,
    store: MemoryStore,
    path: Path | str,
    *,
    format: str = "auto",
    window: int = BACKFILL_WINDOW_DEFAULT,
    batch_size: int = 64,
    continue_as_new_every: int = 500,
    poll_seconds: int = 2,
) -> WorkflowHandle[Any, BackfillProgress]:
    """Start (or re-attach to) the backfill of ``path`` into ``store``; its worker does the work.

    The workflow id is ``backfill-<store id>-<sha256 of the file>``: a second start while it runs returns
    the running one; a start after it finished runs it again (everything comes back ``duplicate``).
    """
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

    from tempomem.activities.backfill import file_digest
    from tempomem.activities.sweep import batch_attributes
    from tempomem.messages.backfill import (
        BACKFILL_WORKFLOW,
        BackfillInput,
        BackfillProgress,
        BackfillSource,
        backfill_workflow_id,
    )

    source_path = Path(path).expanduser().resolve(strict=True)
    fmt = detect_format(source_path, format)
    digest = await asyncio.to_thread(file_digest, source_path)
    memory = store.config.memory
    attributes = await batch_attributes(client, store.store_id, memory.mode, memory.write_mode)
    inp = BackfillInput(
        store_id=store.store_id,
        source=BackfillSource(path=str(source_path), digest=digest, format=fmt),
        window=window,
        batch_size=batch_size,
        continue_as_new_every=continue_as_new_every,
        first_delay_seconds=store.first_delay_seconds,
        poll_seconds=poll_seconds,
        search_attributes=attributes is not None,
    )
    return await client.start_workflow(
        BACKFILL_WORKFLOW,
        inp,
        id=backfill_workflow_id(store.store_id, digest),
        task_queue=store.task_queue,
        result_type=BackfillProgress,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=attributes,
        static_summary=f"backfill {source_path.name} · {fmt} · {digest[:12]}… · store {store.store_id}",
        static_details=(
            "Content-free: the file stays on the worker host; counts are in the current details and the "
            "`progress` query."
        ),
    )


async def follow_backfill(
    client: Client,
    workflow_id: str,
    *,
    on_progress: Callable[[BackfillProgress], None] | None = None,
    poll_interval: float = 0.5,
) -> BackfillProgress:
    """Poll the ``progress`` query (across continue-as-new runs) until the backfill ends; its result."""
    from tempomem.follow import follow_workflow
    from tempomem.messages.backfill import PROGRESS_QUERY, BackfillProgress

    return await follow_workflow(
        client,
        workflow_id,
        query=PROGRESS_QUERY,
        result_type=BackfillProgress,
        on_progress=on_progress,
        poll_interval=poll_interval,
    )


async def run_backfill(
    client: Client,
    store: MemoryStore,
    path: Path | str,
    *,
    on_progress: Callable[[BackfillProgress], None] | None = None,
    poll_interval: float = 0.5,
    **knobs: Any,
) -> BackfillProgress:
    """``start_backfill`` then ``follow_backfill``: the whole backfill, as the CLI runs it."""
    handle = await start_backfill(client, store, path, **knobs)
    return await follow_backfill(client, handle.id, on_progress=on_progress, poll_interval=poll_interval)


async def consolidate_now(client: Client, store: MemoryStore) -> ConsolidationResult:
    """Run ``ConsolidationWorkflow`` once on the store's worker and return its content-free result."""
    from temporalio.common import WorkflowIDConflictPolicy

    from tempomem.messages.consolidation import (
        CONSOLIDATION_WORKFLOW,
        ConsolidationInput,
        ConsolidationResult,
        consolidation_workflow_id,
    )

    return await client.execute_workflow(
        CONSOLIDATION_WORKFLOW,
        ConsolidationInput(store_id=store.store_id),
        id=consolidation_workflow_id(store.store_id),
        task_queue=store.task_queue,
        result_type=ConsolidationResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"regenerate index.md · store {store.store_id}",
    )


# -- progress display -------------------------------------------------------------------------------------


def summary_line(p: BackfillProgress) -> str:
    return (
        f"admitted {p.admitted} · duplicates {p.duplicates} · skipped {p.skipped} · bad lines {p.bad_lines}"
        f" · captured {p.completed} ({p.resolved} resolved, {p.dead} dead)"
        f" · runs {p.continue_as_new_runs + 1}"
    )


class ProgressBar:
    """tqdm when it is installed, else a plain text bar; fed ``BackfillProgress`` snapshots."""

    WIDTH = 30

    def __init__(self, stream: IO[str] | None = None, *, use_tqdm: bool = True) -> None:
        self.stream = stream or sys.stderr
        self._tqdm: TurnBar | None = None
        self._last = ""
        if use_tqdm:
            from tempomem.follow import TurnBar

            with contextlib.suppress(ImportError):  # no tqdm: the plain text bar below
                self._tqdm = TurnBar(total=None, stream=self.stream)

    def update(self, p: BackfillProgress) -> None:
        if self._tqdm is not None:
            self._tqdm.show(
                p.settled,
                p.total,
                f"admitted={p.admitted} dup={p.duplicates} bad={p.bad_lines} inflight={p.in_flight}",
            )
            return
        text = self.render(p)
        if text == self._last:
            return
        self._last = text
        if self.stream.isatty():
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    @classmethod
    def render(cls, p: BackfillProgress) -> str:
        total = max(p.total, p.settled, 1)
        filled = round(cls.WIDTH * p.settled / total) if p.total else 0
        bar = "#" * filled + "-" * (cls.WIDTH - filled)
        shown = str(p.total) if p.total else "?"
        return (
            f"[{bar}] {p.settled}/{shown}  admitted {p.admitted}  dup {p.duplicates}  "
            f"bad {p.bad_lines}  in flight {p.in_flight}"
        )

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
        elif self._last and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


# -- CLI --------------------------------------------------------------------------------------------------


def jsonl_line(turn: Any) -> str:
    """One ``CompletedTurn`` as a backfill JSONL line (the documented schema)."""
    return turn.model_dump_json()


def write_jsonl(path: Path, turns: Sequence[Any]) -> str:
    """Write turns as a backfill JSONL file; return its sha256."""
    data = "".join(jsonl_line(t) + "\n" for t in turns).encode("utf-8")
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()
