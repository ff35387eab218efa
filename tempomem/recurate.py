"""``tempomem recurate``, host side: check the request and print the result (``tempomem.starts`` starts
``RecurateWorkflow``).

Re-curation re-runs extraction → review → reconciliation over archived capture turns (issue #6 item 2)
with the current config and, optionally, another model name. A real run supersedes changed facts and
keeps history; ``--dry-run`` changes nothing canonical and prints the unified diff of the Markdown that a
real run would write. The CLI imports this module to build its parser: Temporal loads only when it runs.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tempomem.messages.recurate import RecurateProgress
    from tempomem.store import MemoryStore

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # == activities.recurate.RUN_ID
# Archived turns re-admitted per activity, and captures in flight (issue #15 item 1).
RECURATE_BATCH_DEFAULT = 16
RECURATE_WINDOW_DEFAULT = 8
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
