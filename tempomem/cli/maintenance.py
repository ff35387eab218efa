"""Operator commands on one store: ``validate``, ``rebuild``, ``inspect``, ``retry``, ``resolve``,
``adopt-replay``, ``health``. Inspection is content-free (CLI-20); repairs need the agent stopped (AMB-02).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempomem.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    MissingStoreError,
    add_store_selector,
    check_store_name,
    store_from_args,
)
from tempomem.storage.intake_records import IntakeError, RecordState

if TYPE_CHECKING:
    from tempomem.fleet import StoreScan
    from tempomem.storage.health import HealthReport

_COUNTS = ("pending", "due", "dead", "resolved")


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
    p = sub.add_parser("validate", help="check a config file; prints every violation with its key path")
    p.add_argument("file")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("rebuild", help="rebuild the search index from canonical Markdown alone")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--force",
        action="store_true",
        help="activate even if it holds under half the active index's memories",
    )
    add_store_selector(p)
    p.set_defaults(func=cmd_rebuild)

    p = sub.add_parser("inspect", help="content-free view of the durable intake (ids, states, counters)")
    p.add_argument("id", nargs="?", help="one 64-character intake id")
    p.add_argument("--json", action="store_true")
    add_store_selector(
        p,
        across="alone, the counts of every store there and the totals; with an ID, which store holds it",
    )
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("retry", help="make dead or delayed intake records due again (agent stopped)")
    p.add_argument("id", nargs="?", help="one 64-character intake id; all records when omitted")
    p.add_argument("--json", action="store_true")
    add_store_selector(p)
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser("resolve", help="accept the loss of one record as operator_resolved (agent stopped)")
    p.add_argument("id", help="64-character intake id")
    p.add_argument("reason", help="reason slug, e.g. provider-retired ([a-z0-9][a-z0-9-]{0,63})")
    p.add_argument("--json", action="store_true")
    add_store_selector(p)
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
    add_store_selector(
        p,
        across="alone, audit every store there, one line each, what was skipped there, and the totals; "
        "exit 1 if any store is unhealthy or anything was skipped",
    )
    p.set_defaults(func=cmd_health)

    p = sub.add_parser(
        "curate-audit",
        help="before the intent switches: pending capture, and the dated and closed notes they change",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_curate_audit)


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


def cmd_rebuild(args: argparse.Namespace) -> int:
    from tempomem.recall.index import RebuildShrinkError
    from tempomem.storage.fence import hold_fence
    from tempomem.storage.intake_records import RetainedPlanError

    store = store_from_args(args, must_exist=True)
    try:
        with hold_fence(store.root, what="rebuild"):  # CLI-12, AMB-02: maintenance with the agent stopped
            report = store.rebuild(force=args.force)
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
    if getattr(args, "stores", None) and not getattr(args, "store", None):
        return _inspect_stores(args)
    store = store_from_args(args, must_exist=True)
    intake = store.intake
    now = datetime.now(UTC)
    if not intake.base.exists():
        out: dict[str, object] = {"counts": dict.fromkeys(_COUNTS, 0), "records": []}
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
        return _figures(out)
    lines = [_figures(out["counts"])]
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


def _figures(counts: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in counts.items())


def _add_to(totals: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        totals[key] = totals.get(key, 0) + value


def _scan(args: argparse.Namespace, *, only: str | None = None) -> StoreScan:
    """The stores under ``--stores`` and what was skipped there; with ``only``, that one path alone
    (classified as the scan would, without reading the rest of the directory)."""
    from tempomem.fleet import SkippedStore, StoreScan, classify_store, scan_stores

    stores_dir = Path(args.stores)
    if not stores_dir.is_dir():
        raise MissingStoreError(f"no stores directory at {stores_dir}; nothing was created")
    if only is None:
        return scan_stores(stores_dir)
    check_store_name(stores_dir, only)
    root = stores_dir / only
    try:
        reason = classify_store(root)
    except FileNotFoundError:
        raise MissingStoreError(f"no store {only!r} under {stores_dir}") from None
    return StoreScan([root], []) if reason is None else StoreScan([], [SkippedStore(root, reason)])


def _inspect_stores(args: argparse.Namespace) -> int:
    """#16 item 4: the intake counts of every store under ``--stores`` and their totals; with an id,
    the store(s) holding that record. Content-free like ``inspect``: ids, states, counters."""
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import UnknownRecordError
    from tempomem.storage.intake_tidy import list_quarantined
    from tempomem.storage.store_ref import read_store_id

    found = _scan(args)
    now = datetime.now(UTC)
    if args.id:
        holders = []
        for root in found.stores:
            try:
                view = Intake(root).view(args.id, now=now).model_dump(mode="json")
            except UnknownRecordError:
                continue
            holders.append({"path": str(root), "store_id": read_store_id(root), **view})
        if not holders:
            raise UnknownRecordError(f"no store under {args.stores} holds intake record {args.id}")
        if args.json:
            print(json.dumps(holders, indent=2))
        else:
            for h in holders:
                print(
                    f"{Path(h['path']).name} [{h['store_id']}]  "
                    + _inspect_text({k: v for k, v in h.items() if k not in ("path", "store_id")})
                )
        return EXIT_OK
    rows: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    for root in found.stores:
        intake = Intake(root)
        row: dict[str, Any] = {"path": str(root), "store_id": read_store_id(root)}
        try:
            counts = intake.counts(now=now) if intake.base.exists() else dict.fromkeys(_COUNTS, 0)
            row |= {"counts": counts, "quarantined": len(list_quarantined(intake))}
        except (OSError, IntakeError) as exc:  # one unreadable store never hides the others
            row["problem"] = type(exc).__name__
        else:
            _add_to(totals, {**counts, "quarantined": row["quarantined"]})
        rows.append(row)
    skipped = [{"path": str(s.path), "reason": s.reason} for s in found.skipped]
    out = {"stores": rows, "skipped": skipped, "total": {"stores": len(rows), **totals}}
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    for row in rows:
        figures = (
            f"problem={row['problem']}"
            if "problem" in row
            else _figures({**row["counts"], "quarantined": row["quarantined"]})
        )
        print(f"{Path(row['path']).name} [{row['store_id']}]  {figures}")
    for s in skipped:
        print(f"{Path(s['path']).name}  skipped ({s['reason']})")
    print(f"total: {len(rows)} store(s), {len(skipped)} skipped  {_figures(totals)}")
    return EXIT_OK


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
    from tempomem.capture.adoption import adopt_replay
    from tempomem.storage.fence import hold_fence

    store = store_from_args(args, must_exist=True)
    with hold_fence(store.root, what="adopt-replay"):
        report = adopt_replay(store.root)
    text = f"{report.status}: {report.intents} intent(s), {report.entries} entries; now run tempomem rebuild"
    print(report.model_dump_json() if args.json else text)
    return EXIT_OK


def _store_health(root: Path) -> HealthReport:
    from tempomem.recall.index import MemoryIndex
    from tempomem.storage.health import audit

    unreadable: str | None = None
    try:
        sessions = MemoryIndex(root, None).provenance()  # PROV-14
    except Exception as exc:  # a busy or damaged index is reported, never fatal to the audit
        sessions, unreadable = None, f"index: {type(exc).__name__}"
    report = audit(root, now=datetime.now(UTC), index_sessions=sessions)
    if unreadable is not None:
        report = report.model_copy(update={"status": "degraded", "problems": [*report.problems, unreadable]})
    return report


def _healthy(report: HealthReport) -> bool:
    return report.status in ("ok", "in_progress")


def _print_report(report: HealthReport, indent: str = "") -> None:
    if report.index_backlog_days:
        print(f"{indent}  index: {report.index_backlog_days} day(s) await the group commit's flush")
    for problem in report.problems:
        print(f"{indent}  problem: {problem}")
    for mismatch in report.mismatches:
        print(f"{indent}  mismatch: {mismatch}")


def cmd_health(args: argparse.Namespace) -> int:
    """CLI-13: strict, content-free audit. Exit 0 for ok/in_progress, 1 otherwise."""
    if getattr(args, "stores", None):
        return _health_of_stores(args)
    report = _store_health(store_from_args(args, must_exist=True).root)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(f"{report.status}  {_figures(report.counts)}")
        _print_report(report)
    return EXIT_OK if _healthy(report) else EXIT_ERROR


def _health_of_stores(args: argparse.Namespace) -> int:
    """#16 item 4: the audit of every store under a directory, one line each, and the totals."""
    from tempomem.storage.store_ref import read_store_id

    found = _scan(args, only=args.store)
    stores, skipped = found.stores, found.skipped
    reports = [(root, read_store_id(root), _store_health(root)) for root in stores]
    totals: dict[str, int] = {}
    for _, _, report in reports:
        _add_to(totals, report.counts)
    unhealthy = sum(1 for _, _, r in reports if not _healthy(r))
    if args.json:
        print(
            json.dumps(
                {
                    "stores": [
                        {"path": str(root), "store_id": sid, **report.model_dump(mode="json")}
                        for root, sid, report in reports
                    ],
                    "skipped": [{"path": str(s.path), "reason": s.reason} for s in skipped],
                    "total": {"stores": len(reports), "unhealthy": unhealthy, "counts": totals},
                },
                indent=2,
            )
        )
    else:
        for root, sid, report in reports:
            print(f"{report.status:<12} {root.name} [{sid}]  {_figures(report.counts)}")
            _print_report(report, indent="  ")
        for s in skipped:
            print(f"{'skipped':<12} {s.path.name}  ({s.reason})")
        print(
            f"total: {len(reports)} store(s), {unhealthy} unhealthy, {len(skipped)} skipped  "
            f"{_figures(totals)}"
        )
    return EXIT_OK if unhealthy == 0 and not skipped else EXIT_ERROR


def cmd_curate_audit(args: argparse.Namespace) -> int:
    """CLI-16, INTENT-28: the private review to do before switching on ``intentExpiry`` or
    ``intentLifecycle``. Prints, for the operator alone, the capture still pending (drain it first) and
    the notes the switches treat differently: dated notes (a ``due=`` that expiry reads as an end) and
    closed ones (done/dropped). Read-only: nothing is marked, migrated or reinterpreted."""
    from tempomem.storage.markdown import iter_bullets

    store = store_from_args(args, must_exist=True)
    if store.config.memory.mode != "bujo":
        print(
            f"error: the intent switches are BuJo-only; mode is {store.config.memory.mode}", file=sys.stderr
        )
        return EXIT_ERROR
    pending = store.intake.counts(now=datetime.now(UTC))["pending"]
    dated, closed = [], []
    for day, b in iter_bullets(store.root, "daily"):
        if b.type not in ("note", "event"):
            continue
        row = {"day": day, "id": b.id, "type": b.type, "status": b.status, "due": b.due, "text": b.text}
        if b.due:
            dated.append(row)
        elif b.status in ("done", "dropped"):
            closed.append(row)
    if args.json:
        print(
            json.dumps({"pending": pending, "dated": dated, "closed": closed}, indent=2, ensure_ascii=False)
        )
        return EXIT_OK
    print(f"pending capture: {pending}" + (" (let the worker drain it before switching)" if pending else ""))
    for title, rows in (
        ("dated notes (due= becomes an end under intentExpiry)", dated),
        ("closed notes (left out of automatic recall under intentExpiry)", closed),
    ):
        print(f"{title}: {len(rows)}")
        for r in rows:
            due = f" due={r['due']}" if r["due"] else ""
            print(f"  {r['day']} {r['id']} [{r['status']}]{due} {r['text']}")
    return EXIT_OK
