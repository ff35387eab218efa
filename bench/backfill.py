"""Backfill throughput: the LoCoMo dev conversations through BackfillWorkflow on a real dev server.

Every dialog turn is admitted through the intake and captured by a CaptureWorkflow child (lite tier: no
model, no embedding), ``--window`` in flight, continuing as new every ``--every`` lines. Prints turns/s,
the continue-as-new runs and the largest history of any run, then re-runs the same file (all duplicates).

``--projection`` picks how each child settles its turn:

* ``real`` (default): the store's own ``capture.settle`` local activity (attempt, Lite projection into
  ``daily/``, resolve), with the run's index updates grouped (issue #15 item 2) and flushed by the
  backfill's last step; the bench then checks that every line is in the index;
* ``none``: a no-op settle that touches nothing — the orchestration floor of one workflow per turn
  (admission + child workflows), measured in the same run by ``--compare``.

``--compare`` runs ``none`` first on the same turns, then ``real``, and prints their ratio.

Usage: python bench/backfill.py [FILE] [--projection real|none] [--compare] [--tier lite|journal]
       [--limit N] [--window 32] [--batch 64] [--every 500] [--slots 1]
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
from tempomem.backfill import follow_backfill, write_jsonl
from tempomem.config import load_config_data
from tempomem.devserver import temporal_cli
from tempomem.messages import search_attributes
from tempomem.messages.capture import SETTLE, AttemptInfo, SettleInput
from tempomem.recall.index import MemoryIndex
from tempomem.starts import start_backfill
from tempomem.storage.markdown import iter_bullets
from tempomem.store import MemoryStore
from tempomem.worker import backfill_worker_extras, store_activities, workflow_runner
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow

# $TEMPOMEM_LOCOMO, else ../shared/data/locomo/ beside the repository (never a machine path)
DEFAULT_FILE = Path(
    os.environ.get("TEMPOMEM_LOCOMO")
    or Path(__file__).resolve().parents[1].parent / "shared/data/locomo/locomo-dev.json"
)


class NoopSettle:
    """The orchestration floor: settles nothing, touches no file (records stay pending)."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    @activity.defn(name=SETTLE)
    async def settle(self, inp: SettleInput) -> AttemptInfo:
        return AttemptInfo(1, True, "append-host-summary", self.ctx.tier, settled=True)


def activities_for(ctx: StoreContext, mode: str) -> list[Any]:
    acts = list(store_activities(ctx))
    if mode == "none":
        acts = [a for a in acts if a.__temporal_activity_definition.name != SETTLE]
        acts.append(NoopSettle(ctx).settle)
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
            modes = ["none", "real"] if args.compare else [args.projection]
            rates = {}
            for mode in modes:
                root = Path(tmp) / f"mem-{mode}"
                memory = {"mode": args.tier, "writeMode": "append-host-summary", "path": str(root)}
                if args.tier == "journal":
                    memory["embeddings"] = {"provider": "local"}  # the shipped MiniLM
                config = load_config_data({"memory": memory})
                store = MemoryStore(config, client=env.client)
                rates[mode] = await bench(env.client, store, source, args, mode)
            if args.compare:
                print(
                    f"ratio         real {rates['real']:.1f} turns/s = {rates['real'] / rates['none']:.0%} "
                    f"of the one-workflow-per-turn floor ({rates['none']:.1f} turns/s, same run)"
                )
    finally:
        await env.shutdown()


async def bench(
    client: Client, store: MemoryStore, source: Path, args: argparse.Namespace, mode: str
) -> float:
    ctx = store.worker_context(client)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        worker = Worker(
            client,
            task_queue=ctx.task_queue,
            workflows=[CaptureWorkflow, IntakeSweepWorkflow, *backfill_worker_extras(ctx)[0]],
            activities=activities_for(ctx, mode),
            activity_executor=executor,
            max_concurrent_activities=args.slots,  # build_worker: 1 — a store's activities never race
            graceful_shutdown_timeout=timedelta(seconds=10),
            workflow_runner=workflow_runner(),  # as build_worker
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
    print(f"source        {source.name}: {first.total} turns, projection={mode}, {args.tier} tier")
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
    if mode == "real":
        lines = {b.id for _, b in iter_bullets(store.root, "daily")}
        manifest = MemoryIndex(store.root, None).manifest() or {}
        rows = manifest.get("rows")
        left = store.worker_context(client).index_backlog.marked_days()
        print(f"index         {rows} rows for {len(lines)} daily lines at the end; {len(left)} days marked")
    print(
        f"history       {first.continue_as_new_runs} continue-as-new runs ({len(runs)} executions); "
        f"longest run history {longest} events"
    )
    print(
        f"re-run        {second.duplicates} duplicates, {second.admitted} admitted, "
        f"{second.completed} captures in {again:.1f} s = {second.total / again:.1f} lines/s"
    )
    return first.total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    parser.add_argument("--projection", choices=["real", "none"], default="real")
    parser.add_argument("--compare", action="store_true", help="run none, then real; print the ratio")
    parser.add_argument("--tier", choices=["lite", "journal"], default="lite", help="journal embeds")
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (as JSONL)")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--slots", type=int, default=1, help="max concurrent activities (production: 1)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
