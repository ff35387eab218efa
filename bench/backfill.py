"""Backfill throughput: the LoCoMo dev conversations through BackfillWorkflow on a real dev server.

Every dialog turn is admitted through the intake and captured by a CaptureWorkflow child (lite tier: no
model, no embedding), ``--window`` in flight, continuing as new every ``--every`` lines. Prints turns/s,
the continue-as-new runs and the largest history of any run, then re-runs the same file (all duplicates).

``--projection`` picks the capture path's projection activity:

* ``markdown`` (default): the lite projection into canonical ``daily/`` Markdown, without the per-turn
  search-index upsert (rebuild the index afterwards; its cost is recall's, measured by bench/recall.py);
* ``none``: a zero-latency no-op projection — the orchestration floor (admission + child workflows);
* ``real``: the store's own projection activity, index upsert included (use ``--limit``: the upsert cost
  grows with the DuckDB WAL).

Usage: python bench/backfill.py [FILE] [--projection markdown|none|real] [--limit N] [--window 8]
       [--batch 64] [--every 500] [--slots 1]
Prints figures; asserts nothing (timings never belong in tests).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tempomem.activities.backfill import load_locomo
from tempomem.activities.context import StoreContext
from tempomem.backfill import follow_backfill, start_backfill, write_jsonl
from tempomem.config import load_config_data
from tempomem.devserver import temporal_cli
from tempomem.storage.fsio import exclusive_lock
from tempomem.storage.projection import project
from tempomem.storage.store_ref import STORE_LOCK
from tempomem.store import MemoryStore
from tempomem.worker import backfill_worker_extras, store_activities
from tempomem.workflows import search_attributes
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.common import PROJECT, ProjectionResult, RecordRef
from tempomem.workflows.sweep import IntakeSweepWorkflow

# $TEMPOMEM_LOCOMO, else ../shared/data/locomo/ beside the repository (never a machine path)
DEFAULT_FILE = Path(
    os.environ.get("TEMPOMEM_LOCOMO")
    or Path(__file__).resolve().parents[1].parent / "shared/data/locomo/locomo-dev.json"
)


class BenchProjection:
    def __init__(self, ctx: StoreContext, mode: str) -> None:
        self.ctx = ctx
        self.mode = mode

    @activity.defn(name=PROJECT)
    def project(self, ref: RecordRef) -> ProjectionResult:
        if self.mode == "none":
            return ProjectionResult(target="daily", lines_added=1, indexed=0)
        payload = self.ctx.intake.load_payload(ref.intake_id)
        with exclusive_lock(self.ctx.root / STORE_LOCK):
            projected = project(self.ctx.root, payload)
        return ProjectionResult(target=projected.folder, lines_added=len(projected.added), indexed=0)


def activities_for(ctx: StoreContext, mode: str) -> list[Any]:
    acts = list(store_activities(ctx))
    if mode != "real":
        acts = [a for a in acts if a.__temporal_activity_definition.name != PROJECT]
        acts.append(BenchProjection(ctx, mode).project)
    return acts + backfill_worker_extras(ctx)[1]


async def run(args: argparse.Namespace) -> None:
    source = Path(args.file)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()),
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-backfill-") as tmp:
            if args.limit:
                turns = [i.turn for i in load_locomo(source) if i.turn is not None][: args.limit]
                source = Path(tmp) / "locomo.jsonl"
                write_jsonl(source, turns)
            root = Path(tmp) / "mem"
            config = load_config_data(
                {"memory": {"mode": "lite", "writeMode": "append-host-summary", "path": str(root)}}
            )
            store = MemoryStore(config, client=env.client)
            await bench(env.client, store, source, args)
    finally:
        await env.shutdown()


async def bench(client: Client, store: MemoryStore, source: Path, args: argparse.Namespace) -> None:
    ctx = store.worker_context(client)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        worker = Worker(
            client,
            task_queue=ctx.task_queue,
            workflows=[CaptureWorkflow, IntakeSweepWorkflow, *backfill_worker_extras(ctx)[0]],
            activities=activities_for(ctx, args.projection),
            activity_executor=executor,
            max_concurrent_activities=args.slots,  # build_worker: 1 — a store's activities never race
            graceful_shutdown_timeout=timedelta(seconds=10),
        )
        async with worker:
            knobs = {"window": args.window, "batch_size": args.batch, "continue_as_new_every": args.every}
            started = time.perf_counter()
            handle = await start_backfill(client, store, source, **knobs)
            first = await follow_backfill(client, handle.id)
            elapsed = time.perf_counter() - started
            runs = [w async for w in client.list_workflows(f"WorkflowId = '{handle.id}'")]
            lengths = [
                (await client.get_workflow_handle(handle.id, run_id=w.run_id).describe()).history_length
                for w in runs
            ]
            longest = max(lengths)
            started = time.perf_counter()
            handle = await start_backfill(client, store, source, **knobs)
            second = await follow_backfill(client, handle.id)
            again = time.perf_counter() - started
    ledger = store.intake.ledger.verify_all(store.intake.has_receipt)
    print(f"source        {source.name}: {first.total} turns, projection={args.projection}, lite tier")
    print(
        f"knobs         window {args.window}, batch {args.batch}, continue-as-new every {args.every} lines, "
        f"{args.slots} activity slot(s)"
    )
    print(
        f"backfill      {first.total} turns in {elapsed:.1f} s = {first.total / elapsed:.1f} turns/s "
        f"({1000 * elapsed / max(1, first.total):.0f} ms/turn)"
    )
    print(
        f"outcome       admitted {first.admitted}, resolved {first.resolved}, dead {first.dead}, "
        f"bad lines {first.bad_lines}; ledger entries {ledger}"
    )
    print(
        f"history       {first.continue_as_new_runs} continue-as-new runs ({len(runs)} executions); "
        f"longest run history {longest} events"
    )
    print(
        f"re-run        {second.duplicates} duplicates, {second.admitted} admitted, "
        f"{second.completed} captures in {again:.1f} s = {second.total / again:.1f} lines/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    parser.add_argument("--projection", choices=["markdown", "none", "real"], default="markdown")
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (as JSONL)")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--slots", type=int, default=1, help="max concurrent activities (production: 1)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
