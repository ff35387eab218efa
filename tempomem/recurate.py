"""``tempomem recurate``, host side: check the request, start ``RecurateWorkflow``, wait, print the result.

Re-curation re-runs extraction → review → reconciliation over archived capture turns (issue #6 item 2)
with the current config and, optionally, another model name. A real run supersedes changed facts and
keeps history; ``--dry-run`` changes nothing canonical and prints the unified diff of the Markdown that a
real run would write. The CLI imports this module to build its parser: Temporal loads only when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from tempomem.store import MemoryStore
    from tempomem.workflows.recurate import RecurateProgress

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # == activities.recurate.RUN_ID
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")


class RecurateRequestError(ValueError):
    """A request the CLI refuses before anything starts (bad date, bad run id, wrong tier, empty range).

    ``usage`` marks malformed arguments (exit 2); a valid request the store cannot serve exits 1.
    """

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclasses.dataclass(frozen=True)
class RecurateRequest:
    since: date
    until: date | None
    model: str | None
    dry_run: bool
    run_id: str
    archived: int  # archived turns in the range when the request was made (the progress bar's total)


def make_request(
    store: MemoryStore,
    *,
    since: str,
    until: str | None = None,
    model: str | None = None,
    dry_run: bool = False,
    run_id: str | None = None,
) -> RecurateRequest:
    """Validate everything that can be checked on this host; raises ``RecurateRequestError``."""
    from tempomem.activities.recurate import archived_count

    memory = store.config.memory
    if memory.mode != "bujo" or memory.write_mode != "capture":
        raise RecurateRequestError(
            f'recurate needs a BuJo capture store (mode "bujo", writeMode "capture"); this store is '
            f'mode "{memory.mode}", writeMode "{memory.write_mode}"'
        )
    try:
        first = date.fromisoformat(since)
        last = date.fromisoformat(until) if until else None
    except ValueError:
        raise RecurateRequestError(
            f"dates must be YYYY-MM-DD; got --since {since!r} --until {until!r}", usage=True
        ) from None
    if last is not None and last < first:
        raise RecurateRequestError(f"--until {last} is before --since {first}", usage=True)
    if model is not None and not MODEL_NAME.fullmatch(model):
        raise RecurateRequestError("--model must be a model name like llama3.2:3b (no spaces)", usage=True)
    run_id = run_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if not RUN_ID.fullmatch(run_id):
        raise RecurateRequestError("--run-id must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}", usage=True)
    archived = archived_count(store.root, since=first, until=last)
    if archived == 0:
        raise RecurateRequestError(
            f"no archived turns admitted {first} .. {last or 'now'} in {store.root / '.turn-archive'} "
            f"(turns are archived when their capture resolves and kept memory.capture.turnArchiveDays = "
            f"{store.turn_archive_days} days)"
        )
    return RecurateRequest(
        since=first, until=last, model=model, dry_run=dry_run, run_id=run_id, archived=archived
    )


async def start_recurate(
    client: Client, store: MemoryStore, req: RecurateRequest, *, batch_size: int = 1
) -> WorkflowHandle[Any, RecurateProgress]:
    """Start (or re-attach to) the re-curation ``req.run_id`` of ``store``; its worker does the work."""
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

    from tempomem.activities.sweep import search_attributes_registered
    from tempomem.workflows.recurate import (
        RECURATE_WORKFLOW,
        RecurateInput,
        RecurateProgress,
        recurate_workflow_id,
    )

    inp = RecurateInput(
        store_id=store.store_id,
        run_id=req.run_id,
        since=req.since.isoformat(),
        until=req.until.isoformat() if req.until else None,
        model=req.model,
        dry_run=req.dry_run,
        batch_size=batch_size,
        first_delay_seconds=store.first_delay_seconds,
        search_attributes=await search_attributes_registered(client),
    )
    return await client.start_workflow(
        RECURATE_WORKFLOW,
        inp,
        id=recurate_workflow_id(store.store_id, req.run_id, dry_run=req.dry_run),
        task_queue=store.task_queue,
        result_type=RecurateProgress,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=(
            f"recurate {req.run_id}{' (dry run)' if req.dry_run else ''} · {inp.since} .. "
            f"{inp.until or 'now'} · model {req.model or 'configured'} · store {store.store_id}"
        ),
        static_details="Content-free: archived turns and the diff stay on the worker host.",
    )


async def run_recurate(
    client: Client, store: MemoryStore, req: RecurateRequest, **knobs: Any
) -> RecurateProgress:
    """Start the re-curation and wait for its content-free result."""
    handle = await start_recurate(client, store, req, **knobs)
    return await handle.result()


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
    p.add_argument("--worker", action="store_true", help="run this store's worker in this process too")
    p.add_argument("--json", action="store_true", help="print the final counts (and diff path) as JSON")


def cmd_recurate(args: argparse.Namespace) -> int:
    from tempomem.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, store_from_args
    from tempomem.connect import connect
    from tempomem.worker import note_missing_worker, worker_in_process

    store = store_from_args(args)
    try:
        req = make_request(
            store,
            since=args.since,
            until=args.until,
            model=args.model,
            dry_run=args.dry_run,
            run_id=args.run_id,
        )
    except RecurateRequestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.usage else EXIT_ERROR

    from tempomem.follow import TurnBar, follow_workflow
    from tempomem.workflows.recurate import PROGRESS_QUERY, RecurateProgress

    async def main() -> RecurateProgress:
        client = await connect(store.config, store.base_dir)
        handle = await start_recurate(client, store, req)
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
                    on_progress=(lambda p: bar.show(p.turns, req.archived, progress_postfix(p)))
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
        print(f"error: recurate {req.run_id} failed ({failure_category(exc)})", file=sys.stderr)
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
        print(summary_line(final, req), file=sys.stderr)
    else:
        print(summary_line(final, req))
    return EXIT_OK if final.dead == 0 and final.pending == 0 else EXIT_ERROR


def progress_postfix(p: RecurateProgress) -> str:
    if p.diff_path or (p.model_calls and not p.admitted):  # a dry run counts calls only
        return f"model calls={p.model_calls}"
    return (
        f"admitted={p.admitted} dup={p.duplicates} resolved={p.resolved} dead={p.dead} "
        f"calls={p.model_calls} lines={p.lines_added}"
    )


def failure_category(exc: BaseException) -> str:
    """The innermost ApplicationError type of a workflow failure chain (an AMB-29 category), or 'unknown'."""
    from temporalio.exceptions import ApplicationError

    category = "unknown"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ApplicationError) and seen.type:
            category = seen.type
        seen = seen.__cause__ or getattr(seen, "cause", None)
    return category


def summary_line(p: RecurateProgress, req: RecurateRequest) -> str:
    if req.dry_run:
        return (
            f"dry run {req.run_id}: {p.turns} turns, {p.model_calls} model calls, {p.files_changed} files "
            f"would change (+{p.lines_added} -{p.lines_removed} lines, {p.superseded} superseded)"
        )
    return (
        f"recurate {req.run_id}: {p.turns} turns · admitted {p.admitted} · duplicates {p.duplicates} · "
        f"resolved {p.resolved} · dead {p.dead} · pending {p.pending} · model calls {p.model_calls} · "
        f"lines added {p.lines_added} · runs {p.continue_as_new_runs + 1}"
    )
