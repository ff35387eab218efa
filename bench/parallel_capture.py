"""Backfill and re-curation at model speed (issue #15 item 1): model calls in parallel, commits in order.

A BuJo capture store backfills ``--turns`` LoCoMo dialog turns (re-dated to the last day, so the turn
archive keeps them), then re-curates all of them, through a real dev server and the store's real worker.
The chat model is the scripted server of the tests behind real HTTP on loopback, answering concurrent
requests after ``--latency`` ± ``--jitter`` seconds (uniform, seeded): extraction says one line per turn,
review keeps it, reconciliation adds it.

The ideal is what the model alone allows: the parallel calls (extraction, review) spread over
``--concurrency`` slots, the serial ones (reconciliation, one at a time in admission order) end to end:
``max(parallel calls × mean latency / concurrency, serial calls × mean latency)``; at concurrency 1
every stage shares the store's one queue, so every call is serial. Throughput is printed
against it; everything else (Temporal dispatch, commits, index upserts) is what keeps a run below it.
Run ``--latency 0`` to see that orchestration floor alone.

Usage: python bench/parallel_capture.py [LOCOMO.json] [--turns 500] [--concurrency 8] [--window 16]
       [--latency 0.4] [--jitter 0.1]
Prints figures; asserts nothing (timings never belong in tests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from bench.histories import FIRST_TASK, LATER_TASK, step_times  # noqa: E402
from tempomem.activities.backfill import load_locomo  # noqa: E402
from tempomem.backfill import write_jsonl  # noqa: E402
from tempomem.config import load_config_data  # noqa: E402
from tempomem.devserver import temporal_cli  # noqa: E402
from tempomem.messages import search_attributes  # noqa: E402
from tempomem.recurate import make_request  # noqa: E402
from tempomem.starts import run_backfill, run_recurate  # noqa: E402
from tempomem.storage.turn import CompletedTurn  # noqa: E402
from tempomem.store import MemoryStore  # noqa: E402
from tempomem.worker import run_worker  # noqa: E402
from tests.scripted_model import ScriptedModelServer  # noqa: E402

# $TEMPOMEM_LOCOMO, else ../shared/data/locomo/ beside the repository (never a machine path)
DEFAULT_FILE = Path(os.environ.get("TEMPOMEM_LOCOMO") or ROOT.parent / "shared/data/locomo/locomo-dev.json")


class Model:
    """The scripted model's behaviour and what it saw: calls by kind, latencies slept, most in flight.

    The counters live in shared memory, so the server can answer from a process of its own (the
    default, as a real model server does) while the bench reads them."""

    KINDS = ("extract", "review", "reconcile")

    def __init__(self, latency: float, jitter: float) -> None:
        ctx = multiprocessing.get_context("fork")
        self.latency, self.jitter = latency, jitter
        self.rng = random.Random(15)
        self.lock = ctx.Lock()
        self._calls = ctx.Array("i", len(self.KINDS), lock=False)
        self._slept = ctx.Array("d", 2, lock=False)  # sum, count
        self._flight = ctx.Array("i", 2, lock=False)  # now, most

    @property
    def most(self) -> int:
        return self._flight[1]

    def answer(self, request: dict[str, Any]) -> str:
        system = request["messages"][0]["content"]
        kind = (
            "extract"
            if system.startswith("You extract")
            else "review"
            if system.startswith("You review")
            else "reconcile"
        )
        with self.lock:
            self._calls[self.KINDS.index(kind)] += 1
            self._flight[0] += 1
            self._flight[1] = max(self._flight[1], self._flight[0])
            delay = max(0.0, self.latency + self.rng.uniform(-self.jitter, self.jitter))
            self._slept[0] += delay
            self._slept[1] += 1
        try:
            time.sleep(delay)
        finally:
            with self.lock:
                self._flight[0] -= 1
        if kind == "extract":
            turn = json.loads(request["messages"][1]["content"].split("<turn>\n", 1)[1].split("\n</turn>")[0])
            said = turn[0]["text"][:160]
            line = {"text": said, "kind": "fact", "source": "user", "salience": 0.8}
            line["entities"] = []
            return json.dumps({"memories": [line], "entities": [], "relations": []})
        if kind == "review":
            lines = json.loads(
                request["messages"][1]["content"].split("<lines>\n", 1)[1].rsplit("\n</lines>", 1)[0]
            )
            return json.dumps({"decisions": [{"line": x["line"], "decision": "keep"} for x in lines]})
        return json.dumps({"decisions": [{"index": 0, "action": "ADD"}]})

    def snapshot(self) -> tuple[Counter[str], float, int]:
        with self.lock:
            calls = Counter(dict(zip(self.KINDS, self._calls, strict=True)))
            return calls, self._slept[0], int(self._slept[1])


class ModelServer:
    """The scripted server answering ``model``: in a process of its own (``own_process``), else on
    threads of the bench's process, beside the worker (the arrangement of the first measurements)."""

    def __init__(self, model: Model, calls: int, *, own_process: bool) -> None:
        self.server = ScriptedModelServer([model.answer] * calls)
        self.process: Any = None
        if not own_process:
            self.server.start()
            self.url = self.server.url
            return
        ctx = multiprocessing.get_context("fork")
        ready, self._stop = ctx.Queue(), ctx.Event()
        self.process = ctx.Process(target=self._serve, args=(ready,), daemon=True)
        self.process.start()
        self.url = ready.get(timeout=30)

    def _serve(self, ready: Any) -> None:
        self.server.start()
        ready.put(self.server.url)
        self._stop.wait()
        self.server.close()

    def close(self) -> None:
        if self.process is None:
            self.server.close()
            return
        self._stop.set()
        self.process.join(timeout=10)


def turns_from(path: Path, count: int) -> list[CompletedTurn]:
    """The first ``count`` LoCoMo dialog turns (synthetic ones when the file is absent), re-dated to
    one-second steps within the last day so the turn archive keeps them for re-curation."""
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=20)
    if path.exists():
        source = [i.turn for i in load_locomo(path) if i.turn is not None][:count]
    else:
        print(f"note: {path} absent; synthetic turns", file=sys.stderr)
        source = []
    out = []
    for n in range(count):
        if n < len(source):
            turn = source[n].model_copy(update={"admitted_at": base + timedelta(seconds=n)})
        else:
            turn = CompletedTurn(
                run_id=f"bench-{n}",
                conversation_id="bench:c",
                speaker_kind="human-turn",
                user_text=f"My locker number {n} is painted colour {n % 17}.",
                final_answer="Noted.",
                admitted_at=base + timedelta(seconds=n),
            )
        out.append(turn)
    return out


def report(
    name: str, turns: int, seconds: float, model: Model, before: tuple[Counter[str], float, int], args
) -> None:
    calls, slept_sum, slept_n = before
    now_calls, now_sum, now_n = model.snapshot()
    delta = {k: now_calls[k] - calls[k] for k in Model.KINDS}
    mean = (now_sum - slept_sum) / (now_n - slept_n) if now_n > slept_n else 0.0
    parallel = delta["extract"] + delta["review"]
    if args.concurrency == 1:  # one queue for every stage: every call is serial
        ideal = (parallel + delta["reconcile"]) * mean
    else:  # `concurrency` model slots beside the serial queue's one
        ideal = max(parallel * mean / args.concurrency, delta["reconcile"] * mean)
    rate = turns / seconds
    print(
        f"{name:<12} {turns} turns in {seconds:6.1f} s = {rate:5.2f} turns/s   "
        f"calls: extract {delta['extract']}, review {delta['review']}, "
        f"reconcile {delta['reconcile']} (mean latency {1000 * mean:.0f} ms)"
    )
    if ideal > 0:
        print(
            f"{'':<12} model-bound ideal {ideal:6.1f} s = {turns / ideal:5.2f} turns/s   "
            f"achieved {100 * ideal / seconds:.0f}% of ideal"
        )


async def breakdown(client: Any, seen: set[str]) -> None:
    """From the histories of the capture workflows not yet seen: per activity type, how many ran and
    their summed and median work (started → completed); and how often a commit waited for its turn."""
    work: dict[str, list[float]] = {}
    signals = timers = 0
    async for w in client.list_workflows("WorkflowType = 'CaptureWorkflow'"):
        if w.id in seen:
            continue
        seen.add(w.id)
        history = await client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
        for name, _, seconds_ms in step_times(history):
            if name not in (FIRST_TASK, LATER_TASK):
                work.setdefault(name, []).append(seconds_ms / 1000)
        for e in history.events:
            if e.HasField("workflow_execution_signaled_event_attributes"):
                signals += 1
            elif e.HasField("timer_fired_event_attributes"):
                timers += 1
    for name, times in sorted(work.items()):
        print(
            f"{'':<12} {name:<22} {len(times):5d} runs, {sum(times):7.1f} s in all, "
            f"median {1000 * statistics.median(times):6.1f} ms"
        )
    print(f"{'':<12} commit-turn signals received {signals}, re-checks after waiting {timers}")


async def run(args: argparse.Namespace) -> None:
    # The server's process forks before the dev server and the SDK's runtime threads exist.
    model = Model(args.latency, args.jitter)
    server = ModelServer(model, 10 * args.turns, own_process=not args.model_in_process)
    where = "in the bench process" if args.model_in_process else "in its own process"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()),
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
            source = Path(tmp) / "turns.jsonl"
            write_jsonl(source, turns_from(Path(args.file), args.turns))
            llm = {"provider": "ollama", "model": "scripted", "endpoint": server.url}
            llm["concurrency"] = args.concurrency
            config = load_config_data(
                {
                    "memory": {
                        "mode": "bujo",
                        "writeMode": "capture",
                        "path": str(Path(tmp) / "mem"),
                        "embeddings": {"provider": "local"},
                        "llm": llm,
                    }
                }
            )
            store = MemoryStore(config, client=env.client, first_delay_seconds=1)
            stop = asyncio.Event()
            worker = asyncio.create_task(
                run_worker(env.client, store.worker_context(env.client), stop=stop, schedule=False)
            )
            try:
                print(
                    f"store        bujo/capture, memory.llm.concurrency {args.concurrency}, "
                    f"window {args.window}, model latency {args.latency:g} s ± {args.jitter:g} s, "
                    f"model server {where}"
                )
                before = model.snapshot()
                started = time.perf_counter()
                done = await run_backfill(env.client, store, source, window=args.window, batch_size=64)
                report("backfill", done.resolved, time.perf_counter() - started, model, before, args)
                seen: set[str] = set()
                await breakdown(env.client, seen)
                if done.resolved != args.turns:
                    print(
                        f"             (admitted {done.admitted}, resolved {done.resolved}, dead {done.dead})"
                    )
                since = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
                req = make_request(store, since=since, run_id="bench")
                before = model.snapshot()
                started = time.perf_counter()
                again = await run_recurate(env.client, store, req, window=args.window, batch_size=16)
                report("re-curation", again.resolved, time.perf_counter() - started, model, before, args)
                await breakdown(env.client, seen)
                print(f"{'':<12} most model calls in flight at once: {model.most}")
            finally:
                stop.set()
                await worker
    finally:
        server.close()
        await env.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8, help="memory.llm.concurrency (1: serial)")
    parser.add_argument("--window", type=int, default=16, help="captures in flight (backfill, recurate)")
    parser.add_argument("--latency", type=float, default=0.4, help="mean model latency, seconds")
    parser.add_argument("--jitter", type=float, default=0.1, help="± uniform jitter, seconds")
    parser.add_argument(
        "--model-in-process",
        action="store_true",
        help="answer model calls on threads of this process, beside the worker (as measured before #15's "
        "second round); by default the scripted server runs in a process of its own, as a model server does",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
