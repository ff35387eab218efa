"""Which turn of a store commits next: model stages run in parallel, commits follow admission order.

A turn is *in flight* while it is pending, has begun an attempt and is not waiting out a backoff: its
workflow is running it now. A turn may reconcile and commit only when no turn admitted before it (by
admission instant, then id) is in flight, so a later statement is always reconciled against the earlier
ones it may supersede (issue #15 item 1). A turn that has not begun an attempt, waits in backoff or is
dead holds nobody back: it commits when it runs again, after the turns that went ahead. Reads only ids,
instants and counters; never text.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime

from tempomem.storage.instants import parse_instant
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import IntakeError, RecordState


class CommitOrder:
    """The commit order of one store's intake. Admission instants are immutable, so they are cached."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self._admitted: dict[str, tuple[datetime, str]] = {}
        # The serial queue and the model stages (which tell the workflow whether a turn is ahead) ask
        # from different threads at once.
        self._lock = threading.Lock()

    def _key(self, record_id: str) -> tuple[datetime, str] | None:
        with self._lock:
            key = self._admitted.get(record_id)
        if key is None:
            try:
                key = (parse_instant(self.intake.load_payload(record_id).admitted_at), record_id)
            except IntakeError:  # resolved meanwhile, or unreadable: it orders nothing
                return None
            with self._lock:
                self._admitted[record_id] = key
        return key

    def in_flight(self, record_id: str, *, now: datetime) -> bool:
        """Pending, begun, not in backoff, and its commit not yet written (a committed turn that has not
        resolved yet holds nobody back: what it wrote is already visible)."""
        try:
            proc = self.intake.pending_state(record_id)
            if proc is None or proc.attempts < 1 or (proc.due_at and parse_instant(proc.due_at) > now):
                return False
            if not proc.retained_plan:
                return True
            committed = self._committed(record_id)
            if committed is None:
                # The plan went after its state was read: a resolve is retiring the record (its receipt
                # is written before state and plan go). Asked again, it is no longer pending. Read as in
                # flight, it would hold the next turn back with nobody left to wake it (30 s lost).
                return self.intake.pending_state(record_id) is not None
            return not committed
        except IntakeError:
            return False

    def _committed(self, record_id: str) -> bool | None:
        """Whether the turn's plan says it committed; None when there is no plan (any more)."""
        data = self.intake.load_plan(record_id)
        if data is None:
            return None
        try:
            return json.loads(data).get("committed") is True
        except (ValueError, AttributeError):
            return False  # a plan that cannot be read is the capture's to report; here: still in flight

    def _pending_in_order(self) -> list[tuple[tuple[datetime, str], str]]:
        pending = set(self.intake.list_ids(RecordState.PENDING))
        with self._lock:
            for gone in set(self._admitted) - pending:  # resolved or dead: keep the cache small
                del self._admitted[gone]
        keyed = [(key, rid) for rid in pending if (key := self._key(rid)) is not None]
        return sorted(keyed)

    def blocking(self, record_id: str, *, now: datetime) -> str | None:
        """The earliest turn admitted before ``record_id`` that is in flight, or None: its turn to commit."""
        mine = self._key(record_id)
        if mine is None:
            return None
        for key, other in self._pending_in_order():
            if key >= mine:
                return None
            if self.in_flight(other, now=now):
                return other
        return None

    def next_waiting(self, record_id: str, *, now: datetime) -> str | None:
        """The turn to wake when ``record_id`` stops being in flight (its commit written, or its attempt
        over): the earliest in-flight turn admitted after it, when it holds a plan (only then can it be
        waiting to commit). Ask before a resolve: its admission instant leaves with its payload."""
        mine = self._key(record_id)
        if mine is None:
            return None
        for key, other in self._pending_in_order():
            if key <= mine:
                continue
            if self.in_flight(other, now=now):
                try:
                    proc = self.intake.pending_state(other)
                except IntakeError:
                    return None
                return other if proc is not None and proc.retained_plan else None
        return None
