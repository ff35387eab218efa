"""Batch work as workflows: ``backfill``, ``consolidate``, ``recurate``. The commands live beside the
host side they drive (``tempomem.backfill``, ``tempomem.recurate``), which import light: Temporal loads
when a command runs."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
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
