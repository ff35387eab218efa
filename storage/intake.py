"""The durable intake record: the source of truth of every admitted turn (INTAKE-*, AMB-29).

Layout under the memory root::

    .capture-intake/            0700
      pending/<id>              immutable admitted payload, canonical JSON, 0600
      pending/<id>.state.json   mutable processing state (attempts, due time, failure category)
      dead/<id>, dead/<id>.state.json
      resolved/<id>.receipt.json  content-free receipt: id, payload hash, outcome, instants
      .lock                     admission/transition lock (flock)

``<id>`` is sha256(run id) as 64 lowercase hex characters (INTAKE-02). The payload hash covers the
immutable admitted fields only, so processing never changes a record's identity (AMB-29).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from tempomem.storage.fsio import (
    UnsafePathError,
    atomic_write,
    ensure_private_dir,
    exclusive_lock,
    fsync_dir,
    read_private_file,
)
from tempomem.storage.instants import format_instant, parse_instant
from tempomem.storage.intake_records import (
    FailureCategory,
    IntakeCapacityError,
    IntakeConflictError,
    IntakeCorruptError,
    IntakeError,
    IntakeIntegrityError,
    IntakePayload,
    ProcessingState,
    Receipt,
    RecordState,
    RecordView,
    RetainedPlanError,
    UnknownRecordError,
    canonical_json,
    check_record_id,
    is_record_name,
)
from tempomem.storage.ledger import Ledger, LedgerIntegrityError
from tempomem.storage.limits import (
    MAX_ACTIVE_RECORDS,
    MAX_RECORD_BYTES,
    MAX_RESOLVED_RECEIPTS,
)
from tempomem.storage.store_ref import store_id
from tempomem.storage.turn_archive import TURN_ARCHIVE_DAYS_DEFAULT, TurnArchive

INTAKE_DIR = ".capture-intake"
IMPORTED_NAME = "imported-commitments.json"


REASON_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")  # AMB-02


class Intake:
    """The intake folder of one memory root. Every public method is crash-safe on its own."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.base = self.root / INTAKE_DIR
        self.pending_dir = self.base / "pending"
        self.dead_dir = self.base / "dead"
        self.resolved_dir = self.base / "resolved"
        # Called after every durable transition (a SnapshotPublisher sets it); it must never raise into one.
        self.on_transition: Callable[[], None] | None = None
        # memory.capture.turnArchiveDays: how long resolved capture turns stay re-curatable (0 = never).
        self.archive_days = TURN_ARCHIVE_DAYS_DEFAULT
        # Records this instance resolved as curated (a worker's figures; #16 item 4). Not persisted.
        self.curated = 0

    def _transitioned(self) -> None:
        if self.on_transition is not None:
            try:
                self.on_transition()
            except Exception:  # INTAKE-32: notification failures never roll back a transition
                logging.getLogger("tempomem.intake").warning("transition notification failed")

    # -- layout -------------------------------------------------------------------------------------
    def ensure_layout(self) -> None:
        try:
            if not self.base.exists():
                # A new store is named before its first record, so it never looks like one from before
                # ids were written (storage.store_ref).
                store_id(self.root)
            ensure_private_dir(self.root)
            for folder in (self.base, self.pending_dir, self.dead_dir, self.resolved_dir):
                ensure_private_dir(folder, strict=True)
        except UnsafePathError as exc:
            raise IntakeCorruptError(str(exc)) from exc

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.root, self.base)

    def has_receipt(self, record_id: str, payload_sha256: str) -> bool:
        """INTAKE-26: an exact materialised receipt — a record or resolved receipt with that payload hash,
        or a commitment an import wrote down before appending it (``add_imported``)."""
        try:
            if self._existing_digest(record_id) == payload_sha256:
                return True
        except IntakeError:
            return False
        return (record_id, payload_sha256) in self.imported()

    @property
    def imported_path(self) -> Path:
        return self.base / IMPORTED_NAME

    def imported(self) -> set[tuple[str, str]]:
        """Commitments merged in from an export archive (content-free: ids and payload hashes)."""
        if not os.path.lexists(self.imported_path):
            return set()
        try:
            pairs = json.loads(self._read(self.imported_path))
            return {(str(a), str(b)) for a, b in pairs}
        except (ValueError, TypeError):
            raise IntakeCorruptError(f"{IMPORTED_NAME} is malformed") from None

    def add_imported(self, pairs: list[tuple[str, str]]) -> None:
        """Write imported commitments down (fsynced) before they are appended to the ledger, so a kill
        between a shard append and its catalog commit leaves an entry the intake vouches for (the
        admission rule: the record first, then the ledger). Caller holds the intake lock."""
        merged = sorted(self.imported() | set(pairs))
        atomic_write(self.imported_path, json.dumps(merged, separators=(",", ":")).encode("ascii"))

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        self.ensure_layout()
        return exclusive_lock(self.base / ".lock")

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The intake lock every writer holds (for repair code outside this module)."""
        return self._lock()

    # -- admission ----------------------------------------------------------------------------------
    def admit(self, payload: IntakePayload) -> Literal["admitted", "duplicate"]:
        """Write the pending record durably (INTAKE-01), or recognise a duplicate (INTAKE-03).

        Raises IntakeConflictError when the id exists with other bytes (INTAKE-04) and
        IntakeCapacityError when 4,096 records are active (AMB-11). Neither changes anything on disk.
        """
        data = canonical_json(payload.model_dump())
        if len(data) > MAX_RECORD_BYTES:
            raise IntakeError(f"record is {len(data)} bytes, more than {MAX_RECORD_BYTES}")
        digest = hashlib.sha256(data).hexdigest()
        record_id = check_record_id(payload.id)
        with self._lock():
            try:
                outcome = self._admit_locked(record_id, data, digest)
            except LedgerIntegrityError as exc:
                raise IntakeIntegrityError(str(exc)) from exc
        if outcome == "admitted":
            self._transitioned()
        return outcome

    def _admit_locked(self, record_id: str, data: bytes, digest: str) -> Literal["admitted", "duplicate"]:
        ledger = self.ledger
        existing = self._existing_digest(record_id)
        # INTAKE-28: the ledger, not the (prunable) receipts, is the permanent duplicate check.
        committed = ledger.lookup(record_id, self.has_receipt)
        for known in (existing, committed):
            if known is not None and known != digest:
                raise IntakeConflictError(
                    f"run id of intake record {record_id} was admitted before with different payload bytes"
                )
        if existing is not None or committed is not None:
            if committed is None:
                # A crash after the record write and before its ledger append: finish the commitment.
                ledger.append(record_id, digest, self.has_receipt)
            return "duplicate"
        if self._at_capacity():
            raise IntakeCapacityError(f"{MAX_ACTIVE_RECORDS} active intake records; admission refused")
        # Record first, then the ledger: a crash in between leaves a pending record that will be
        # processed, never a ledger entry for a turn that was lost.
        atomic_write(self.pending_dir / record_id, data)
        self.after_record_write()
        ledger.append(record_id, digest, self.has_receipt, looked_up=True)  # absent a moment ago, same lock
        return "admitted"

    def after_record_write(self) -> None:
        """Seam for crash tests: a SIGKILL here leaves a record without its ledger entry."""

    def _existing_digest(self, record_id: str) -> str | None:
        for folder in (self.pending_dir, self.dead_dir):
            path = folder / record_id
            if path.exists() or path.is_symlink():
                return hashlib.sha256(self._read(path)).hexdigest()
        receipt = self.resolved_dir / f"{record_id}.receipt.json"
        if receipt.exists() or receipt.is_symlink():
            return self._load_receipt(record_id).payload_sha256
        return None

    def _at_capacity(self) -> bool:
        listings = [os.listdir(d) for d in (self.pending_dir, self.dead_dir)]
        # Raw entries bound the record count from above; filter names only when it could matter.
        if sum(len(names) for names in listings) < MAX_ACTIVE_RECORDS:
            return False
        return sum(1 for names in listings for n in names if is_record_name(n)) >= MAX_ACTIVE_RECORDS

    def _read(self, path: Path) -> bytes:
        try:
            return read_private_file(path, max_bytes=MAX_RECORD_BYTES, strict=True)
        except UnsafePathError as exc:
            raise IntakeCorruptError(str(exc)) from exc

    # -- reading ------------------------------------------------------------------------------------
    def _locate(self, record_id: str) -> RecordState:
        check_record_id(record_id)
        # A receipt wins: a payload beside it is a resolve that was killed before its unlinks (``tidy``
        # removes it); it must never be curated again.
        if (self.resolved_dir / f"{record_id}.receipt.json").exists():
            return RecordState.RESOLVED
        if (self.pending_dir / record_id).exists():
            return RecordState.PENDING
        if (self.dead_dir / record_id).exists():
            return RecordState.DEAD
        raise UnknownRecordError(f"no intake record {record_id}")

    def load_payload(self, record_id: str) -> IntakePayload:
        """The admitted payload of a pending or dead record (activities read text from here, not Temporal)."""
        state = self._locate(record_id)
        if state is RecordState.RESOLVED:
            raise UnknownRecordError(f"intake record {record_id} is resolved; its payload is retired")
        folder = self.pending_dir if state is RecordState.PENDING else self.dead_dir
        try:
            return IntakePayload.model_validate_json(self._read(folder / record_id))
        except ValidationError:  # never chain it: pydantic's message quotes the record's bytes
            raise IntakeCorruptError(f"intake record {record_id} is malformed") from None

    def _state_path(self, folder: Path, record_id: str) -> Path:
        return folder / f"{record_id}.state.json"

    def _load_state(self, folder: Path, record_id: str) -> ProcessingState:
        path = self._state_path(folder, record_id)
        if not path.exists() and not path.is_symlink():
            # A crash between payload and state writes leaves no state: that is a fresh record.
            state = RecordState.PENDING if folder == self.pending_dir else RecordState.DEAD
            return ProcessingState(state=state)
        try:
            return ProcessingState.model_validate_json(self._read(path))
        except ValidationError:
            raise IntakeCorruptError(f"state of intake record {record_id} is malformed") from None

    def pending_state(self, record_id: str) -> ProcessingState | None:
        """The processing state of a pending record, or None once it is no longer pending."""
        if self._locate(record_id) is not RecordState.PENDING:
            return None
        return self._load_state(self.pending_dir, record_id)

    def receipt(self, record_id: str) -> Receipt:
        """The content-free receipt of a resolved record."""
        return self._load_receipt(check_record_id(record_id))

    def _load_receipt(self, record_id: str) -> Receipt:
        try:
            return Receipt.model_validate_json(self._read(self.resolved_dir / f"{record_id}.receipt.json"))
        except ValidationError:
            raise IntakeCorruptError(f"receipt of intake record {record_id} is malformed") from None

    def view(self, record_id: str, *, now: datetime) -> RecordView:
        state = self._locate(record_id)
        if state is RecordState.RESOLVED:
            receipt = self._load_receipt(record_id)
            return RecordView(
                id=record_id,
                state=state,
                admitted_at=receipt.admitted_at,
                attempts=receipt.attempts,
                revision=0,
                due_at=None,
                due=False,
                failure_category=None,
                write_mode="",
                tier="",
            )
        folder = self.pending_dir if state is RecordState.PENDING else self.dead_dir
        payload = self.load_payload(record_id)
        proc = self._load_state(folder, record_id)
        due = state is RecordState.PENDING and (proc.due_at is None or parse_instant(proc.due_at) <= now)
        return RecordView(
            id=record_id,
            state=state,
            admitted_at=payload.admitted_at,
            attempts=proc.attempts,
            revision=proc.revision,
            due_at=proc.due_at,
            due=due,
            failure_category=proc.failure_category,
            write_mode=payload.write_mode,
            tier=payload.tier,
        )

    def list_ids(self, state: RecordState) -> list[str]:
        """Ids in one state; a store that never admitted anything simply has none."""
        folder = {
            RecordState.PENDING: self.pending_dir,
            RecordState.DEAD: self.dead_dir,
            RecordState.RESOLVED: self.resolved_dir,
        }[state]
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        ids = sorted(n for n in (name.removesuffix(".receipt.json") for name in names) if is_record_name(n))
        if state is RecordState.RESOLVED:
            return ids
        # a payload left beside its receipt by a killed resolve is resolved, not active
        return [i for i in ids if not os.path.lexists(self.resolved_dir / f"{i}.receipt.json")]

    def due_pending(self, *, now: datetime) -> list[str]:
        """Pending ids whose due time has come, oldest admission first (what the sweeper starts).

        A record that cannot be read is left out (its workflow's first attempt quarantines it), so one
        corrupt file never stops the others.
        """
        due = []
        for record_id in self.list_ids(RecordState.PENDING):
            try:
                view = self.view(record_id, now=now)
            except (IntakeCorruptError, UnknownRecordError):
                continue
            if view.due:
                due.append(view)
        return [v.id for v in sorted(due, key=lambda v: (v.admitted_at, v.id))]

    def counts(self, *, now: datetime) -> dict[str, int]:
        """INTAKE-30: content-free aggregate counts."""
        pending = self.list_ids(RecordState.PENDING)
        return {
            "pending": len(pending),
            "due": len(self.due_pending(now=now)),
            "dead": len(self.list_ids(RecordState.DEAD)),
            "resolved": len(self.list_ids(RecordState.RESOLVED)),
        }

    # -- transitions --------------------------------------------------------------------------------
    def begin_attempt(self, record_id: str, *, now: datetime) -> ProcessingState:
        """Persist attempts+1 before a try (INTAKE-13: the budget lives in the record)."""
        with self._lock():
            if self._locate(record_id) is not RecordState.PENDING:
                raise UnknownRecordError(f"intake record {record_id} is not pending")
            proc = self._load_state(self.pending_dir, record_id)
            proc = proc.model_copy(
                update={
                    "attempts": proc.attempts + 1,
                    "revision": proc.revision + 1,
                    "due_at": None,
                    "updated_at": format_instant(now),
                }
            )
            self._write_state(self.pending_dir, record_id, proc)
        self._transitioned()
        return proc

    def record_failure(
        self, record_id: str, category: FailureCategory, *, retry_in: timedelta, now: datetime
    ) -> ProcessingState:
        """The attempt failed: keep the record pending, due again after ``retry_in``."""
        with self._lock():
            proc = self._load_state(self.pending_dir, record_id)
            proc = proc.model_copy(
                update={
                    "failure_category": category,
                    "revision": proc.revision + 1,
                    "due_at": format_instant(now + retry_in),
                    "updated_at": format_instant(now),
                }
            )
            self._write_state(self.pending_dir, record_id, proc)
        self._transitioned()
        return proc

    def dead_letter(self, record_id: str, category: FailureCategory, *, now: datetime) -> None:
        """Budget exhausted (INTAKE-13): move payload and state to dead/, durably."""
        with self._lock():
            if self._locate(record_id) is not RecordState.PENDING:
                return
            proc = self._load_state(self.pending_dir, record_id)
            proc = proc.model_copy(
                update={
                    "state": RecordState.DEAD,
                    "failure_category": category,
                    "revision": proc.revision + 1,
                    "updated_at": format_instant(now),
                }
            )
            self._write_state(self.dead_dir, record_id, proc)
            if os.path.lexists(self._plan_path(self.pending_dir, record_id)):
                # The retained plan dies with the record and comes back with ``retry`` (CAP-75).
                os.replace(
                    self._plan_path(self.pending_dir, record_id), self._plan_path(self.dead_dir, record_id)
                )
            os.replace(self.pending_dir / record_id, self.dead_dir / record_id)
            fsync_dir(self.dead_dir)
            _unlink_quiet(self._state_path(self.pending_dir, record_id))
            fsync_dir(self.pending_dir)
        self._transitioned()

    def resolve(
        self,
        record_id: str,
        *,
        outcome: Literal["success", "operator_resolved"],
        now: datetime,
        reason: str | None = None,
    ) -> Receipt:
        """Retire the record: receipt first, then remove the payload, so a crash in between is harmless."""
        with self._lock():
            state = self._locate(record_id)
            if state is RecordState.RESOLVED:
                return self._load_receipt(record_id)
            folder = self.pending_dir if state is RecordState.PENDING else self.dead_dir
            data = self._read(folder / record_id)
            try:
                payload = IntakePayload.model_validate_json(data)
            except ValidationError:
                raise IntakeCorruptError(f"intake record {record_id} is malformed") from None
            proc = self._load_state(folder, record_id)
            if outcome == "success":
                # Before the payload goes: a crash after this write re-archives the same bytes (a no-op).
                self._archive(record_id, payload, data, now=now)
            receipt = Receipt(
                id=record_id,
                payload_sha256=hashlib.sha256(data).hexdigest(),
                outcome=outcome,
                admitted_at=payload.admitted_at,
                resolved_at=format_instant(now),
                attempts=proc.attempts,
                reason=reason,
            )
            atomic_write(
                self.resolved_dir / f"{record_id}.receipt.json", canonical_json(receipt.model_dump())
            )
            # The payload is the record: it goes first, so a kill after this point leaves at most a
            # stale state or plan file (removed by ``tidy``), never a record that looks fresh again.
            _unlink_quiet(folder / record_id)
            fsync_dir(folder)
            _unlink_quiet(self._state_path(folder, record_id))
            _unlink_quiet(self._plan_path(folder, record_id))
            fsync_dir(folder)
            self._prune_receipts()
            if outcome == "success":
                self.curated += 1
        self._transitioned()
        return receipt

    def _archive(self, record_id: str, payload: IntakePayload, data: bytes, *, now: datetime) -> None:
        """Keep a successfully curated capture turn for ``tempomem recurate`` (issue #6 item 2).

        Only writeMode "capture" records: Lite/Journal projections are deterministic and already hold
        the observation in daily/. Re-curation records are not archived again: their original is.
        Operator resolution and dead letters never reach here. Retention is applied on the way.
        """
        archive = TurnArchive(self.root)
        archive.prune(keep_days=self.archive_days, now=now)
        if payload.write_mode != "capture" or payload.recurate_of is not None:
            return
        if archive.within_retention(payload.admitted_at, keep_days=self.archive_days, now=now):
            archive.store(record_id, payload.admitted_at, data)

    def retry(self, record_id: str, *, now: datetime) -> bool:
        """CLI-04: make dead or delayed work due again, with a fresh attempt budget. False = no-op."""
        with self._lock():
            state = self._locate(record_id)
            if state is RecordState.RESOLVED:
                return False
            folder = self.pending_dir if state is RecordState.PENDING else self.dead_dir
            proc = self._load_state(folder, record_id)
            delayed = proc.due_at is not None and parse_instant(proc.due_at) > now
            if state is RecordState.PENDING and not delayed:
                return False
            proc = proc.model_copy(
                update={
                    "state": RecordState.PENDING,
                    "attempts": 0 if state is RecordState.DEAD else proc.attempts,
                    "due_at": None,
                    "revision": proc.revision + 1,
                    "updated_at": format_instant(now),
                }
            )
            self._write_state(self.pending_dir, record_id, proc)
            if state is RecordState.DEAD:
                if os.path.lexists(self._plan_path(self.dead_dir, record_id)):
                    os.replace(
                        self._plan_path(self.dead_dir, record_id),
                        self._plan_path(self.pending_dir, record_id),
                    )
                os.replace(self.dead_dir / record_id, self.pending_dir / record_id)
                fsync_dir(self.pending_dir)
                _unlink_quiet(self._state_path(self.dead_dir, record_id))
                fsync_dir(self.dead_dir)
        self._transitioned()
        return True

    def operator_resolve(self, record_id: str, reason: str, *, now: datetime) -> bool:
        """CLI-05: accept the loss as ``operator_resolved``. False when already resolved (no-op)."""
        if not REASON_SLUG.fullmatch(reason):
            raise IntakeError(f"reason slug must match {REASON_SLUG.pattern}")
        state = self._locate(record_id)
        if state is RecordState.RESOLVED:
            return False
        folder = self.pending_dir if state is RecordState.PENDING else self.dead_dir
        if self._load_state(folder, record_id).retained_plan:
            raise RetainedPlanError(
                f"intake record {record_id} holds a recoverable retained plan; retry it instead of resolving"
            )
        self.resolve(record_id, outcome="operator_resolved", now=now, reason=reason)
        return True

    def _prune_receipts(self) -> int:
        """INTAKE-21: keep at most 4,096 receipts, oldest resolved first out. The ledger keeps protection."""
        names = [n for n in os.listdir(self.resolved_dir) if n.endswith(".receipt.json")]
        excess = len(names) - MAX_RESOLVED_RECEIPTS
        if excess <= 0:
            return 0
        # Receipts are written once, atomically: their mtime is the resolution instant.
        by_age = sorted(names, key=lambda n: (os.lstat(self.resolved_dir / n).st_mtime_ns, n))
        for name in by_age[:excess]:
            _unlink_quiet(self.resolved_dir / name)
        fsync_dir(self.resolved_dir)
        return excess

    # -- retained capture plan (CAP-75) ------------------------------------------------------------
    def retained_plan_ids(self) -> list[str]:
        """Active records (pending or dead) whose state keeps a BuJo capture plan (INTAKE-35)."""
        out = []
        for state, folder in ((RecordState.PENDING, self.pending_dir), (RecordState.DEAD, self.dead_dir)):
            out += [i for i in self.list_ids(state) if self._load_state(folder, i).retained_plan]
        return out

    def _plan_path(self, folder: Path, record_id: str) -> Path:
        return folder / f"{record_id}.plan.json"

    def save_plan(self, record_id: str, data: bytes, *, now: datetime) -> None:
        """Keep the validated capture plan with the pending record: a retry never calls the model for it."""
        if len(data) > MAX_RECORD_BYTES:
            raise IntakeError(f"capture plan is {len(data)} bytes, more than {MAX_RECORD_BYTES}")
        with self._lock():
            if self._locate(record_id) is not RecordState.PENDING:
                raise UnknownRecordError(f"intake record {record_id} is not pending")
            atomic_write(self._plan_path(self.pending_dir, record_id), data)
            proc = self._load_state(self.pending_dir, record_id)
            if not proc.retained_plan:
                proc = proc.model_copy(
                    update={
                        "retained_plan": True,
                        "revision": proc.revision + 1,
                        "updated_at": format_instant(now),
                    }
                )
                self._write_state(self.pending_dir, record_id, proc)

    def load_plan(self, record_id: str) -> bytes | None:
        path = self._plan_path(self.pending_dir, record_id)
        if not os.path.lexists(path):
            return None
        return self._read(path)

    def _write_state(self, folder: Path, record_id: str, proc: ProcessingState) -> None:
        atomic_write(self._state_path(folder, record_id), canonical_json(proc.model_dump(mode="json")))


def _unlink_quiet(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
