"""Backfill, host side: the source formats, following a run's progress and its bar (``tempomem.starts``
starts the workflows).

``tempomem backfill FILE`` admits every completed turn of a JSONL file (one ``CompletedTurn`` JSON object
per line; schema in ``activities.backfill``) or a LoCoMo-style conversation JSON through the store's
intake, in a ``BackfillWorkflow`` run by the store's worker, and shows a progress bar fed by the
workflow's content-free ``progress`` query. Re-running the same file admits nothing twice. Interrupting
the command does not stop the backfill: it is durable, and running the command again re-attaches.

``tempomem consolidate`` regenerates ``index.md`` once (through the worker when one is polling, else in
process), or with ``--schedule`` keeps a Temporal Schedule that does it periodically.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

    from tempomem.follow import TurnBar
    from tempomem.messages.backfill import BackfillProgress

__all__ = ["detect_format", "follow_backfill"]


# The CLI imports this module to build its parser: keep Temporal and the activities out of that path.
FORMATS = ("jsonl", "locomo-turns", "locomo-pairs")  # == workflows.backfill.SOURCE_FORMATS


def detect_format(path: Path, requested: str = "auto") -> str:
    """``auto``: ``.jsonl``/``.ndjson`` → jsonl; ``.json`` or a file starting with ``[`` → locomo-turns."""
    if requested != "auto":
        if requested not in FORMATS:
            raise ValueError(f"unknown format {requested!r}; one of auto, {', '.join(FORMATS)}")
        return requested
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        return "locomo-turns"
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    return "locomo-turns" if head.startswith(b"[") else "jsonl"


# Captures in flight: a Lite or Journal capture is one short workflow, so a backfill's throughput keeps
# rising up to about 32 on a 2-core machine (issue #15 item 2, docs/benchmarks.md).
BACKFILL_WINDOW_DEFAULT = 32


async def follow_backfill(
    client: Client,
    workflow_id: str,
    *,
    on_progress: Callable[[BackfillProgress], None] | None = None,
    poll_interval: float = 0.5,
) -> BackfillProgress:
    """Poll the ``progress`` query (across continue-as-new runs) until the backfill ends; its result."""
    from tempomem.follow import follow_workflow
    from tempomem.messages.backfill import PROGRESS_QUERY, BackfillProgress

    return await follow_workflow(
        client,
        workflow_id,
        query=PROGRESS_QUERY,
        result_type=BackfillProgress,
        on_progress=on_progress,
        poll_interval=poll_interval,
    )


# -- progress display -------------------------------------------------------------------------------------


def summary_line(p: BackfillProgress) -> str:
    return (
        f"admitted {p.admitted} · duplicates {p.duplicates} · skipped {p.skipped} · bad lines {p.bad_lines}"
        f" · captured {p.completed} ({p.resolved} resolved, {p.dead} dead)"
        f" · runs {p.continue_as_new_runs + 1}"
    )


class ProgressBar:
    """tqdm when it is installed, else a plain text bar; fed ``BackfillProgress`` snapshots."""

    WIDTH = 30

    def __init__(self, stream: IO[str] | None = None, *, use_tqdm: bool = True) -> None:
        self.stream = stream or sys.stderr
        self._tqdm: TurnBar | None = None
        self._last = ""
        if use_tqdm:
            from tempomem.follow import TurnBar

            with contextlib.suppress(ImportError):  # no tqdm: the plain text bar below
                self._tqdm = TurnBar(total=None, stream=self.stream)

    def update(self, p: BackfillProgress) -> None:
        if self._tqdm is not None:
            self._tqdm.show(
                p.settled,
                p.total,
                f"admitted={p.admitted} dup={p.duplicates} bad={p.bad_lines} inflight={p.in_flight}",
            )
            return
        text = self.render(p)
        if text == self._last:
            return
        self._last = text
        if self.stream.isatty():
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    @classmethod
    def render(cls, p: BackfillProgress) -> str:
        total = max(p.total, p.settled, 1)
        filled = round(cls.WIDTH * p.settled / total) if p.total else 0
        bar = "#" * filled + "-" * (cls.WIDTH - filled)
        shown = str(p.total) if p.total else "?"
        return (
            f"[{bar}] {p.settled}/{shown}  admitted {p.admitted}  dup {p.duplicates}  "
            f"bad {p.bad_lines}  in flight {p.in_flight}"
        )

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
        elif self._last and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


# -- CLI --------------------------------------------------------------------------------------------------


def jsonl_line(turn: Any) -> str:
    """One ``CompletedTurn`` as a backfill JSONL line (the documented schema)."""
    return turn.model_dump_json()


def write_jsonl(path: Path, turns: Sequence[Any]) -> str:
    """Write turns as a backfill JSONL file; return its sha256."""
    data = "".join(jsonl_line(t) + "\n" for t in turns).encode("utf-8")
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()
