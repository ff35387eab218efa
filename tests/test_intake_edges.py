"""The intake at its edges (issue #13): interrupted resolves, edited and corrupt records, tampering that
health must see, leftovers of kills, and bad text at admission. Each test fails on the code before it."""

from __future__ import annotations

import json
import os
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from tempomem.storage.admission import admit_turn
from tempomem.storage.health import audit
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import IntakeCorruptError, RecordState
from tempomem.storage.intake_tidy import check_record, list_quarantined, quarantine_if_corrupt, tidy
from tempomem.storage.ledger import CATALOG_HEADER, CATALOG_SLOT
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.projection import project
from tempomem.storage.turn import AdmissionStatus, CompletedTurn, SkipReason

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def turn(
    run_id: str = "edge-1", answer: str = "The answer mentions the quiet harbour.", **kw
) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id,
        conversation_id="web:edge",
        speaker_kind="human-turn",
        user_text=kw.pop("user_text", "a question"),
        final_answer=answer,
        admitted_at=datetime(2026, 12, 2, 10, 0, tzinfo=UTC),
        **kw,
    )


def admitted(root: Path, run_id: str = "edge-1", **kw) -> tuple[Intake, str]:
    intake = Intake(root)
    result = admit_turn(
        intake,
        turn(run_id, **kw),
        tier="lite",
        write_mode="append-host-summary",
        capture_cron=None,
        capture_webhook=None,
    )
    assert result.status is AdmissionStatus.ADMITTED and result.intake_id is not None
    return intake, result.intake_id


def test_a_resolve_killed_before_its_unlinks_stays_resolved(tmp_path: Path) -> None:
    """Item 2: receipt written, state gone, payload still there (the old unlink order's kill point)."""
    intake, rid = admitted(tmp_path)
    intake.begin_attempt(rid, now=NOW)
    payload = (intake.pending_dir / rid).read_bytes()
    intake.resolve(rid, outcome="success", now=NOW)
    (intake.pending_dir / rid).write_bytes(payload)  # as if the kill landed before the payload unlink
    os.chmod(intake.pending_dir / rid, 0o600)
    assert intake.view(rid, now=NOW).state is RecordState.RESOLVED
    assert intake.due_pending(now=NOW) == [] and intake.counts(now=NOW)["pending"] == 0
    assert f"interrupted resolve: {rid}" in audit(tmp_path, now=NOW).problems
    assert tidy(intake, now=NOW).resolves_finished == 1
    assert not (intake.pending_dir / rid).exists() and audit(tmp_path, now=NOW).problems == []


def test_an_edited_pending_record_is_quarantined_not_curated(tmp_path: Path) -> None:
    """Item 6: the ledger commits the admitted bytes; an edit is seen by health and by the attempt."""
    intake, rid = admitted(tmp_path)
    path = intake.pending_dir / rid
    data = json.loads(path.read_bytes())
    data["summary"] = data["summary"].replace("quiet", "noisy")
    path.write_bytes(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    assert f"record {rid}: payload_changed" in audit(tmp_path, now=NOW).problems
    quarantined = quarantine_if_corrupt(intake, rid, now=NOW)  # what begin_attempt does first
    assert quarantined is not None and quarantined.reason == "payload_changed"
    assert not path.exists() and [q.id for q in list_quarantined(intake)] == [rid]
    report = audit(tmp_path, now=NOW)
    assert report.status == "degraded" and f"quarantined {rid}: payload_changed" in report.problems
    # the same run id is a duplicate (its commitment stands), not a misleading conflict
    again = admit_turn(
        intake, turn(), tier="lite", write_mode="append-host-summary", capture_cron=None, capture_webhook=None
    )
    assert again.status is AdmissionStatus.DUPLICATE


def test_one_corrupt_record_never_stops_the_others(tmp_path: Path) -> None:
    """Item 7: the sweeper lists the good ones, tidy quarantines the bad one, errors quote nothing."""
    intake, bad = admitted(tmp_path, "edge-bad")
    _, good = admitted(tmp_path, "edge-good")
    (intake.pending_dir / bad).write_bytes(b'{"secret memory text": ')
    assert intake.due_pending(now=NOW) == [good]
    with pytest.raises(IntakeCorruptError) as caught:
        intake.resolve(bad, outcome="operator_resolved", now=NOW, reason="gone")
    assert "secret" not in str(caught.value) and caught.value.__cause__ is None
    report = tidy(intake, now=NOW)
    assert [(q.id, q.reason) for q in report.quarantined] == [(bad, "malformed")]
    assert intake.list_ids(RecordState.PENDING) == [good]


def test_turn_validation_errors_never_echo_the_text() -> None:
    with pytest.raises(ValidationError) as caught:
        CompletedTurn(run_id="r", conversation_id="c", final_answer=12345678, admitted_at=NOW)  # type: ignore[arg-type]
    assert "12345678" not in str(caught.value) and "final_answer" in str(caught.value)


def test_health_sees_loose_modes_a_flipped_unused_slot_and_an_edited_receipt(tmp_path: Path) -> None:
    """Item 8."""
    intake, rid = admitted(tmp_path)
    intake.begin_attempt(rid, now=NOW)
    intake.resolve(rid, outcome="success", now=NOW)
    assert audit(tmp_path, now=NOW).problems == []
    os.chmod(intake.pending_dir, 0o755)
    assert "mode: .capture-intake/pending is 755, expected 700" in audit(tmp_path, now=NOW).problems
    os.chmod(intake.pending_dir, 0o700)
    catalog = intake.base / "catalog"
    data = bytearray(catalog.read_bytes())
    unused = next(i for i in range(256) if i != int(rid[:2], 16))
    offset = CATALOG_HEADER.size + unused * CATALOG_SLOT.size + struct.calcsize(">Q")
    original = bytes(data)
    data[offset] ^= 0x01
    catalog.write_bytes(bytes(data))
    assert any("unused but not empty" in p for p in audit(tmp_path, now=NOW).problems)
    catalog.write_bytes(original)
    receipt_path = intake.resolved_dir / f"{rid}.receipt.json"
    receipt = json.loads(receipt_path.read_bytes())
    receipt["payload_sha256"] = "0" * 64
    receipt_path.write_bytes(json.dumps(receipt).encode())
    assert f"receipt {rid}: payload hash differs from the ledger" in audit(tmp_path, now=NOW).problems


def test_temp_files_left_by_kills_are_reported_and_removed(tmp_path: Path) -> None:
    """Item 10: a writer killed between create and rename leaves ``.<name>.tmp-<pid>`` holding text."""
    intake, rid = admitted(tmp_path)
    leftover = intake.pending_dir / f".{rid}.tmp-999999"
    leftover.write_bytes(b"turn text")
    assert (
        f"leftover temp file: .capture-intake/pending/.{rid}.tmp-999999" in audit(tmp_path, now=NOW).problems
    )
    assert tidy(intake, now=NOW).temp_files_removed == 1
    assert not leftover.exists() and audit(tmp_path, now=NOW).problems == []


def test_a_lone_surrogate_is_a_typed_error_naming_the_field(tmp_path: Path) -> None:
    """Item 11: refused at validation, nothing stored."""
    with pytest.raises(ValidationError) as caught:
        turn(answer="broken \udc80 text")
    assert "final_answer" in str(caught.value) and "surrogate" in str(caught.value)
    assert not (tmp_path / ".capture-intake").exists()


def test_control_ansi_and_bidi_never_reach_markdown(tmp_path: Path) -> None:
    intake, rid = admitted(tmp_path, answer="red \x1b[31mALERT\x1b[0m nul\x00 bell\x07 \u202eevil\u202c end")
    project(tmp_path, intake.load_payload(rid))
    [(_, bullet)] = list(iter_bullets(tmp_path, "daily"))
    assert bullet.text == "Assistant: red ALERT nul bell evil end"
    raw = next((tmp_path / "daily").glob("*.md")).read_text()
    assert not any(ch in raw for ch in "\x1b\x00\x07\u202e\u202c")


def test_an_empty_answer_writes_no_bullet(tmp_path: Path) -> None:
    result = admit_turn(
        Intake(tmp_path),
        turn(answer=" \x1b[0m \t"),
        tier="lite",
        write_mode="append-host-summary",
        capture_cron=None,
        capture_webhook=None,
    )
    assert (result.status, result.skip_reason) == (AdmissionStatus.SKIPPED, SkipReason.EMPTY_ANSWER)
    assert not (tmp_path / ".capture-intake").exists()


def test_foreign_files_in_the_record_folders_are_reported_not_read(tmp_path: Path) -> None:
    intake, rid = admitted(tmp_path)
    (intake.pending_dir / "notes.txt").write_text("someone's notes")
    (intake.resolved_dir / "copy.json").write_text("{}")
    problems = audit(tmp_path, now=NOW).problems
    assert "foreign file: .capture-intake/pending/notes.txt" in problems
    assert "foreign file: .capture-intake/resolved/copy.json" in problems
    assert intake.due_pending(now=NOW) == [rid]  # the good record keeps flowing


def test_a_record_that_cannot_be_read_is_unreadable(tmp_path: Path) -> None:
    """A record gone between the listing and the read (or any other read error) is ``unreadable``."""
    intake = Intake(tmp_path / "mem")
    intake.pending_dir.mkdir(parents=True, mode=0o700)
    assert check_record(intake, intake.pending_dir, "0" * 64) == "unreadable"
