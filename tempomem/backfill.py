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

import argparse
import asyncio
import contextlib
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from tempomem.follow import TurnBar
    from tempomem.store import MemoryStore
    from tempomem.workflows.backfill import BackfillProgress
    from tempomem.workflows.consolidation import ConsolidationResult

__all__ = [
    "cmd_backfill",
    "cmd_consolidate",
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


async def start_backfill(
    client: Client,
    store: MemoryStore,
    path: Path | str,
    *,
    format: str = "auto",
    window: int = 8,
    batch_size: int = 64,
    continue_as_new_every: int = 500,
    poll_seconds: int = 2,
) -> WorkflowHandle[Any, BackfillProgress]:
    """Start (or re-attach to) the backfill of ``path`` into ``store``; its worker does the work.

    The workflow id is ``backfill-<store id>-<sha256 of the file>``: a second start while it runs returns
    the running one; a start after it finished runs it again (everything comes back ``duplicate``).
    """
    from temporalio.common import (
        SearchAttributePair,
        TypedSearchAttributes,
        WorkflowIDConflictPolicy,
        WorkflowIDReusePolicy,
    )

    from tempomem.activities.backfill import file_digest
    from tempomem.activities.sweep import search_attributes_registered
    from tempomem.workflows import search_attributes as sa
    from tempomem.workflows.backfill import (
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
    with_attributes = await search_attributes_registered(client)
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(sa.STORE_ID, store.store_id),
            SearchAttributePair(sa.TIER, memory.mode),
            SearchAttributePair(sa.WRITE_MODE, memory.write_mode),
        ]
    )
    inp = BackfillInput(
        store_id=store.store_id,
        source=BackfillSource(path=str(source_path), digest=digest, format=fmt),
        window=window,
        batch_size=batch_size,
        continue_as_new_every=continue_as_new_every,
        first_delay_seconds=store.first_delay_seconds,
        poll_seconds=poll_seconds,
        search_attributes=with_attributes,
    )
    return await client.start_workflow(
        BACKFILL_WORKFLOW,
        inp,
        id=backfill_workflow_id(store.store_id, digest),
        task_queue=store.task_queue,
        result_type=BackfillProgress,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=attributes if with_attributes else None,
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
    from tempomem.workflows.backfill import PROGRESS_QUERY, BackfillProgress

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

    from tempomem.workflows.consolidation import (
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


def add_backfill_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSONL of completed turns, or a LoCoMo-style conversation JSON")
    p.add_argument("--format", default="auto", choices=["auto", *FORMATS])
    p.add_argument("--window", type=int, default=8, help="capture workflows in flight (default 8)")
    p.add_argument("--batch", type=int, default=64, help="lines admitted per activity (default 64)")
    p.add_argument(
        "--continue-as-new-every", type=int, default=500, help="lines per workflow run (default 500)"
    )
    p.add_argument("--worker", action="store_true", help="run this store's worker in this process too")
    p.add_argument("--no-wait", action="store_true", help="start (or find) the backfill and return")
    p.add_argument("--json", action="store_true", help="print the final counts as JSON")


def add_consolidate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedule", action="store_true", help="create/update the periodic Temporal Schedule")
    p.add_argument("--every-minutes", type=int, default=60, help="schedule interval (default 60)")
    p.add_argument("--local", action="store_true", help="regenerate in this process, without Temporal")
    p.add_argument("--json", action="store_true")


def cmd_backfill(args: argparse.Namespace) -> int:
    from tempomem.cli.common import EXIT_ERROR, EXIT_OK, store_from_args
    from tempomem.connect import connect

    store = store_from_args(args)
    path = Path(args.file)
    if not path.is_file():
        print(f"error: {path} is not a file", file=sys.stderr)
        return EXIT_ERROR

    async def main() -> BackfillProgress | None:
        from tempomem.worker import note_missing_worker, worker_in_process

        client = await connect(store.config, store.base_dir)
        handle = await start_backfill(
            client,
            store,
            path,
            format=args.format,
            window=args.window,
            batch_size=args.batch,
            continue_as_new_every=args.continue_as_new_every,
        )
        print(f"backfill {handle.id} on task queue {store.task_queue}", file=sys.stderr, flush=True)
        if args.no_wait:
            return None
        async with worker_in_process(client, store, enabled=args.worker) as worker:
            if worker is None:
                await note_missing_worker(client, store)
            bar = ProgressBar()
            follow = asyncio.ensure_future(follow_backfill(client, handle.id, on_progress=bar.update))
            try:
                await asyncio.wait(
                    {follow} if worker is None else {follow, worker}, return_when="FIRST_COMPLETED"
                )
                if not follow.done():  # the in-process worker stopped first: surface why
                    assert worker is not None
                    worker.result()
                    raise RuntimeError("the in-process worker stopped before the backfill finished")
                return follow.result()
            finally:
                follow.cancel()
                bar.close()

    try:
        final = asyncio.run(main())
    except KeyboardInterrupt:
        print("\ninterrupted; the backfill goes on in the worker — run the same command to re-attach")
        return 130
    if final is None:
        return EXIT_OK
    if args.json:
        print(json.dumps(_as_json(final), indent=2))
    else:
        print(summary_line(final))
        for bad in final.bad:
            print(f"  bad line {bad.line}: {bad.reason}", file=sys.stderr)
        if final.bad_lines > len(final.bad):
            print(f"  … and {final.bad_lines - len(final.bad)} more bad lines", file=sys.stderr)
    return EXIT_OK


def _as_json(p: BackfillProgress) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(p)


def cmd_consolidate(args: argparse.Namespace) -> int:
    from tempomem.activities.consolidation import consolidation_schedule_id, ensure_consolidation_schedule
    from tempomem.cli.common import EXIT_OK, store_from_args
    from tempomem.connect import connect

    store = store_from_args(args)
    if args.local:
        from tempomem.storage.consolidation import consolidate

        report: Any = consolidate(store.root)
        _print_consolidation(report, as_json=args.json)
        return EXIT_OK

    async def main() -> Any:
        from tempomem.worker import worker_polling

        client = await connect(store.config, store.base_dir)
        if args.schedule:
            ctx = store.worker_context(client)
            created = await ensure_consolidation_schedule(
                client, ctx, every=timedelta(minutes=max(1, args.every_minutes))
            )
            print(
                f"schedule {consolidation_schedule_id(store.store_id)} "
                f"{'created' if created else 'already exists (interval updated if it differed)'}"
            )
            return None
        if await worker_polling(client, store.task_queue):
            return await consolidate_now(client, store)
        from tempomem.storage.consolidation import consolidate

        print("note: no worker polls this store's task queue; regenerating in process", file=sys.stderr)
        return await asyncio.to_thread(consolidate, store.root)

    report = asyncio.run(main())
    if report is not None:
        _print_consolidation(report, as_json=args.json)
    return EXIT_OK


def _print_consolidation(report: Any, *, as_json: bool) -> None:
    import dataclasses

    if as_json:
        print(json.dumps(dataclasses.asdict(report), indent=2))
        return
    print(
        f"index.md {'rewritten' if report.changed else 'unchanged'} ({report.index_bytes} bytes): "
        f"{report.duplicate_groups} duplicate groups among {report.daily_lines} daily lines; "
        f"{report.entity_groups_shown} of {report.entity_groups} entity groups previewed "
        f"({report.graph_rows_scanned}/{report.graph_rows} graph rows scanned)"
    )


def jsonl_line(turn: Any) -> str:
    """One ``CompletedTurn`` as a backfill JSONL line (the documented schema)."""
    return turn.model_dump_json()


def write_jsonl(path: Path, turns: Sequence[Any]) -> str:
    """Write turns as a backfill JSONL file; return its sha256."""
    data = "".join(jsonl_line(t) + "\n" for t in turns).encode("utf-8")
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()
