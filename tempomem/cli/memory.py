"""``tempomem search``, ``profile``, ``journal`` and ``remember``: reading and writing memory."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tempomem.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    store_from_args,
)


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
    p = sub.add_parser("search", help="hybrid recall over canonical memory (DuckDB FTS + LanceDB vectors)")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument(
        "--json", action="store_true", help="machine-readable hits: id, score, recorded date, text"
    )
    p.set_defaults(func=cmd_search)

    p = sub.add_parser(
        "profile", help="the owner profile as automatic recall would inject it (BuJo; read-only)"
    )
    p.add_argument("--json", action="store_true", help="entries, code points and bytes as JSON")
    p.set_defaults(func=cmd_profile)

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


def cmd_profile(args: argparse.Namespace) -> int:
    """CLI-17: the owner profile by the automatic rule (PROFILE-07), read-only; prints the profile text."""
    store = store_from_args(args, must_exist=True)
    profile = store.profile_sync()
    memory = store.config.memory
    enabled = bool(memory.profile and memory.profile.enabled)
    if args.json:
        report = {
            "enabled": enabled,
            "entries": list(profile.entries),
            "code_points": len(profile.text),
            "bytes": profile.byte_size,
        }
        print(json.dumps(report, indent=2, ensure_ascii=False))
    elif memory.mode != "bujo":
        print(f"no profile: the owner profile needs the BuJo tier (mode is {memory.mode})")
    else:
        print(profile.text or "no profile: no current owner fact or agent-scope preference")
        if not enabled:
            print("(memory.profile.enabled is off: this is not injected into turns)")
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
