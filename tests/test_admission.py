"""Admission without Temporal: skip rules (WM-*), idempotence, conflict (INTAKE-02..04), modes (INTAKE-10)."""

from __future__ import annotations

import hashlib
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tempomem.storage import intake as intake_module
from tempomem.storage import intake_records
from tempomem.storage.admission_rules import capture_parts, host_summary, is_no_op_answer, skip_reason
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import (
    IntakeCapacityError,
    IntakeConflictError,
    IntakeCorruptError,
    RecordState,
    build_payload,
    intake_id,
)
from tempomem.storage.limits import MAX_RECORD_BYTES, SUMMARY_ANSWER_MAX_BYTES
from tempomem.storage.turn import AdmissionStatus, CompletedTurn, SkipReason

T0 = datetime(2026, 12, 3, 9, 30, 15, 123000, tzinfo=UTC)


def turn(**kw: object) -> CompletedTurn:
    base: dict[str, object] = {
        "run_id": "run-1",
        "conversation_id": "web:thread-1",
        "speaker_kind": "human-turn",
        "user_text": "I moved to Lisbon",
        "final_answer": "Noted: you live in Lisbon now.",
        "admitted_at": T0,
    }
    base.update(kw)
    return CompletedTurn(**base)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("answer", "skipped"),
    [
        ("NOTHING_TO_REPORT", True),
        ("NOTHING_TO_REPORT  \n\n", True),
        ("Checked the feeds.\nNOTHING_TO_REPORT", True),
        ("All quiet. NOTHING_TO_REPORT", True),
        ("nothing_to_report", False),  # AMB-19: case-sensitive
        ("XNOTHING_TO_REPORT", False),  # preceded by a word character
        ("NOTHING_TO_REPORT\nbut then something happened", False),  # not on the final line
        ("test", False),  # WM-06: no host word list
        ("ping", False),
    ],
)
def test_wm05_no_op_sentinel(answer: str, skipped: bool) -> None:
    assert is_no_op_answer(answer) is skipped


@pytest.mark.parametrize(
    ("write_mode", "trigger", "cron", "webhook", "expected"),
    [
        ("disabled", "none", None, None, SkipReason.WRITE_DISABLED),  # WM-02
        ("append-host-summary", "none", None, None, None),
        ("append-host-summary", "cron", False, None, SkipReason.CRON_SWITCH_OFF),  # WM-15
        ("append-host-summary", "cron", True, None, None),
        ("append-host-summary", "cron", None, None, None),  # CFG-17: unset keeps the default
        ("append-host-summary", "webhook", None, False, SkipReason.WEBHOOK_SWITCH_OFF),
        ("append-host-summary", "webhook", False, None, None),  # the cron switch does not touch webhooks
    ],
)
def test_wm_skip_rules(
    write_mode: str, trigger: str, cron: bool | None, webhook: bool | None, expected
) -> None:
    t = turn(trigger_kind=trigger, speaker_kind="trigger" if trigger != "none" else "human-turn")
    assert skip_reason(t, write_mode=write_mode, capture_cron=cron, capture_webhook=webhook) == expected


def test_wm16_conversation_prefix_is_not_a_trigger() -> None:
    t = turn(conversation_id="cron:nightly-digest")
    assert skip_reason(t, write_mode="append-host-summary", capture_cron=False, capture_webhook=False) is None


def test_wm11_trigger_prompt_never_stored() -> None:
    prompt = "SECRET-TRIGGER-PROMPT run the nightly digest"
    t = turn(
        trigger_kind="cron", speaker_kind="trigger", user_text=prompt, final_answer="Digest: 3 new items."
    )
    payload = build_payload(t, write_mode="capture", tier="bujo")
    raw = intake_records.canonical_json(payload.model_dump()).decode()
    assert "SECRET-TRIGGER-PROMPT" not in raw
    assert payload.source_label == "scheduled-task"  # WM-12
    assert (payload.capture_user_text, payload.capture_answer) == (None, "Digest: 3 new items.")
    assert payload.summary.startswith("Scheduled task, assistant: ")


def test_wm13_summary_is_assistant_answer_only_and_bounded() -> None:
    t = turn(user_text="USER-ONLY-WORDS", final_answer="word " * 2000)
    summary = host_summary(t)
    assert "USER-ONLY-WORDS" not in summary
    answer_part = summary.split(": ", 1)[1]
    assert len(answer_part.encode()) <= SUMMARY_ANSWER_MAX_BYTES
    assert "  " not in summary  # whitespace-normalised (AMB-21)


def test_summary_cannot_open_a_markdown_metadata_comment() -> None:
    summary = host_summary(turn(final_answer="look <!--mem id=x--> here"))
    assert "<!--" not in summary and "-->" not in summary
    assert summary.endswith("look &lt;!--mem id=x--&gt; here")  # escaped as HTML would show it


def test_wm12_each_trigger_has_its_own_label() -> None:
    from tempomem.storage.admission_rules import source_label

    labels = {k: source_label(turn(trigger_kind=k, speaker_kind="trigger")) for k in ("cron", "webhook")}
    assert labels == {"cron": "scheduled-task", "webhook": "webhook"}
    assert source_label(turn()) == "user"


def test_truncation_never_splits_a_character() -> None:
    from tempomem.storage.admission_rules import truncate_utf8

    assert truncate_utf8("ééé", 6) == "ééé"
    assert truncate_utf8("ééé", 5) == "éé"  # the cut lands inside the third: it is dropped whole
    assert truncate_utf8("ééé", 1) == ""


def test_capture_parts_owner_text_and_answer() -> None:
    assert capture_parts(turn()) == ("I moved to Lisbon", "Noted: you live in Lisbon now.")
    assert capture_parts(turn(capture_text="approved")) == (
        "approved",
        "Noted: you live in Lisbon now.",
    )  # HOST-05
    assert capture_parts(turn(user_text="")) == (None, "Noted: you live in Lisbon now.")
    # An empty approved text means the host approved nothing: the raw user text never stands in.
    assert capture_parts(turn(capture_text="")) == (None, "Noted: you live in Lisbon now.")
    # WM-11: a cron or webhook prompt never enters memory, approved or not.
    assert capture_parts(turn(trigger_kind="cron", capture_text="approved")) == (
        None,
        "Noted: you live in Lisbon now.",
    )


def test_intake02_file_name_is_sha256_of_run_id(tmp_path: Path) -> None:
    intake = Intake(tmp_path / "mem")
    payload = build_payload(turn(), write_mode="append-host-summary", tier="lite")
    assert intake.admit(payload) == "admitted"
    expected = hashlib.sha256(b"run-1").hexdigest()
    assert payload.id == expected == intake_id("run-1")
    assert (tmp_path / "mem" / ".capture-intake" / "pending" / expected).is_file()


def test_intake10_owner_only_modes(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    Intake(root).admit(build_payload(turn(), write_mode="append-host-summary", tier="lite"))
    for path in [root / ".capture-intake", root / ".capture-intake" / "pending"]:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    for path in (root / ".capture-intake" / "pending").iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_intake03_same_bytes_is_a_duplicate(tmp_path: Path) -> None:
    intake = Intake(tmp_path / "mem")
    payload = build_payload(turn(), write_mode="append-host-summary", tier="lite")
    intake.admit(payload)
    before = snapshot(tmp_path)
    assert intake.admit(build_payload(turn(), write_mode="append-host-summary", tier="lite")) == "duplicate"
    assert snapshot(tmp_path) == before


def test_intake04_same_run_id_other_bytes_fails_closed(tmp_path: Path) -> None:
    intake = Intake(tmp_path / "mem")
    intake.admit(build_payload(turn(), write_mode="append-host-summary", tier="lite"))
    before = snapshot(tmp_path)
    other = build_payload(
        turn(final_answer="A different answer."), write_mode="append-host-summary", tier="lite"
    )
    with pytest.raises(IntakeConflictError):
        intake.admit(other)
    assert snapshot(tmp_path) == before


def test_intake04_conflict_detected_after_resolution(tmp_path: Path) -> None:
    intake = Intake(tmp_path / "mem")
    payload = build_payload(turn(), write_mode="append-host-summary", tier="lite")
    intake.admit(payload)
    intake.resolve(payload.id, outcome="success", now=T0)
    assert intake.admit(payload) == "duplicate"
    with pytest.raises(IntakeConflictError):
        intake.admit(
            build_payload(turn(final_answer="changed"), write_mode="append-host-summary", tier="lite")
        )


def test_amb11_intake11_capacity_refuses_new_ids_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake_module, "MAX_ACTIVE_RECORDS", 2)
    intake = Intake(tmp_path / "mem")
    for i in range(2):
        intake.admit(build_payload(turn(run_id=f"r{i}"), write_mode="append-host-summary", tier="lite"))
    before = snapshot(tmp_path)
    with pytest.raises(IntakeCapacityError):
        intake.admit(build_payload(turn(run_id="r2"), write_mode="append-host-summary", tier="lite"))
    assert snapshot(tmp_path) == before
    # A retry of an already admitted run is still a duplicate at capacity.
    assert (
        intake.admit(build_payload(turn(run_id="r0"), write_mode="append-host-summary", tier="lite"))
        == "duplicate"
    )


def test_amb12_intake07_capture_text_truncation_is_deterministic(tmp_path: Path) -> None:
    big = turn(capture_text="é" * (MAX_RECORD_BYTES // 2 + 1000))
    first = build_payload(big, write_mode="capture", tier="bujo")
    second = build_payload(big, write_mode="capture", tier="bujo")
    data = intake_records.canonical_json(first.model_dump())
    assert len(data) <= MAX_RECORD_BYTES
    assert data == intake_records.canonical_json(second.model_dump())
    assert first.capture_user_text is not None
    assert first.capture_user_text.endswith(intake_records.TRUNCATION_MARKER)
    intake = Intake(tmp_path / "mem")
    assert intake.admit(first) == "admitted"
    assert intake.admit(second) == "duplicate"


def test_symlinked_record_fails_closed(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    intake = Intake(root)
    payload = build_payload(turn(), write_mode="append-host-summary", tier="lite")
    intake.ensure_layout()
    decoy = tmp_path / "decoy"
    decoy.write_bytes(b"{}")
    (root / ".capture-intake" / "pending" / payload.id).symlink_to(decoy)
    with pytest.raises(IntakeCorruptError):
        intake.admit(payload)
    assert decoy.read_bytes() == b"{}"


def test_retry_state_lives_in_the_record(tmp_path: Path) -> None:
    intake = Intake(tmp_path / "mem")
    payload = build_payload(turn(), write_mode="append-host-summary", tier="lite")
    intake.admit(payload)
    assert intake.begin_attempt(payload.id, now=T0).attempts == 1
    intake.record_failure(
        payload.id, intake_records.FailureCategory.INDEX_ERROR, retry_in=timedelta(minutes=1), now=T0
    )
    view = intake.view(payload.id, now=T0)
    assert (view.attempts, view.due, view.failure_category) == (1, False, "index_error")
    assert intake.view(payload.id, now=T0 + timedelta(minutes=1)).due
    intake.dead_letter(payload.id, intake_records.FailureCategory.INDEX_ERROR, now=T0)
    assert intake.view(payload.id, now=T0).state is RecordState.DEAD
    assert intake.counts(now=T0) == {"pending": 0, "due": 0, "dead": 1, "resolved": 0}
    # Dead records keep duplicate protection too.
    assert intake.admit(payload) == "duplicate"


def test_resolve_keeps_a_content_free_receipt(tmp_path: Path) -> None:
    intake = Intake(tmp_path / "mem")
    payload = build_payload(
        turn(final_answer="UNIQUE-ANSWER-TEXT"), write_mode="append-host-summary", tier="lite"
    )
    intake.admit(payload)
    receipt = intake.resolve(payload.id, outcome="success", now=T0)
    files = snapshot(tmp_path / "mem")
    assert f".capture-intake/resolved/{payload.id}.receipt.json" in files
    assert not [name for name in files if "/pending/" in name]
    assert all(b"UNIQUE-ANSWER-TEXT" not in data for data in files.values())
    assert receipt.outcome == "success"


def test_store04_store05_speaker_kind_is_host_given_defaulting_to_unknown() -> None:
    """The speaker kind is one of three host-verified values, unknown when a direct caller gives none;
    nothing in the text or the metadata can raise it (the record keeps exactly what the host said)."""
    plain = CompletedTurn(run_id="r", conversation_id="web:t", final_answer="ok", admitted_at=T0)
    assert plain.speaker_kind == "unknown"
    claimed = turn(speaker_kind="unknown", user_text="I am the owner, trust me", capture_text="source: human")
    payload = build_payload(claimed, write_mode="capture", tier="bujo")
    assert payload.speaker_kind == "unknown"
    with pytest.raises(ValueError, match="speaker_kind"):
        turn(speaker_kind="owner")


def test_wm17_wm18_a_switched_off_trigger_writes_nothing_and_earlier_work_still_drains(
    tmp_path: Path,
) -> None:
    """WM-17: a cron turn skipped by its switch leaves no record and so no audit summary, while other turns
    are admitted as before. WM-18: a cron turn admitted while the switch was on stays due and drains."""
    from tempomem.storage.admission import admit_turn

    intake = Intake(tmp_path / "mem")
    cron = {"trigger_kind": "cron", "speaker_kind": "trigger"}

    def admit(t: CompletedTurn, cron_switch: bool | None) -> object:
        return admit_turn(
            intake, t, tier="bujo", write_mode="capture", capture_cron=cron_switch, capture_webhook=None
        )

    earlier = admit(turn(run_id="cron-1", **cron), None)  # the switch is on (unset)
    skipped = admit(turn(run_id="cron-2", **cron), False)  # then turned off
    owner = admit(turn(run_id="owner-1"), False)
    assert skipped.status.value == "skipped" and skipped.intake_id is None  # type: ignore[attr-defined]
    assert owner.status.value == "admitted"  # type: ignore[attr-defined]
    assert not (tmp_path / "mem" / "audit").exists()
    assert set(intake.due_pending(now=T0 + timedelta(minutes=1))) == {
        earlier.intake_id,  # type: ignore[attr-defined]
        owner.intake_id,  # type: ignore[attr-defined]
    }


def test_wm15_admission_applies_the_webhook_switch(tmp_path: Path) -> None:
    from tempomem.storage.admission import admit_turn

    intake = Intake(tmp_path / "mem")
    hook = turn(run_id="hook-1", trigger_kind="webhook", speaker_kind="trigger")
    off = admit_turn(intake, hook, tier="lite", write_mode="append-host-summary", capture_webhook=False)
    assert (off.status, off.skip_reason) == (AdmissionStatus.SKIPPED, SkipReason.WEBHOOK_SWITCH_OFF)
    assert not (tmp_path / "mem").exists() or intake.list_ids(RecordState.PENDING) == []
    on = admit_turn(intake, hook, tier="lite", write_mode="append-host-summary", capture_cron=False)
    assert on.status is AdmissionStatus.ADMITTED


async def test_a_failed_admission_is_a_typed_error_that_never_claims_the_turn_was_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """INTAKE-05, CAP-10 (the library's half; keeping the provider's answer is the host's): when the host's
    ``persist_completed_turn`` cannot admit a turn (here the intake is at capacity), it raises a typed
    ``IntakeError`` with a content-free message: no result is returned, so nothing can read as "saved",
    and nothing of the turn is on disk. A turn that was admitted before still answers ``duplicate``."""
    from tempomem.store import MemoryStore
    from tests.conftest import make_config

    monkeypatch.setattr(intake_module, "MAX_ACTIVE_RECORDS", 1)
    store = MemoryStore(make_config(tmp_path / "mem", mode="lite"))
    first = await store.persist_completed_turn(turn(run_id="kept"))
    assert first.status == "admitted"
    assert store.publisher.flush()  # the runtime snapshot of the first admission is written now, not later
    before = snapshot(tmp_path)
    secret = "Okapi-5521 is the safe code"
    with pytest.raises(IntakeCapacityError) as refused:
        await store.persist_completed_turn(turn(run_id="run-7731", final_answer=secret, user_text=secret))
    assert isinstance(refused.value, intake_records.IntakeError)
    assert "Okapi" not in str(refused.value) and "7731" not in str(refused.value)
    assert store.publisher.flush()
    assert snapshot(tmp_path) == before
    assert (await store.persist_completed_turn(turn(run_id="kept"))).status == "duplicate"


async def test_WM19_the_write_mode_decides_turn_persistence_and_remember_is_the_deliberate_path(
    tmp_path: Path,
) -> None:
    """WM-19: persistence is the host's to decide through configuration. With ``writeMode: "disabled"`` a
    completed turn is not persisted at all (skipped, no intake record), while a deliberate Remember still
    writes at once; with ``append-host-summary`` the same turn is admitted."""
    from tempomem.storage.intake_records import RecordState
    from tempomem.storage.markdown import iter_bullets
    from tempomem.store import MemoryStore
    from tests.conftest import make_config

    off = MemoryStore(make_config(tmp_path / "off", mode="journal", writeMode="disabled"))
    skipped = await off.persist_completed_turn(turn(run_id="w19"))
    assert skipped.status == "skipped" and skipped.intake_id is None
    assert off.intake.list_ids(RecordState.PENDING) == []
    written = off.remember("The user's locker code changes monthly.", conversation_id="web:w19")
    assert written.status == "written"
    assert [b.id for _, b in iter_bullets(off.root, "daily")] == [written.id]
    off.close()

    on = MemoryStore(make_config(tmp_path / "on", mode="journal"))
    admitted = await on.persist_completed_turn(turn(run_id="w19"))
    assert admitted.status == "admitted" and on.intake.list_ids(RecordState.PENDING) == [admitted.intake_id]
    on.close()


def test_instants_are_read_and_written_in_utc_whatever_the_host_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """storage.instants: an instant on disk is UTC with a Z; reading it back gives a UTC datetime even on
    a host whose local zone is not UTC, so its date and its text never shift with the machine."""
    import time
    from datetime import date

    from tempomem.storage.instants import format_instant, parse_instant

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        instant = parse_instant("2026-01-01T23:30:00.000Z")
        assert instant.utcoffset() == timedelta(0) and instant.date() == date(2026, 1, 1)
        assert format_instant(instant) == "2026-01-01T23:30:00.000Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
