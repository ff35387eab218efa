"""Many stores, one worker process (issue #16 item 5): memory per store and latency under a steady load.

For each ``--stores`` count N the bench creates N stores under one directory, starts one real
``tempomem worker --stores DIR`` process against a dev server, waits until it serves all N, and admits
one warm-up turn into every store, then ``--turns`` turns round robin over them, from this process
(the agent host) at ``--rate`` turns/s in total: the same work whatever N is. It prints:

* the worker's RSS idle (all stores served, nothing curated yet), right after the work, settled (15 s
  later, once cached index connections have closed) and its peak; the first turn of each store (which
  builds its index) is a warm-up, measured apart;
* RSS per additional store, against the first count given (``(RSS_N - RSS_1) / (N - 1)``);
* admission-to-curated latency p50/p95: from just before ``persist_completed_turn`` to the capture
  workflow's close time on the server, and total throughput;
* with ``--per-process K``: the same work on K stores run as K single-store worker processes (the
  shape before #16), their summed RSS and latency, to compare per store.

Usage: python bench/fleet.py [--stores 1 100] [--turns 300] [--rate 5] [--tier journal]
       [--per-process 10]
Prints figures; asserts nothing (timings never belong in tests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from bench.histories import step_times  # noqa: E402
from tempomem.config import load_config_file  # noqa: E402
from tempomem.devserver import temporal_cli  # noqa: E402
from tempomem.fleet import store_config  # noqa: E402
from tempomem.messages import search_attributes  # noqa: E402
from tempomem.storage.fsio import ensure_private_dir  # noqa: E402
from tempomem.storage.store_ref import store_id  # noqa: E402
from tempomem.storage.turn import CompletedTurn  # noqa: E402
from tempomem.store import MemoryStore  # noqa: E402

WORDS = [
    *("kayak", "canoe", "garden", "dentist", "invoice", "museum", "recipe", "violin", "hiking", "budget"),
    *("passport", "tomato", "library", "conference", "bicycle", "painting", "sister", "birthday"),
    *("marathon", "tutor", "apartment", "ferry", "concert"),
]
# Longer than the idle close of cached DuckDB connections (recall.connections, 10 s).
SETTLE_SECONDS = 15.0


def rss_mib(pid: int, field_name: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field_name} for {pid}")


def write_config(path: Path, *, tier: str, address: str, memory_path: str) -> Path:
    memory: dict[str, object] = {"mode": tier, "writeMode": "append-host-summary", "path": memory_path}
    if tier != "lite":
        memory["embeddings"] = {"provider": "local"}
    path.write_text(json.dumps({"memory": memory, "temporal": {"address": address}}))
    return path


@dataclass
class Worker:
    """One ``tempomem worker`` process and the store paths it reported running."""

    proc: subprocess.Popen[str]
    running: set[str] = field(default_factory=set)
    lines: list[str] = field(default_factory=list)

    def follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("store ") and line.rstrip().endswith(": running"):
                self.running.add(line.split(" ", 2)[1])
            elif line.startswith("worker for store "):
                self.running.add("single")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_worker(args: list[str], cwd: Path) -> Worker:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tempomem.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    worker = Worker(proc)
    threading.Thread(target=worker.follow, daemon=True).start()
    return worker


async def wait_serving(workers: list[Worker], expected: int, timeout: float = 300) -> float:
    started = time.monotonic()
    while sum(len(w.running) for w in workers) < expected:
        if any(w.proc.poll() is not None for w in workers):
            raise RuntimeError("a worker exited: " + " | ".join(workers[0].lines[-5:]))
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only {sum(len(w.running) for w in workers)} of {expected} stores served")
        await asyncio.sleep(0.2)
    return time.monotonic() - started


async def drive(client: Client, stores: list[MemoryStore], turns: int, rate: float, phase: str) -> dict:
    """Admit ``turns`` round robin at ``rate`` turns/s in total; wait for every capture; latencies from
    the server's close times."""
    rng = random.Random(7)
    admitted: list[tuple[float, str]] = []
    start = time.time()
    for n in range(turns):
        i = n % len(stores)
        await asyncio.sleep(max(0.0, start + n / rate - time.time()))
        text = " ".join(rng.choice(WORDS) for _ in range(12)) + f" (store {i}, turn {n})."
        turn = CompletedTurn(
            run_id=f"bench-{phase}-{n}",
            conversation_id=f"bench:{i}",
            speaker_kind="human-turn",
            user_text="note this",
            final_answer=text,
            admitted_at=datetime.now(UTC),
        )
        at = time.time()
        result = await stores[i].persist_completed_turn(turn)
        assert result.workflow_id is not None
        admitted.append((at, result.workflow_id))
    timed: list[tuple[float, str, float]] = []  # (latency s, workflow id, admitted at)
    last_close = 0.0
    for at, wid in admitted:
        handle = client.get_workflow_handle(wid)
        await handle.result()
        described = await handle.describe()
        assert described.close_time is not None
        closed = described.close_time.timestamp()
        timed.append((closed - at, wid, at))
        last_close = max(last_close, closed)
    timed.sort()
    latencies = [t[0] for t in timed]
    return {
        "turns": len(admitted),
        "p50_ms": statistics.median(latencies) * 1000,
        "p95_ms": latencies[math.ceil(len(latencies) * 0.95) - 1] * 1000,  # nearest rank
        "throughput": len(admitted) / (last_close - start),
        "tail": await tail_steps(client, timed[math.ceil(len(timed) * 0.95) - 1 :]),
    }


async def tail_steps(client: Client, slowest: list[tuple[float, str, float]]) -> str:
    """Where the slowest turns spent their time: admission → start, then each step's mean dispatch and
    work (from their histories; content-free)."""
    steps: dict[str, list[float]] = {}
    to_start = []
    for _, wid, at in slowest:
        history = await client.get_workflow_handle(wid).fetch_history()
        to_start.append(history.events[0].event_time.ToDatetime().replace(tzinfo=UTC).timestamp() - at)
        for name, dispatch, work in step_times(history):
            steps.setdefault(name, [0.0, 0.0, 0.0])
            steps[name][0] += 1
            steps[name][1] += dispatch
            steps[name][2] += work
    parts = [f"admission→start {statistics.mean(to_start) * 1000:.0f}"]
    parts += [f"{name} {d / n:.0f}+{w / n:.0f}" for name, (n, d, w) in steps.items()]
    return "slowest 5% (ms, dispatch+work): " + ", ".join(parts)


def total_rss(pids: list[int], field_name: str = "VmRSS") -> float:
    return sum(rss_mib(pid, field_name) for pid in pids)


async def measure(
    client: Client, pids: list[int], agents: list[MemoryStore], args: argparse.Namespace
) -> dict:
    """Idle RSS; a warm-up turn per store (it builds the store's index and loads the embedder); then the
    measured turns, with the peak RSS reset in between so it is the measured phase's own."""
    idle = total_rss(pids)
    warm = await drive(client, agents, len(agents), args.rate, "warm")
    warm_peak = total_rss(pids, "VmHWM")
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM (Linux)
    figures = await drive(client, agents, args.turns, args.rate, "run")
    figures.update(
        idle_mib=idle,
        warm_p95_ms=warm["p95_ms"],
        warm_peak_mib=warm_peak,
        after_mib=total_rss(pids),
    )
    await asyncio.sleep(SETTLE_SECONDS)
    figures.update(settled_mib=total_rss(pids), peak_mib=total_rss(pids, "VmHWM"))
    return figures


def make_stores(parent: Path, count: int) -> list[Path]:
    roots = []
    for i in range(count):
        root = parent / f"s{i:04d}"
        ensure_private_dir(root)
        store_id(root)
        roots.append(root)
    return roots


async def run_fleet(client: Client, address: str, work: Path, n: int, args: argparse.Namespace) -> dict:
    base = work / f"fleet-{n}"
    stores_dir = ensure_private_dir(base / "stores")
    roots = make_stores(stores_dir, n)
    cfg = write_config(base / "tempomem.json", tier=args.tier, address=address, memory_path="unused")
    worker = start_worker(
        ["--config", str(cfg), "worker", "--stores", str(stores_dir), "--scan-seconds", "1"], base
    )
    try:
        ready_s = await wait_serving([worker], n)
        await asyncio.sleep(2)
        config = load_config_file(cfg)
        agents = [MemoryStore(store_config(config, r), client=client) for r in roots]
        figures = await measure(client, [worker.proc.pid], agents, args)
        figures.update(stores=n, ready_s=ready_s)
        return figures
    finally:
        worker.stop()


async def run_per_process(client: Client, address: str, work: Path, k: int, args: argparse.Namespace) -> dict:
    base = work / f"per-process-{k}"
    ensure_private_dir(base)
    roots = make_stores(base, k)
    workers, configs = [], []
    for i, root in enumerate(roots):
        cfg = write_config(base / f"store-{i}.json", tier=args.tier, address=address, memory_path=str(root))
        configs.append(cfg)
        workers.append(start_worker(["--config", str(cfg), "worker"], base))
    try:
        ready_s = await wait_serving(workers, k)
        await asyncio.sleep(2)
        agents = [MemoryStore(load_config_file(c), client=client) for c in configs]
        figures = await measure(client, [w.proc.pid for w in workers], agents, args)
        figures.update(stores=k, ready_s=ready_s)
        return figures
    finally:
        for w in workers:
            w.stop()


def show(label: str, f: dict) -> None:
    print(
        f"{label:<18} {f['stores']:>5} stores  ready {f['ready_s']:5.1f} s  "
        f"RSS idle {f['idle_mib']:6.0f} MiB, "
        f"after {f['after_mib']:6.0f}, settled {f['settled_mib']:6.0f} (peak {f['peak_mib']:6.0f})  "
        f"{f['turns']} turns  p50 {f['p50_ms']:6.0f} ms  p95 {f['p95_ms']:6.0f} ms  "
        f"{f['throughput']:5.1f} turns/s; warm-up turn p95 {f['warm_p95_ms']:.0f} ms, "
        f"peak {f['warm_peak_mib']:.0f} MiB",
        flush=True,
    )
    print(f"  {f['tail']}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--turns", type=int, default=300, help="measured turns, spread over the stores")
    parser.add_argument("--rate", type=float, default=5.0, help="turns/s admitted in total")
    parser.add_argument("--tier", choices=["lite", "journal"], default="journal")
    parser.add_argument("--per-process", type=int, default=0, help="also run K single-store processes")
    parser.add_argument(
        "--dev-server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="passed to the dev server, e.g. --dev-server-arg=--dynamic-config-value "
        "--dev-server-arg=frontend.namespaceRPS=100000 (its limits throttle ~1,000 stores)",
    )
    args = parser.parse_args()

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()),
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
        dev_server_extra_args=args.dev_server_arg,
    )
    address = env.client.service_client.config.target_host
    print(
        f"tier {args.tier}, {args.turns} turns (after one warm-up turn per store) at {args.rate:g} "
        f"turns/s in total, {os.cpu_count()} CPUs",
        flush=True,
    )
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="tempomem-fleet-") as tmp:
            work = Path(tmp)
            for n in args.stores:
                f = await run_fleet(env.client, address, work, n, args)
                results.append(f)
                show("one process", f)
            if args.per_process:
                f = await run_per_process(env.client, address, work, args.per_process, args)
                show("process per store", f)
                print(
                    f"  per store: {f['after_mib'] / f['stores']:.1f} MiB as separate processes",
                    flush=True,
                )
    finally:
        await env.shutdown()
    first = results[0]
    for f in results[1:]:
        extra = f["stores"] - first["stores"]
        marginal = {k: (f[k] - first[k]) / extra for k in ("idle_mib", "after_mib", "settled_mib")}
        print(
            f"{f['stores']} vs {first['stores']} store(s): per additional store "
            f"{marginal['idle_mib']:.2f} MiB idle, {marginal['after_mib']:.2f} after work, "
            f"{marginal['settled_mib']:.2f} settled (goal ≤ 5); "
            f"p95 ratio {f['p95_ms'] / first['p95_ms']:.2f}× (goal ≤ 2×); total {f['peak_mib']:.0f} MiB peak "
            "(goal < 1024)",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
    # Temporal's native threads can abort a finalizing interpreter (#13, as `tempomem.cli.run` says):
    # everything is printed, so leave without finalization.
    sys.stdout.flush()
    os._exit(0)
