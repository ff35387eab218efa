"""Batch work as workflows: ``backfill``, ``consolidate``, ``recurate``, over the host side in
``tempomem.backfill`` and ``tempomem.recurate``. Building the parser stays light: Temporal and the
activities load when a command runs."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempomem import backfill, recurate
from tempomem.cli.common import add_store_selector, positive_int

if TYPE_CHECKING:
    from tempomem.messages.backfill import BackfillProgress


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
    p = sub.add_parser(
        "backfill",
        help="admit a JSONL of completed turns (or a LoCoMo JSON) through the intake, with progress",
    )
    add_backfill_arguments(p)
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser(
        "consolidate", help="regenerate index.md (no model call, no canonical change); --schedule: periodic"
    )
    add_consolidate_arguments(p)
    p.set_defaults(func=cmd_consolidate)
    p = sub.add_parser(
        "recurate",
        help="re-run extraction/review/reconciliation over archived capture turns (BuJo capture)",
        description=(
            "Re-curate the capture turns admitted between --since and --until (UTC days) with the current "
            "config, or another model name, as a RecurateWorkflow on this store's worker. Changed facts "
            "supersede the old lines, which stay as history; unchanged facts stay as they are. Needs the "
            "turn archive (memory.capture.turnArchiveDays, default 90). --dry-run changes nothing and "
            "prints the unified diff of daily/*.md that a real run would make."
        ),
    )
    add_recurate_arguments(p)
    p.set_defaults(func=cmd_recurate)


def add_backfill_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSONL of completed turns, or a LoCoMo-style conversation JSON")
    p.add_argument("--format", default="auto", choices=["auto", *backfill.FORMATS])
    p.add_argument(
        "--window",
        type=int,
        default=backfill.BACKFILL_WINDOW_DEFAULT,
        help=f"capture workflows in flight (default {backfill.BACKFILL_WINDOW_DEFAULT})",
    )
    p.add_argument("--batch", type=int, default=64, help="lines admitted per activity (default 64)")
    p.add_argument(
        "--continue-as-new-every", type=int, default=500, help="lines per workflow run (default 500)"
    )
    p.add_argument("--worker", action="store_true", help="run this store's worker in this process too")
    p.add_argument("--no-wait", action="store_true", help="start (or find) the backfill and return")
    p.add_argument("--json", action="store_true", help="print the final counts as JSON")
    add_store_selector(p)


def add_consolidate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedule", action="store_true", help="create/update the periodic Temporal Schedule")
    p.add_argument("--every-minutes", type=int, default=60, help="schedule interval (default 60)")
    p.add_argument("--local", action="store_true", help="regenerate in this process, without Temporal")
    p.add_argument("--json", action="store_true")
    add_store_selector(p)


def cmd_backfill(args: argparse.Namespace) -> int:
    from tempomem.cli.common import EXIT_ERROR, EXIT_OK, store_from_args
    from tempomem.connect import connect

    store = store_from_args(args, new_ok=True)
    path = Path(args.file)
    if not path.is_file():
        print(f"error: {path} is not a file", file=sys.stderr)
        return EXIT_ERROR

    async def main() -> BackfillProgress | None:
        from tempomem import starts
        from tempomem.worker import note_missing_worker, worker_in_process

        client = await connect(store.config, store.base_dir)
        handle = await starts.start_backfill(
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
            bar = backfill.ProgressBar()
            follow = asyncio.ensure_future(
                backfill.follow_backfill(client, handle.id, on_progress=bar.update)
            )
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
        print(json.dumps(as_json(final), indent=2))
    else:
        print(backfill.summary_line(final))
        for bad in final.bad:
            print(f"  bad line {bad.line}: {bad.reason}", file=sys.stderr)
        if final.bad_lines > len(final.bad):
            print(f"  … and {final.bad_lines - len(final.bad)} more bad lines", file=sys.stderr)
    return EXIT_OK


def as_json(p: BackfillProgress) -> dict[str, Any]:
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
        print_consolidation(report, as_json=args.json)
        return EXIT_OK

    async def main() -> Any:
        from tempomem import starts
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
            return await starts.consolidate_now(client, store)
        from tempomem.storage.consolidation import consolidate

        print("note: no worker polls this store's task queue; regenerating in process", file=sys.stderr)
        return await asyncio.to_thread(consolidate, store.root)

    report = asyncio.run(main())
    if report is not None:
        print_consolidation(report, as_json=args.json)
    return EXIT_OK


def print_consolidation(report: Any, *, as_json: bool) -> None:
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


def add_recurate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", required=True, help="first UTC admission day of the turns, YYYY-MM-DD")
    p.add_argument("--until", help="last UTC admission day, YYYY-MM-DD (inclusive; default: now)")
    p.add_argument("--model", help="use this model name instead of memory.llm.model (same provider)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing; print the unified diff of daily/*.md a real run would make",
    )
    p.add_argument(
        "--run-id",
        help="names this re-curation (default: the UTC start time); the same id again admits nothing twice "
        "and re-attaches to a running one",
    )
    p.add_argument(
        "--window",
        type=positive_int,
        default=recurate.RECURATE_WINDOW_DEFAULT,
        help="captures in flight at once (default %(default)s); their model calls overlap up to "
        "memory.llm.concurrency, and commits stay in admission order",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=recurate.RECURATE_BATCH_DEFAULT,
        help="archived turns re-admitted per activity (default %(default)s)",
    )
    p.add_argument("--worker", action="store_true", help="run this store's worker in this process too")
    p.add_argument("--json", action="store_true", help="print the final counts (and diff path) as JSON")
    add_store_selector(p)


def cmd_recurate(args: argparse.Namespace) -> int:
    from tempomem.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, store_from_args
    from tempomem.connect import connect
    from tempomem.worker import note_missing_worker, worker_in_process

    store = store_from_args(args)
    try:
        req = recurate.make_request(
            store,
            since=args.since,
            until=args.until,
            model=args.model,
            dry_run=args.dry_run,
            run_id=args.run_id,
        )
    except recurate.RecurateRequestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.usage else EXIT_ERROR

    from tempomem.follow import TurnBar, follow_workflow
    from tempomem.messages.recurate import PROGRESS_QUERY, RecurateProgress

    async def main() -> RecurateProgress:
        from tempomem import starts

        client = await connect(store.config, store.base_dir)
        handle = await starts.start_recurate(client, store, req, batch_size=args.batch, window=args.window)
        print(f"recurate {handle.id} on task queue {store.task_queue}", file=sys.stderr, flush=True)
        async with worker_in_process(client, store, enabled=args.worker) as worker:
            if worker is None:
                await note_missing_worker(client, store)
            bar = None if args.json else TurnBar(total=req.archived, desc=req.run_id)
            try:
                return await follow_workflow(
                    client,
                    handle.id,
                    query=PROGRESS_QUERY,
                    result_type=RecurateProgress,
                    on_progress=(lambda p: bar.show(p.turns, req.archived, recurate.progress_postfix(p)))
                    if bar
                    else None,
                )
            finally:
                if bar is not None:
                    bar.close()

    from temporalio.client import WorkflowFailureError

    try:
        final = asyncio.run(main())
    except WorkflowFailureError as exc:
        # Content-free: the failure category (e.g. invalid_output, llm_timeout) and the run id, never text.
        print(f"error: recurate {req.run_id} failed ({recurate.failure_category(exc)})", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(
            "\ninterrupted; the re-curation goes on in the worker — run the same command with --run-id "
            f"{req.run_id} to re-attach",
            file=sys.stderr,
        )
        return 130
    if args.json:
        print(json.dumps(dataclasses.asdict(final), indent=2))
    elif req.dry_run:
        # The diff is what the user asked to see; it lives on the worker host (this one, usually).
        path = Path(final.diff_path)
        if path.is_file():
            sys.stdout.write(path.read_text(encoding="utf-8"))
        else:
            print(f"diff written on the worker host: {path}", file=sys.stderr)
        print(recurate.summary_line(final, req), file=sys.stderr)
    else:
        print(recurate.summary_line(final, req))
    return EXIT_OK if final.dead == 0 and final.pending == 0 else EXIT_ERROR
