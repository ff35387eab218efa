"""``health`` and ``tidy`` on stores put into each state by hand (CLI-13, INTAKE-31, RPL-10, issue #13):
the status precedence (degraded > canonical_mismatch > dead_letters_present > in_progress > ok), exact
counts, and the exact content-free line each problem gets; then what one ``tidy`` repairs, counted."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tempomem.storage import replay_sidecar
from tempomem.storage.admission import admit_turn
from tempomem.storage.health import audit
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import FailureCategory, RecordState
from tempomem.storage.intake_tidy import list_quarantined, quarantine_if_corrupt, tidy
from tempomem.storage.projection import project
from tempomem.storage.turn import CompletedTurn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)


def admit(intake: Intake, run_id: str) -> str:
    turn = CompletedTurn(
        run_id=run_id, conversation_id="web:c", speaker_kind="human-turn", user_text="q",
        final_answer=f"Fact number {run_id}.", admitted_at=T0,
    )  # fmt: skip
    result = admit_turn(
        intake, turn, tier="lite", write_mode="append-host-summary", capture_cron=None, capture_webhook=None
    )
    assert result.intake_id is not None
    return result.intake_id


def edge(kind: str, from_: str, to: str, authority: str = "capture") -> dict:
    """A replay sidecar entry (RPL-01) as the commit or a migration writes it."""
    entry = {
        "id": replay_sidecar.entry_id(kind, from_, to),
        "kind": kind,
        "from": from_,
        "to": to,
        "at": "2026-12-01T09:00:00.000Z",
        "authority": {
            "kind": authority,
            "digest": replay_sidecar.authority_digest(authority, "x", from_, to),
        },
    }
    if kind == "thread":
        entry["weight"] = 1
    return entry


def line(root: Path, bullet_id: str) -> None:
    from tempomem.storage.markdown import Bullet, append_bullets

    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    b = Bullet(signifier="–", text="A line.", id=bullet_id, type="fact", status="open",
               recorded="2026-12-01T09:00:00.000Z")  # fmt: skip
    append_bullets(root / "daily" / "2026-12-01.md", "2026-12-01", [b])


@pytest.fixture
def intake(tmp_path: Path) -> Intake:
    return Intake(tmp_path / "mem")


def report(intake: Intake) -> tuple[str, dict[str, int], list[str], list[str]]:
    r = audit(intake.root, now=LATER)
    return r.status, r.counts, r.problems, r.mismatches


def test_a_store_without_an_intake_is_ok_and_has_no_ledger(tmp_path: Path) -> None:
    (tmp_path / "mem").mkdir(mode=0o700)
    r = audit(tmp_path / "mem", now=T0)
    assert (r.status, r.counts, r.ledger_entries, r.problems, r.mismatches) == (
        "ok", {"pending": 0, "due": 0, "dead": 0, "resolved": 0}, None, [], [],
    )  # fmt: skip


def test_status_precedence_from_in_progress_to_degraded(intake: Intake) -> None:
    a, b, c = admit(intake, "a"), admit(intake, "b"), admit(intake, "c")
    assert audit(intake.root, now=LATER).ledger_entries == 3
    assert report(intake) == ("in_progress", {"pending": 3, "due": 3, "dead": 0, "resolved": 0}, [], [])
    intake.begin_attempt(b, now=T0)
    intake.record_failure(b, FailureCategory.LLM_ERROR, retry_in=timedelta(days=1), now=T0)
    assert report(intake)[1] == {"pending": 3, "due": 2, "dead": 0, "resolved": 0}
    intake.resolve(c, outcome="success", now=T0)
    intake.dead_letter(a, FailureCategory.LLM_ERROR, now=T0)
    assert report(intake) == (
        "dead_letters_present",
        {"pending": 1, "due": 0, "dead": 1, "resolved": 1},
        [],
        [],
    )
    intake.resolve(b, outcome="success", now=T0)
    intake.resolve(a, outcome="success", now=T0)
    assert report(intake) == ("ok", {"pending": 0, "due": 0, "dead": 0, "resolved": 3}, [], [])

    # A replay edge naming a line that is not in the Markdown: canonical_mismatch (RPL-10).
    intake.root.joinpath("daily").mkdir(mode=0o700)
    replay_sidecar.apply_delta(intake.root, [edge("supersede", "c-gone", "c-new")])
    entry = replay_sidecar.load(intake.root).entries[0]
    status, _, problems, mismatches = report(intake)
    assert (status, problems) == ("canonical_mismatch", [])
    assert mismatches == [f"supersede {entry.id}: no canonical line c-gone, c-new"]

    # Any problem outranks a mismatch.
    intake.pending_dir.chmod(0o755)
    status, _, problems, _ = report(intake)
    assert (status, problems) == ("degraded", ["mode: .capture-intake/pending is 755, expected 700"])
    intake.pending_dir.chmod(0o700)
    intake.root.chmod(0o750)
    assert report(intake)[2] == ["mode: . is 750, expected 700"]
    intake.root.chmod(0o700)


def test_each_problem_has_its_own_line(intake: Intake) -> None:
    good, edited, other = admit(intake, "good"), admit(intake, "edited"), admit(intake, "other")
    intake.resolve(other, outcome="success", now=T0)
    # An edited record (the ledger committed other bytes), a leftover temp file, a foreign file, an
    # orphan state file, an interrupted resolve, a receipt whose hash disagrees with the ledger.
    path = intake.pending_dir / edited
    data = json.loads(path.read_bytes())
    data["summary"] = "Fact number changed."
    path.write_bytes(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    (intake.pending_dir / ".x.tmp-123").write_bytes(b"")
    (intake.pending_dir / "notes.txt").write_bytes(b"")
    orphan = "e" * 64
    (intake.dead_dir / f"{orphan}.state.json").write_bytes(b"{}")
    receipt = intake.resolved_dir / f"{other}.receipt.json"
    stale = intake.pending_dir / f"{other}.state.json"
    stale.write_bytes(b"{}")
    forged = json.loads(receipt.read_bytes())
    forged["payload_sha256"] = "0" * 64
    receipt.write_bytes(json.dumps(forged).encode())
    status, counts, problems, _ = report(intake)
    assert status == "degraded"
    assert counts == {"pending": 1, "due": 1, "dead": 0, "resolved": 1}  # only the good record counts
    assert problems == [
        f"record {edited}: payload_changed",
        "leftover temp file: .capture-intake/pending/.x.tmp-123",
        f"interrupted resolve: {other}",
        f"orphan file: .capture-intake/dead/{orphan}.state.json",
        "foreign file: .capture-intake/pending/notes.txt",
        f"receipt {other}: payload hash differs from the ledger",
    ]
    receipt.write_bytes(b"{broken")
    assert f"receipt {other}: IntakeCorruptError" in report(intake)[2]
    assert good in intake.due_pending(now=LATER)


def test_damaged_bullets_and_a_broken_sidecar_are_reported(intake: Intake) -> None:
    record = admit(intake, "a")
    project(intake.root, intake.load_payload(record))
    day = intake.root / "daily" / "2026-12-01.md"
    day.write_text(day.read_text() + "- broken line <!--mem id=?? -->\n")
    replay_sidecar.sidecar_path(intake.root).write_bytes(b"{not json")
    problems = report(intake)[2]
    assert problems[0] == f"damaged bullet: daily/2026-12-01.md:{len(day.read_text().splitlines())}"
    assert len(problems) == 2 and problems[1].startswith("sidecar: ")


def test_tidy_repairs_what_kills_leave_and_quarantines_what_it_cannot_trust(intake: Intake) -> None:
    assert tidy(Intake(intake.root / "missing"), now=T0).model_dump()["temp_files_removed"] == 0
    keep, bad, done = admit(intake, "keep"), admit(intake, "bad"), admit(intake, "done")
    intake.resolve(done, outcome="success", now=T0)
    (intake.pending_dir / f"{done}.state.json").write_bytes(b"{}")  # a resolve killed before its unlinks
    (intake.pending_dir / f"{done}.plan.json").write_bytes(b"{}")
    (intake.pending_dir / ".y.tmp-9").write_bytes(b"")
    (intake.resolved_dir / ".z.tmp-9").write_bytes(b"")
    (intake.pending_dir / f"{'f' * 64}.plan.json").write_bytes(b"{}")  # orphan
    (intake.pending_dir / bad).write_bytes(b"not a record")
    result = tidy(intake, now=LATER)
    assert (result.temp_files_removed, result.resolves_finished, result.orphans_removed) == (2, 1, 1)
    assert result.commitments_finished == 0
    assert [(q.id, q.reason, q.at) for q in result.quarantined] == [
        (bad, "malformed", "2026-12-01T10:00:00.000Z")
    ]
    assert sorted(os.listdir(intake.pending_dir)) == [keep]
    assert sorted(os.listdir(intake.base / "quarantine")) == sorted([bad, f"{bad}.reason.json"])
    assert [q.id for q in list_quarantined(intake)] == [bad]
    _, counts, problems, _ = report(intake)
    assert problems == [f"quarantined {bad}: malformed"]
    assert counts == {"pending": 1, "due": 1, "dead": 0, "resolved": 1}
    again = tidy(intake, now=LATER)
    assert again.model_dump() == {
        "temp_files_removed": 0, "resolves_finished": 0, "orphans_removed": 0,
        "commitments_finished": 0, "quarantined": [],
    }  # fmt: skip


def test_quarantine_if_corrupt_moves_state_and_plan_with_the_record(intake: Intake) -> None:
    record = admit(intake, "a")
    assert quarantine_if_corrupt(intake, record, now=T0) is None  # a good record stays
    intake.begin_attempt(record, now=T0)
    intake.save_plan(record, b"{}", now=T0)
    (intake.pending_dir / f"{record}.state.json").write_bytes(b"[]")
    entry = quarantine_if_corrupt(intake, record, now=T0)
    assert entry is not None and (entry.id, entry.reason) == (record, "state_malformed")
    assert os.listdir(intake.pending_dir) == []
    assert sorted(os.listdir(intake.base / "quarantine")) == sorted(
        [record, f"{record}.state.json", f"{record}.plan.json", f"{record}.reason.json"]
    )
    (intake.base / "quarantine" / f"{record}.reason.json").write_bytes(b"garbage")
    assert [(q.id, q.reason, q.at) for q in list_quarantined(intake)] == [(record, "unknown", "")]


def record_without_ledger_entry(intake: Intake, run_id: str) -> str:
    """What a SIGKILL between the record write and its ledger append leaves (INTAKE-22)."""
    from tempomem.storage.fsio import atomic_write
    from tempomem.storage.intake_records import build_payload, canonical_json

    turn = CompletedTurn(
        run_id=run_id, conversation_id="web:c", final_answer=f"Fact {run_id}.", admitted_at=T0
    )
    payload = build_payload(turn, write_mode="append-host-summary", tier="lite")
    intake.ensure_layout()
    atomic_write(intake.pending_dir / payload.id, canonical_json(payload.model_dump()))
    return payload.id


def test_tidy_finishes_each_interrupted_commitment_and_every_bad_record(intake: Intake) -> None:
    from tempomem.storage.intake_tidy import check_record

    first, second = record_without_ledger_entry(intake, "k1"), record_without_ledger_entry(intake, "k2")
    assert audit(intake.root, now=LATER).ledger_entries == 0
    # Two untrustworthy records, whichever sorts first: tidy goes on past each.
    bad = sorted([admit(intake, "b1"), admit(intake, "b2")])
    for record in bad:
        (intake.pending_dir / record).chmod(0o644)
    assert [check_record(intake, intake.pending_dir, r) for r in bad] == ["unsafe_file", "unsafe_file"]
    result = tidy(intake, now=LATER)
    assert result.commitments_finished == 2
    assert sorted(q.id for q in result.quarantined) == bad
    assert audit(intake.root, now=LATER).ledger_entries == 4  # two finished + the two admitted ones
    assert intake.list_ids(RecordState.PENDING) == sorted([first, second])
    assert tidy(intake, now=LATER).commitments_finished == 0


def test_check_record_names_each_reason(intake: Intake) -> None:
    from tempomem.storage.intake_tidy import check_record
    from tempomem.storage.limits import MAX_RECORD_BYTES

    a, b = admit(intake, "a"), admit(intake, "b")
    folder = intake.pending_dir
    assert check_record(intake, folder, a) is None
    original = (folder / a).read_bytes()
    (folder / a).write_bytes((folder / b).read_bytes())  # a valid record under another record's name
    assert check_record(intake, folder, a) == "wrong_id"
    (folder / a).write_bytes(original + b" " * MAX_RECORD_BYTES)  # larger than any record may be
    assert check_record(intake, folder, a) == "unsafe_file"
    (folder / a).write_bytes(original)
    os.link(folder / a, intake.root / "extra-link")
    assert check_record(intake, folder, a) == "unsafe_file"  # a second name for the record
    os.unlink(intake.root / "extra-link")
    assert check_record(intake, folder, a) is None
    state = folder / f"{a}.state.json"
    intake.begin_attempt(a, now=T0)
    state.chmod(0o644)
    assert check_record(intake, folder, a) == "state_malformed"
    state.chmod(0o600)
    state.write_bytes(state.read_bytes() + b" " * MAX_RECORD_BYTES)
    assert check_record(intake, folder, a) == "state_malformed"


def test_a_leftover_temp_file_in_the_ledger_folder_is_found_and_removed(intake: Intake) -> None:
    admit(intake, "a")
    leftover = intake.base / "ledger" / ".shard-00.tmp-77"
    leftover.write_bytes(b"")
    assert report(intake)[2] == ["leftover temp file: .capture-intake/ledger/.shard-00.tmp-77"]
    assert tidy(intake, now=LATER).temp_files_removed == 1
    assert not leftover.exists()


def uncatalogued(intake: Intake, run_id: str) -> str:
    """A record whose ledger append was fsynced but whose catalog commit was not (a kill in between)."""
    from tempomem.storage.ledger import entry_bytes, shard_index

    record = record_without_ledger_entry(intake, run_id)
    digest = __import__("hashlib").sha256((intake.pending_dir / record).read_bytes()).hexdigest()
    shard = intake.base / "ledger" / f"shard-{shard_index(record):02x}"
    fd = os.open(shard, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, entry_bytes(record, digest))
    finally:
        os.close(fd)
    return record


def test_health_accepts_an_append_its_record_vouches_for_and_reports_a_corrupt_ledger(tmp_path: Path) -> None:
    vouched = Intake(tmp_path / "one")
    admit(vouched, "first")  # creates the ledger and its catalog
    uncatalogued(vouched, "second")
    r = audit(vouched.root, now=LATER)
    assert (r.status, r.ledger_entries, r.problems) == ("in_progress", 2, [])
    # An uncatalogued entry that no record vouches for fails closed: health says so, for the ledger and
    # for each record whose check needs the ledger.
    bare = Intake(tmp_path / "two")
    admit(bare, "first")
    record = uncatalogued(bare, "second")
    (bare.pending_dir / record).unlink()
    r = audit(bare.root, now=LATER)
    assert r.status == "degraded" and r.ledger_entries is None
    assert r.problems[0].startswith("ledger: ledger shard ")
    assert r.problems[0].endswith("has an uncatalogued entry without an exact intake receipt")


def test_a_file_in_place_of_the_ledger_folder_is_reported_not_raised(intake: Intake) -> None:
    """Health over a hand-made mess: a file where the ledger folder belongs is a named problem (before,
    a raw NotADirectoryError escaped health, admission and tidy)."""
    intake.ensure_layout()
    (intake.base / "ledger").touch(mode=0o600)
    status, _, problems, _ = report(intake)
    assert status == "degraded" and "ledger: ledger folder is not a directory" in problems


def test_every_bad_receipt_is_reported_and_every_folder_mode_checked(intake: Intake) -> None:
    records = [admit(intake, f"r{i}") for i in range(2)]
    for record in records:
        intake.resolve(record, outcome="success", now=T0)
        (intake.resolved_dir / f"{record}.receipt.json").write_bytes(b"{broken")
    intake.dead_dir.rmdir()  # a folder that is missing is skipped, the ones after it still checked
    intake.resolved_dir.chmod(0o755)
    problems = report(intake)[2]
    assert sorted(p for p in problems if p.startswith("receipt ")) == sorted(
        f"receipt {r}: IntakeCorruptError" for r in records
    )
    assert "mode: .capture-intake/resolved is 755, expected 700" in problems


def test_sidecar_ends_checked_by_kind(intake: Intake) -> None:
    line(intake.root, "c-0001")
    replay_sidecar.apply_delta(intake.root, [edge("thread", "c-0001", "c-gone")])
    [entry] = replay_sidecar.load(intake.root).entries
    assert report(intake)[3] == [f"thread {entry.id}: no canonical line c-gone"]


def same_shard_run_id(record: str) -> str:
    from tempomem.storage.intake_records import intake_id

    return next(f"s{i}" for i in range(100_000) if intake_id(f"s{i}")[:2] == record[:2])


def unvouched_entry_beside(intake: Intake, record: str) -> None:
    """An uncatalogued ledger append in ``record``'s shard that no record or receipt vouches for."""
    from tempomem.storage.intake_records import intake_id
    from tempomem.storage.ledger import entry_bytes, shard_index

    other = intake_id(same_shard_run_id(record))
    shard = intake.base / "ledger" / f"shard-{shard_index(record):02x}"
    fd = os.open(shard, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, entry_bytes(other, "0" * 64))
    finally:
        os.close(fd)


def test_a_record_or_receipt_whose_shard_fails_is_reported_by_id_and_nothing_is_rewritten(
    intake: Intake,
) -> None:
    pending, resolved = admit(intake, "p"), admit(intake, "q")
    intake.resolve(resolved, outcome="success", now=T0)
    unvouched_entry_beside(intake, pending)
    unvouched_entry_beside(intake, resolved)
    catalog = (intake.base / "catalog").read_bytes()
    r = audit(intake.root, now=LATER)
    assert r.status == "degraded"
    assert f"record {pending}: LedgerIntegrityError" in r.problems
    assert f"receipt {resolved}: LedgerIntegrityError" in r.problems
    assert r.counts["pending"] == 0  # a record that cannot be checked is not counted as work
    assert (intake.base / "catalog").read_bytes() == catalog  # health vouched for nothing


def test_terminal_entries_need_only_their_line(intake: Intake) -> None:
    line(intake.root, "c-0001")
    replay_sidecar.apply_delta(intake.root, [edge("terminal", "c-0001", "forgotten", authority="migration")])
    assert report(intake)[3] == []
