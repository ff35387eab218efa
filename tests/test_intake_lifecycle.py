"""Every intake transition, state by state, as bytes on disk (INTAKE-13, INTAKE-18..INTAKE-21, CLI-04,
CLI-05, CAP-75): attempt bookkeeping, failure and its due time, dead-lettering with the retained plan,
retry, resolve with its receipt and archive, operator resolution, due order, receipt pruning, imported
commitments. Temporal-free, so a wrong field, file or order fails here in milliseconds (issue #13's
mutation goal); the workflows that drive these transitions are tested against the dev server elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from tempomem.storage import intake as intake_mod
from tempomem.storage.admission import admit_turn
from tempomem.storage.instants import format_instant, parse_instant
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import (
    FailureCategory,
    IntakeCorruptError,
    IntakeError,
    RecordState,
    RetainedPlanError,
    UnknownRecordError,
    intake_id,
)
from tempomem.storage.turn import CompletedTurn
from tempomem.storage.turn_archive import TurnArchive

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def admit(intake: Intake, run_id: str, *, minutes: int = 0, write_mode: str = "capture") -> str:
    turn = CompletedTurn(
        run_id=run_id,
        conversation_id="web:c1",
        speaker_kind="human-turn",
        user_text=f"question {run_id}",
        final_answer=f"answer {run_id}",
        admitted_at=T0 + timedelta(minutes=minutes),
    )
    tier = "bujo" if write_mode == "capture" else "lite"
    result = admit_turn(
        intake, turn, tier=tier, write_mode=write_mode, capture_cron=None, capture_webhook=None
    )
    assert result.intake_id == intake_id(run_id)
    return result.intake_id


def state_file(folder: Path, record: str) -> dict:
    return json.loads((folder / f"{record}.state.json").read_bytes())


def names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture
def intake(tmp_path: Path) -> Intake:
    return Intake(tmp_path / "mem")


def test_begin_attempt_counts_in_the_record(intake: Intake) -> None:
    record = admit(intake, "r1")
    proc = intake.begin_attempt(record, now=T0)
    assert (proc.attempts, proc.revision, proc.due_at, proc.updated_at) == (
        1,
        1,
        None,
        "2026-12-01T09:00:00.000Z",
    )
    proc = intake.begin_attempt(record, now=T0 + timedelta(seconds=1.5))
    assert (proc.attempts, proc.revision) == (2, 2)
    on_disk = state_file(intake.pending_dir, record)
    assert on_disk == {
        "attempts": 2,
        "due_at": None,
        "failure_category": None,
        "retained_plan": False,
        "revision": 2,
        "state": "pending",
        "updated_at": "2026-12-01T09:00:01.500Z",
    }
    view = intake.view(record, now=T0)
    assert (view.state, view.attempts, view.revision, view.due) == (RecordState.PENDING, 2, 2, True)
    assert (view.write_mode, view.tier, view.admitted_at) == ("capture", "bujo", "2026-12-01T09:00:00.000Z")


def test_a_failure_makes_the_record_due_later(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.begin_attempt(record, now=T0)
    proc = intake.record_failure(record, FailureCategory.LLM_TIMEOUT, retry_in=timedelta(seconds=30), now=T0)
    assert (proc.failure_category, proc.revision, proc.due_at, proc.attempts) == (
        FailureCategory.LLM_TIMEOUT,
        2,
        "2026-12-01T09:00:30.000Z",
        1,
    )
    assert state_file(intake.pending_dir, record)["due_at"] == "2026-12-01T09:00:30.000Z"
    assert intake.view(record, now=T0 + timedelta(seconds=29)).due is False
    assert intake.view(record, now=T0 + timedelta(seconds=30)).due is True  # due at the instant itself
    assert intake.due_pending(now=T0 + timedelta(seconds=29)) == []
    assert intake.due_pending(now=T0 + timedelta(seconds=30)) == [record]
    assert intake.counts(now=T0) == {"pending": 1, "due": 0, "dead": 0, "resolved": 0}
    # The next attempt clears the due time again.
    assert intake.begin_attempt(record, now=T0 + timedelta(minutes=1)).due_at is None


def test_due_pending_is_oldest_admission_first_and_skips_a_corrupt_record(intake: Intake) -> None:
    late, early, middle = (
        admit(intake, "a", minutes=9),
        admit(intake, "b", minutes=1),
        admit(intake, "c", minutes=5),
    )
    assert intake.due_pending(now=T0 + timedelta(hours=1)) == [early, middle, late]
    (intake.pending_dir / f"{middle}.state.json").write_bytes(b"{not json")
    assert intake.due_pending(now=T0 + timedelta(hours=1)) == [early, late]


def test_dead_letter_moves_record_state_and_plan_and_keeps_the_category(intake: Intake) -> None:
    record, other = admit(intake, "r1"), admit(intake, "r2")
    intake.begin_attempt(record, now=T0)
    intake.save_plan(record, b'{"plan":1}', now=T0)
    intake.dead_letter(record, FailureCategory.INVALID_OUTPUT, now=T0 + timedelta(minutes=3))
    assert names(intake.dead_dir) == sorted([record, f"{record}.plan.json", f"{record}.state.json"])
    assert record not in "".join(names(intake.pending_dir))
    assert state_file(intake.dead_dir, record) == {
        "attempts": 1,
        "due_at": None,
        "failure_category": "invalid_output",
        "retained_plan": True,
        "revision": 3,
        "state": "dead",
        "updated_at": "2026-12-01T09:03:00.000Z",
    }
    view = intake.view(record, now=T0)
    assert (view.state, view.due, view.failure_category) == (
        RecordState.DEAD,
        False,
        FailureCategory.INVALID_OUTPUT,
    )
    assert intake.list_ids(RecordState.DEAD) == [record]
    assert intake.list_ids(RecordState.PENDING) == [other]
    assert intake.counts(now=T0) == {"pending": 1, "due": 1, "dead": 1, "resolved": 0}
    # Not pending any more: a second dead-letter changes nothing.
    before = {n: (intake.dead_dir / n).read_bytes() for n in names(intake.dead_dir)}
    intake.dead_letter(record, FailureCategory.UNKNOWN, now=T0 + timedelta(hours=1))
    assert {n: (intake.dead_dir / n).read_bytes() for n in names(intake.dead_dir)} == before


def test_dead_letter_without_a_plan_moves_only_record_and_state(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.dead_letter(record, FailureCategory.STORAGE_ERROR, now=T0)
    assert names(intake.dead_dir) == sorted([record, f"{record}.state.json"])
    assert state_file(intake.dead_dir, record)["revision"] == 1


def test_retry_brings_a_dead_record_back_with_a_fresh_budget_and_its_plan(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.begin_attempt(record, now=T0)
    intake.begin_attempt(record, now=T0)
    intake.save_plan(record, b'{"plan":1}', now=T0)
    intake.dead_letter(record, FailureCategory.LLM_ERROR, now=T0)
    assert intake.retry(record, now=T0 + timedelta(minutes=5)) is True
    assert names(intake.dead_dir) == []
    assert intake.load_plan(record) == b'{"plan":1}'
    on_disk = state_file(intake.pending_dir, record)
    assert (on_disk["state"], on_disk["attempts"], on_disk["due_at"], on_disk["revision"]) == (
        "pending",
        0,
        None,
        5,
    )
    assert on_disk["updated_at"] == "2026-12-01T09:05:00.000Z"
    assert intake.due_pending(now=T0) == [record]
    assert intake.retry(record, now=T0) is False  # pending and due: nothing to do


def test_retry_of_a_delayed_record_keeps_its_attempts(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.begin_attempt(record, now=T0)
    intake.record_failure(record, FailureCategory.LLM_TIMEOUT, retry_in=timedelta(hours=1), now=T0)
    assert intake.retry(record, now=T0 + timedelta(minutes=1)) is True
    on_disk = state_file(intake.pending_dir, record)
    assert (on_disk["attempts"], on_disk["due_at"]) == (1, None)
    assert intake.due_pending(now=T0 + timedelta(minutes=1)) == [record]


def test_resolve_writes_the_receipt_then_retires_everything(intake: Intake) -> None:
    record = admit(intake, "r1")
    data = (intake.pending_dir / record).read_bytes()
    intake.begin_attempt(record, now=T0)
    intake.save_plan(record, b"{}", now=T0)
    receipt = intake.resolve(record, outcome="success", now=T0 + timedelta(minutes=2))
    assert receipt.payload_sha256 == hashlib.sha256(data).hexdigest()
    assert (receipt.id, receipt.outcome, receipt.attempts, receipt.reason) == (record, "success", 1, None)
    assert (receipt.admitted_at, receipt.resolved_at) == (
        "2026-12-01T09:00:00.000Z",
        "2026-12-01T09:02:00.000Z",
    )
    assert names(intake.pending_dir) == []
    assert names(intake.resolved_dir) == [f"{record}.receipt.json"]
    assert intake.receipt(record) == receipt
    assert intake.has_receipt(record, receipt.payload_sha256)
    assert not intake.has_receipt(record, "0" * 64)
    view = intake.view(record, now=T0)
    assert (view.state, view.attempts, view.due, view.admitted_at) == (
        RecordState.RESOLVED,
        1,
        False,
        "2026-12-01T09:00:00.000Z",
    )
    # A capture turn is archived for re-curation with its exact bytes (issue #6).
    archived = list(TurnArchive(intake.root).turns(since=date(2000, 1, 1)))
    assert [t.id for t in archived] == [record]
    assert TurnArchive(intake.root).load(archived[0]) == data
    # Resolving again returns the same receipt and writes nothing.
    assert intake.resolve(record, outcome="success", now=T0 + timedelta(days=1)) == receipt


def test_resolve_of_a_dead_record_and_of_a_projection_turn(intake: Intake) -> None:
    dead = admit(intake, "r1")
    intake.dead_letter(dead, FailureCategory.LLM_ERROR, now=T0)
    receipt = intake.resolve(dead, outcome="success", now=T0)
    assert names(intake.dead_dir) == []
    assert receipt.outcome == "success"
    lite = admit(intake, "r2", write_mode="append-host-summary")
    intake.resolve(lite, outcome="success", now=T0)
    # Only capture turns are archived: a projection turn already lives in daily/.
    assert [t.id for t in TurnArchive(intake.root).turns(since=date(2000, 1, 1))] == [dead]


def test_operator_resolution_needs_a_slug_and_refuses_a_retained_plan(intake: Intake) -> None:
    record = admit(intake, "r1")
    with pytest.raises(IntakeError, match="reason slug"):
        intake.operator_resolve(record, "Not A Slug!", now=T0)
    intake.save_plan(record, b"{}", now=T0)
    with pytest.raises(RetainedPlanError):
        intake.operator_resolve(record, "accepted-loss", now=T0)
    other = admit(intake, "r2")
    assert intake.operator_resolve(other, "accepted-loss", now=T0) is True
    receipt = intake.receipt(other)
    assert (receipt.outcome, receipt.reason) == ("operator_resolved", "accepted-loss")
    assert intake.operator_resolve(other, "accepted-loss", now=T0) is False
    # Operator resolution never archives the turn.
    assert list(TurnArchive(intake.root).turns(since=date(2000, 1, 1))) == []


def test_a_malformed_record_is_reported_by_id_without_its_bytes(intake: Intake) -> None:
    record = admit(intake, "r1")
    (intake.pending_dir / record).write_bytes(b'{"secret": "hunter2"}')
    with pytest.raises(IntakeCorruptError) as err:
        intake.resolve(record, outcome="success", now=T0)
    assert str(err.value) == f"intake record {record} is malformed" and err.value.__cause__ is None
    assert names(intake.resolved_dir) == []
    (intake.pending_dir / f"{record}.state.json").write_bytes(b"[]")
    (intake.pending_dir / f"{record}.state.json").chmod(0o600)
    with pytest.raises(IntakeCorruptError, match=f"state of intake record {record} is malformed"):
        intake.begin_attempt(record, now=T0)


def test_transitions_on_unknown_or_retired_records_are_refused(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.resolve(record, outcome="success", now=T0)
    with pytest.raises(UnknownRecordError, match="not pending"):
        intake.begin_attempt(record, now=T0)
    with pytest.raises(UnknownRecordError, match="not pending"):
        intake.save_plan(record, b"{}", now=T0)
    with pytest.raises(UnknownRecordError, match="retired"):
        intake.load_payload(record)
    assert intake.retry(record, now=T0) is False
    with pytest.raises(UnknownRecordError, match="no intake record"):
        intake.view("a" * 64, now=T0)
    with pytest.raises(UnknownRecordError, match="64-character"):
        intake.view("../etc", now=T0)


def test_receipts_are_pruned_oldest_first_beyond_the_limit(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake_mod, "MAX_RESOLVED_RECEIPTS", 3)
    records = [admit(intake, f"r{i}", minutes=i) for i in range(5)]
    for i, record in enumerate(records):
        intake.resolve(record, outcome="success", now=T0 + timedelta(minutes=i))
        path = intake.resolved_dir / f"{record}.receipt.json"
        os.utime(path, ns=(i * 10**9, i * 10**9))  # resolution order, whatever the clock granularity
    assert names(intake.resolved_dir) == sorted(f"{r}.receipt.json" for r in records[2:])
    # The ledger keeps protection for the pruned ones: they are duplicates, never admitted again.
    turn_again = admit_turn(
        intake,
        CompletedTurn(
            run_id="r0",
            conversation_id="web:c1",
            speaker_kind="human-turn",
            user_text="question r0",
            final_answer="answer r0",
            admitted_at=T0,
        ),
        tier="bujo",
        write_mode="capture",
        capture_cron=None,
        capture_webhook=None,
    )
    assert turn_again.status.value == "duplicate"


def test_imported_commitments_are_kept_sorted_and_merged(intake: Intake) -> None:
    assert intake.imported() == set()
    intake.ensure_layout()
    intake.add_imported([("b" * 64, "1" * 64), ("a" * 64, "2" * 64)])
    intake.add_imported([("a" * 64, "2" * 64), ("c" * 64, "3" * 64)])
    assert intake.imported() == {("a" * 64, "2" * 64), ("b" * 64, "1" * 64), ("c" * 64, "3" * 64)}
    raw = json.loads(intake.imported_path.read_bytes())
    assert raw == sorted(raw) and len(raw) == 3
    assert intake.has_receipt("c" * 64, "3" * 64) and not intake.has_receipt("c" * 64, "4" * 64)
    intake.imported_path.write_bytes(b"{broken")
    with pytest.raises(IntakeCorruptError, match="malformed"):
        intake.imported()


def test_instants_round_trip_in_utc_milliseconds() -> None:
    from zoneinfo import ZoneInfo

    lisbon = datetime(2026, 7, 1, 10, 0, 0, 123456, tzinfo=ZoneInfo("Europe/Lisbon"))
    assert format_instant(lisbon) == "2026-07-01T09:00:00.123Z"
    assert parse_instant("2026-07-01T09:00:00.123Z") == datetime(2026, 7, 1, 9, 0, 0, 123000, tzinfo=UTC)
    assert parse_instant("2026-07-01T10:00:00+01:00").tzinfo == UTC
    assert parse_instant("2026-07-01T10:00:00+01:00").hour == 9


def test_the_retry_schedule_keeps_its_shape_when_scaled() -> None:
    """AMB-10 with ``first_delay_seconds`` shrunk (as tests and impatient operators do): the cap keeps
    its ratio to the first delay (6 hours : 1 minute)."""
    from tempomem.storage.limits import RETRY_MAX_ATTEMPTS, retry_delay_seconds

    scaled = [retry_delay_seconds(n, 1) for n in range(1, RETRY_MAX_ATTEMPTS + 1)]
    assert scaled == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 360, 360, 360, 360, 360, 360]
    assert all(type(d) is int for d in scaled)  # whole seconds: Temporal timers and due_at take them
    assert [retry_delay_seconds(n, 2) for n in (2, 11)] == [2, 720]
    for bad in (0, RETRY_MAX_ATTEMPTS + 1):
        with pytest.raises(ValueError, match=f"attempt must be 1..{RETRY_MAX_ATTEMPTS}, got {bad}"):
            retry_delay_seconds(bad)


def test_failure_state_on_disk_and_retry_exactly_at_the_due_instant(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.begin_attempt(record, now=T0)
    failed_at = T0 + timedelta(seconds=5)
    intake.record_failure(record, FailureCategory.INDEX_ERROR, retry_in=timedelta(minutes=2), now=failed_at)
    assert state_file(intake.pending_dir, record) == {
        "attempts": 1,
        "due_at": "2026-12-01T09:02:05.000Z",
        "failure_category": "index_error",
        "retained_plan": False,
        "revision": 2,
        "state": "pending",
        "updated_at": "2026-12-01T09:00:05.000Z",
    }
    # At the due instant the record is due already: retry has nothing to do.
    assert intake.retry(record, now=failed_at + timedelta(minutes=2)) is False
    assert intake.retry(record, now=failed_at + timedelta(minutes=1)) is True


def test_receipt_checks_fail_closed_and_imports_are_written_compactly(intake: Intake) -> None:
    record = admit(intake, "r1")
    receipt = intake.resolve(record, outcome="success", now=T0)
    (intake.resolved_dir / f"{record}.receipt.json").write_bytes(b"{broken")
    assert intake.has_receipt(record, receipt.payload_sha256) is False
    with pytest.raises(IntakeCorruptError, match=f"receipt of intake record {record} is malformed"):
        intake.receipt(record)
    intake.add_imported([("b" * 64, "1" * 64), ("a" * 64, "2" * 64)])
    assert (
        intake.imported_path.read_bytes()
        == f'[["{"a" * 64}","{"2" * 64}"],["{"b" * 64}","{"1" * 64}"]]'.encode()
    )


def test_operator_resolution_of_a_dead_record_with_a_plan_is_refused_by_name(intake: Intake) -> None:
    record = admit(intake, "r1")
    intake.save_plan(record, b"{}", now=T0)
    intake.dead_letter(record, FailureCategory.LLM_ERROR, now=T0)
    with pytest.raises(RetainedPlanError, match=f"intake record {record} holds a recoverable retained plan"):
        intake.operator_resolve(record, "accepted-loss", now=T0)
    assert intake.list_ids(RecordState.DEAD) == [record]


def test_one_receipt_over_the_limit_prunes_exactly_one(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake_mod, "MAX_RESOLVED_RECEIPTS", 3)
    records = [admit(intake, f"r{i}", minutes=i) for i in range(4)]
    for i, record in enumerate(records[:3]):
        intake.resolve(record, outcome="success", now=T0)
        os.utime(intake.resolved_dir / f"{record}.receipt.json", ns=(i * 10**9, i * 10**9))
    assert len(names(intake.resolved_dir)) == 3  # at the limit: nothing pruned
    intake.resolve(records[3], outcome="success", now=T0)
    assert names(intake.resolved_dir) == sorted(f"{r}.receipt.json" for r in records[1:])


def test_fit_record_leaves_a_small_record_as_it_is() -> None:
    from tempomem.storage.intake_records import build_payload, fit_record

    turn = CompletedTurn(run_id="r", conversation_id="c", final_answer="short", admitted_at=T0)
    payload = build_payload(turn, write_mode="capture", tier="bujo")
    assert fit_record(payload) == payload


def test_a_receipt_that_cannot_be_written_leaves_the_record_whole(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolve writes the receipt before it removes anything: a full disk (or a kill) at the receipt
    leaves the record, its state and its plan exactly as they were, still pending."""
    record = admit(intake, "r1")
    intake.begin_attempt(record, now=T0)
    intake.save_plan(record, b"{}", now=T0)
    before = {n: (intake.pending_dir / n).read_bytes() for n in names(intake.pending_dir)}
    real = intake_mod.atomic_write

    def disk_full_at_receipts(path: Path, data: bytes, **kw: object) -> None:
        if path.name.endswith(".receipt.json"):
            raise OSError(28, "No space left on device")
        real(path, data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(intake_mod, "atomic_write", disk_full_at_receipts)
    with pytest.raises(OSError):
        intake.resolve(record, outcome="success", now=T0)
    assert {n: (intake.pending_dir / n).read_bytes() for n in names(intake.pending_dir)} == before
    assert intake.view(record, now=T0).state is RecordState.PENDING


def test_the_curated_counter_counts_each_successful_resolve_once(intake: Intake) -> None:
    """``Intake.curated`` (a worker's figure for ``worker --stores``, #16 item 4): one per record this
    instance resolved as curated; an operator's resolve and a repeated resolve add nothing."""
    first, second, lost = admit(intake, "c1"), admit(intake, "c2"), admit(intake, "c3")
    assert intake.curated == 0
    intake.resolve(first, outcome="success", now=T0)
    assert intake.curated == 1
    intake.resolve(second, outcome="success", now=T0)
    assert intake.curated == 2
    intake.resolve(lost, outcome="operator_resolved", now=T0)
    intake.resolve(first, outcome="success", now=T0)  # already resolved: nothing happens
    assert intake.curated == 2


def test_a_plan_is_bounded_like_a_record_and_stamps_the_state(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retained plan may be as large as a record and no larger (the refusal names both sizes, nothing
    of the plan); keeping it stamps the state's update instant. A resolved record's view is the receipt's:
    its state file is gone, so its revision is 0."""
    from tempomem.storage import intake as intake_module
    from tempomem.storage.instants import format_instant
    from tempomem.storage.intake_records import IntakeError

    record = admit(intake, "plan-bound")
    monkeypatch.setattr(intake_module, "MAX_RECORD_BYTES", 1000)  # above a state file
    with pytest.raises(IntakeError, match=r"^capture plan is 1001 bytes, more than 1000$"):
        intake.save_plan(record, b"x" * 1001, now=T0)
    assert intake.load_plan(record) is None
    later = T0 + timedelta(minutes=3)
    intake.save_plan(record, b"x" * 1000, now=later)  # exactly the bound
    state = intake.pending_state(record)
    assert state is not None and state.retained_plan and state.updated_at == format_instant(later)
    other = admit(intake, "plan-resolved")
    intake.begin_attempt(other, now=T0)
    intake.resolve(other, outcome="success", now=T0)
    assert intake.view(other, now=T0).revision == 0


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda p: p.chmod(0o644), "has mode 644, expected 600"),
        (lambda p: os.link(p, p.with_name("copy")), "has 2 links"),
        (lambda p: p.write_bytes(b" " * (intake_mod.MAX_RECORD_BYTES + 1)),
         f"is {intake_mod.MAX_RECORD_BYTES + 1} bytes, more than {intake_mod.MAX_RECORD_BYTES}"),
    ],
    ids=["mode", "links", "size"],
)  # fmt: skip
def test_a_record_file_not_as_the_intake_wrote_it_is_refused_by_path_and_reason(
    intake: Intake, spoil, reason: str
) -> None:
    """INTAKE-09/10: records are read strictly (one link, 0600, bounded); the error says where and why."""
    record = admit(intake, "r-spoiled")
    path = intake.pending_dir / record
    spoil(path)
    with pytest.raises(IntakeCorruptError) as err:
        intake.load_payload(record)
    assert str(err.value) == f"{path} {reason}"


def test_a_folder_the_intake_did_not_make_is_refused_by_path(intake: Intake) -> None:
    intake.ensure_layout()
    intake.dead_dir.chmod(0o750)
    with pytest.raises(IntakeCorruptError) as err:
        intake.ensure_layout()
    assert str(err.value) == f"{intake.dead_dir} has mode 750, expected 700"


def test_admission_refusals_say_what_was_refused(intake: Intake, monkeypatch: pytest.MonkeyPatch) -> None:
    from tempomem.storage.intake_records import IntakeCapacityError, IntakeConflictError, build_payload

    def payload(run_id: str, answer: str = "an answer"):
        turn = CompletedTurn(run_id=run_id, conversation_id="web:c1", final_answer=answer, admitted_at=T0)
        return build_payload(turn, write_mode="append-host-summary", tier="lite")

    first = payload("r-a")
    intake.admit(first)
    with pytest.raises(IntakeConflictError) as err:
        intake.admit(payload("r-a", "another answer"))
    assert str(err.value) == (
        f"run id of intake record {first.id} was admitted before with different payload bytes"
    )
    monkeypatch.setattr(intake_mod, "MAX_ACTIVE_RECORDS", 1)
    with pytest.raises(IntakeCapacityError) as err:
        intake.admit(payload("r-b"))
    assert str(err.value) == "1 active intake records; admission refused"
    monkeypatch.setattr(intake_mod, "MAX_RECORD_BYTES", 100)
    big = payload("r-c")
    size = len(json.dumps(big.model_dump(), sort_keys=True, separators=(",", ":")).encode())
    with pytest.raises(IntakeError) as err:
        intake.admit(big)
    assert str(err.value) == f"record is {size} bytes, more than 100"


def test_state_files_beside_records_do_not_count_towards_capacity(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake_mod, "MAX_ACTIVE_RECORDS", 4)
    for run_id in ("r-1", "r-2"):
        intake.begin_attempt(admit(intake, run_id), now=T0)  # a record and its state file each
    assert len(os.listdir(intake.pending_dir)) == 4
    admit(intake, "r-3")  # two records of four allowed: admitted


def test_a_bad_id_is_echoed_at_most_80_characters() -> None:
    from tempomem.storage.intake_records import check_record_id

    with pytest.raises(UnknownRecordError) as err:
        check_record_id("z" * 200)
    assert str(err.value) == f"not a 64-character lowercase hex intake id: {'z' * 80!r}"


def test_a_record_is_utf8_json_not_ascii_escapes(intake: Intake) -> None:
    """Records are canonical JSON in UTF-8 (a character is its own bytes, never a \\u escape): the
    payload hash and the size bound see the text as written."""
    record = admit(intake, "r-café ☕", write_mode="append-host-summary")
    data = (intake.pending_dir / record).read_bytes()
    assert "answer r-café ☕".encode() in data and b"\\u" not in data


def test_a_record_of_exactly_the_bound_is_kept_whole() -> None:
    """AMB-12's bound is inclusive: a record of exactly MAX_RECORD_BYTES is not cut."""
    from tempomem.storage.intake_records import build_payload, canonical_json, fit_record

    turn = CompletedTurn(run_id="r", conversation_id="c", user_text="x", final_answer="a", admitted_at=T0)
    payload = build_payload(turn, write_mode="capture", tier="bujo")
    size = len(canonical_json(payload.model_dump()))
    grown = "x" * (len(payload.capture_user_text) + intake_mod.MAX_RECORD_BYTES - size)
    exact = payload.model_copy(update={"capture_user_text": grown})
    assert len(canonical_json(exact.model_dump())) == intake_mod.MAX_RECORD_BYTES
    assert fit_record(exact) == exact


def test_an_oversized_text_is_cut_only_as_far_as_the_bound_needs() -> None:
    """AMB-12: the cut keeps as much of the owner's text as fits, then the marker."""
    from tempomem.storage.intake_records import TRUNCATION_MARKER, build_payload, canonical_json

    big = "x" * intake_mod.MAX_RECORD_BYTES
    turn = CompletedTurn(run_id="r", conversation_id="c", user_text=big, final_answer="a", admitted_at=T0)
    payload = build_payload(turn, write_mode="capture", tier="bujo")
    size = len(canonical_json(payload.model_dump()))
    assert intake_mod.MAX_RECORD_BYTES - 64 <= size <= intake_mod.MAX_RECORD_BYTES
    assert payload.capture_user_text.endswith(TRUNCATION_MARKER)
    assert set(payload.capture_user_text.removesuffix(TRUNCATION_MARKER)) == {"x"}


def test_when_the_owners_text_alone_cannot_make_room_it_is_cut_whole_then_the_answer() -> None:
    from tempomem.storage.intake_records import TRUNCATION_MARKER, build_payload, canonical_json

    big = intake_mod.MAX_RECORD_BYTES
    turn = CompletedTurn(
        run_id="r", conversation_id="c", user_text="x" * big, final_answer="y" * 2 * big, admitted_at=T0
    )
    payload = build_payload(turn, write_mode="capture", tier="bujo")
    assert payload.capture_user_text == TRUNCATION_MARKER
    assert payload.capture_answer.endswith(TRUNCATION_MARKER) and payload.capture_answer.startswith("y")
    assert len(canonical_json(payload.model_dump())) <= big


def test_a_malformed_payload_read_by_an_activity_is_named_without_its_bytes(intake: Intake) -> None:
    record = admit(intake, "r-bad")
    (intake.pending_dir / record).write_bytes(b'{"secret": "hunter2"}')
    with pytest.raises(IntakeCorruptError) as err:
        intake.load_payload(record)  # what a capture activity reads
    assert str(err.value) == f"intake record {record} is malformed" and err.value.__cause__ is None
