"""Which turn commits next (storage.commit_order, issue #15 item 1): only an earlier-admitted turn that
is in flight — pending, begun, not waiting out a backoff — holds a later one back; a turn leaving flight
wakes the earliest in-flight turn after it, when that one holds a plan. Real intake files, no Temporal."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tempomem.storage.commit_order import CommitOrder
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import FailureCategory
from tests.test_intake_lifecycle import T0, admit
from tests.test_intake_lifecycle import intake as intake  # the fixture

NOW = T0 + timedelta(hours=1)


def test_only_an_earlier_turn_in_flight_holds_a_later_one_back(intake: Intake) -> None:
    a, b, c = (admit(intake, f"order-{n}", minutes=n) for n in range(3))
    order = CommitOrder(intake)
    # Nobody has begun: nothing is in flight, every turn may commit.
    assert [order.blocking(r, now=NOW) for r in (a, b, c)] == [None, None, None]
    intake.begin_attempt(a, now=NOW)
    intake.begin_attempt(c, now=NOW)
    assert order.blocking(c, now=NOW) == a  # the earliest in flight, by admission instant
    assert order.blocking(b, now=NOW) == a
    assert order.blocking(a, now=NOW) is None  # a later turn in flight never holds an earlier one
    # A failed attempt waits out its backoff: out of flight, so it holds nobody back...
    intake.record_failure(a, FailureCategory.LLM_ERROR, retry_in=timedelta(minutes=5), now=NOW)
    assert order.blocking(c, now=NOW) is None
    # ...until its retry is due again.
    assert order.blocking(c, now=NOW + timedelta(minutes=6)) == a
    intake.dead_letter(a, FailureCategory.LLM_ERROR, now=NOW)
    assert order.blocking(c, now=NOW + timedelta(minutes=6)) is None


def test_admission_instant_orders_not_admission_sequence(intake: Intake) -> None:
    late = admit(intake, "order-late", minutes=30)
    early = admit(intake, "order-early", minutes=1)  # admitted second, but said earlier
    order = CommitOrder(intake)
    intake.begin_attempt(late, now=NOW)
    intake.begin_attempt(early, now=NOW)
    assert order.blocking(late, now=NOW) == early
    assert order.blocking(early, now=NOW) is None


def test_the_turn_to_wake_is_the_next_in_flight_one_holding_a_plan(intake: Intake) -> None:
    a, b, c = (admit(intake, f"wake-{n}", minutes=n) for n in range(3))
    order = CommitOrder(intake)
    for r in (a, b, c):
        intake.begin_attempt(r, now=NOW)
    intake.save_plan(c, b"{}", now=NOW)
    # b is in flight but still extracting (no plan): it is not waiting, and c waits for b, not for a.
    assert order.next_waiting(a, now=NOW) is None
    intake.save_plan(b, b"{}", now=NOW)
    assert order.next_waiting(a, now=NOW) == b
    intake.resolve(a, outcome="success", now=NOW)
    assert order.next_waiting(b, now=NOW) == c
    assert order.next_waiting(c, now=NOW) is None  # nobody after the last one


def test_a_committed_turn_holds_nobody_back_before_it_resolves(intake: Intake) -> None:
    a, b = (admit(intake, f"done-{n}", minutes=n) for n in range(2))
    order = CommitOrder(intake)
    intake.begin_attempt(a, now=NOW)
    intake.begin_attempt(b, now=NOW)
    intake.save_plan(a, b'{"committed": false}', now=NOW)
    assert order.blocking(b, now=NOW) == a
    intake.save_plan(a, b'{"committed": true}', now=NOW)  # its commit is written and visible
    assert order.blocking(b, now=NOW) is None
    assert not order.in_flight(a, now=NOW)


def test_the_edges_of_being_in_flight(intake: Intake) -> None:
    """A retry due exactly now is in flight again; a state that cannot be read, or a plan that says it
    is committed, holds nobody back; a plan that cannot be read (or is gone while the state says it is
    kept) is still in flight, the capture's to report; and asking whom to wake past a turn in backoff
    compares its due time with now."""
    a, b = admit(intake, "edge-a", minutes=0), admit(intake, "edge-b", minutes=1)
    order = CommitOrder(intake)
    intake.begin_attempt(a, now=NOW)
    intake.record_failure(a, FailureCategory.LLM_ERROR, retry_in=timedelta(minutes=5), now=NOW)
    assert order.in_flight(a, now=NOW + timedelta(minutes=5)) is True  # due exactly now
    assert order.in_flight(a, now=NOW + timedelta(minutes=4)) is False
    intake.begin_attempt(b, now=NOW)
    assert order.next_waiting(a, now=NOW) is None  # b holds no plan
    intake.save_plan(b, b'{"committed": true}', now=NOW)
    assert order.in_flight(b, now=NOW) is False  # its commit is written: visible to the next turn
    intake.save_plan(b, b"not json", now=NOW)
    assert order.in_flight(b, now=NOW) is True
    (intake.pending_dir / f"{b}.plan.json").unlink()
    assert order.in_flight(b, now=NOW) is True  # the state still says a plan is kept
    (intake.pending_dir / f"{b}.state.json").write_bytes(b"{")
    assert order.in_flight(b, now=NOW) is False  # unreadable: it orders nothing
    c = admit(intake, "edge-c", minutes=2)
    intake.begin_attempt(c, now=NOW)
    intake.record_failure(c, FailureCategory.LLM_ERROR, retry_in=timedelta(minutes=5), now=NOW)
    assert order.next_waiting(a, now=NOW) is None  # c waits out its backoff: nobody to wake
    assert order.next_waiting(a, now=NOW + timedelta(minutes=5)) is None  # due again, but holds no plan


def test_a_turn_whose_resolve_runs_between_the_two_reads_is_out_of_flight(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolve of a committed turn now runs beside other turns' order checks (a local activity, issue
    #15 item 1). Interleaved exactly between the check's read of the state and its read of the plan, the
    plan is gone while the state said it was kept: that turn is being retired, not in flight. Read as in
    flight, it held the next turn back, and nobody was left to wake it: a 30 s stall of the pipeline."""
    a, b = (admit(intake, f"race-{n}", minutes=n) for n in range(2))
    for r in (a, b):
        intake.begin_attempt(r, now=NOW)
        intake.save_plan(r, b'{"committed": false}', now=NOW)
    intake.save_plan(a, b'{"committed": true}', now=NOW)
    order = CommitOrder(intake)
    real = intake.load_plan

    def resolve_first(record_id: str) -> bytes | None:
        if record_id == a and intake.pending_state(a) is not None:
            intake.resolve(a, outcome="success", now=NOW)  # between the state read and this plan read
        return real(record_id)

    monkeypatch.setattr(intake, "load_plan", resolve_first)
    assert order.in_flight(a, now=NOW) is False
    assert order.blocking(b, now=NOW) is None
    # A plan missing from a record that is still pending (a damaged store) keeps it in flight, as before.
    intake.save_plan(b, b"{}", now=NOW)
    (intake.pending_dir / f"{b}.plan.json").unlink()
    assert order.in_flight(b, now=NOW) is True
