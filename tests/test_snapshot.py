"""Runtime snapshots: republished after every transition, content-free, and a failing sink never rolls
back a transition (INTAKE-30..INTAKE-32)."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from tempomem.storage.fsio import atomic_write
from tempomem.storage.intake_records import RecordState
from tempomem.storage.intake_snapshot import IntakeSnapshot
from tempomem.storage.turn import AdmissionStatus, CompletedTurn
from tempomem.store import MemoryStore
from tempomem.worker import run_worker
from tests.conftest import make_config

T0 = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)


def turn(run_id: str) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id, conversation_id="c", final_answer="Marten-Quill-4410 fact.", admitted_at=T0
    )


def broken_sink(_: IntakeSnapshot) -> None:
    raise RuntimeError("sink down")


async def test_admission_republishes_and_a_broken_sink_changes_nothing(tmp_path: Path) -> None:
    seen: list[IntakeSnapshot] = []
    store = MemoryStore(
        make_config(tmp_path / "mem", address="127.0.0.1:1"), snapshot_sinks=[broken_sink, seen.append]
    )
    try:
        result = await store.persist_completed_turn(turn("snap-1"))
        assert result.status is AdmissionStatus.ADMITTED  # INTAKE-32: the broken sink did not roll it back
        assert store.publisher.flush()
        assert seen and (seen[-1].pending, seen[-1].due, seen[-1].dead) == (1, 1, 0)
        on_disk = json.loads((store.root / ".capture-intake" / "snapshot.json").read_text())
        assert on_disk["pending"] == 1 and on_disk["transitions"] >= 1
        assert "Marten" not in json.dumps(on_disk)
        assert store.intake.view(result.intake_id, now=T0).state is RecordState.PENDING
    finally:
        store.close()


async def test_worker_publishes_each_transition_and_its_shutdown(client: Client, tmp_path: Path) -> None:
    store = MemoryStore(make_config(tmp_path / "mem", address="127.0.0.1:1"), first_delay_seconds=1)
    await store.persist_completed_turn(turn("snap-2"))  # Temporal unreachable: the start sweep picks it up
    store.close()
    seen: list[IntakeSnapshot] = []
    stop = asyncio.Event()
    ctx = store.worker_context(client)
    task = asyncio.create_task(
        run_worker(client, ctx, stop=stop, schedule=False, snapshot_sinks=[seen.append])
    )
    for _ in range(300):
        if seen and seen[-1].resolved == 1:
            break
        await asyncio.sleep(0.1)
    stop.set()
    await task
    assert any(s.resolved == 1 and s.pending == 0 for s in seen)
    # begin_attempt and resolve each republish; the last snapshot reports the stop.
    assert max(s.transitions for s in seen) >= 3
    assert seen[-1].shutdown == "stopped"


def test_publisher_counts_every_transition_and_reports_shutdown(tmp_path: Path) -> None:
    """The publisher alone, on a real intake (INTAKE-30/31): exact counts and transition numbers, the
    file owner-only, sinks called in order, a failing sink logged and the next one still served."""
    import stat

    from tempomem.storage.admission import admit_turn
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import FailureCategory
    from tempomem.storage.intake_snapshot import SnapshotPublisher

    intake = Intake(tmp_path / "mem")
    seen: list[IntakeSnapshot] = []
    publisher = SnapshotPublisher(intake, [broken_sink, seen.append])
    try:
        ids = []
        for n in range(3):
            result = admit_turn(
                intake, turn(f"s{n}"), tier="lite", write_mode="append-host-summary",
                capture_cron=None, capture_webhook=None,
            )  # fmt: skip
            ids.append(result.intake_id)
        intake.begin_attempt(ids[0], now=T0)
        intake.dead_letter(ids[1], FailureCategory.LLM_ERROR, now=T0)
        intake.resolve(ids[2], outcome="success", now=T0)
        assert publisher.flush()
        last = seen[-1]
        assert (last.pending, last.due, last.dead, last.resolved) == (1, 1, 1, 1)
        assert last.transitions == publisher.transitions == 6 and last.shutdown == "running"
        path = intake.base / "snapshot.json"
        assert json.loads(path.read_bytes()) == last.model_dump()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert publisher.published >= 1
        publisher.set_shutdown("draining")
        assert publisher.flush()
        assert (seen[-1].shutdown, seen[-1].transitions) == ("draining", 7)
        assert json.loads(path.read_bytes())["shutdown"] == "draining"
    finally:
        publisher.close()


def test_publisher_without_file_and_with_an_uncountable_intake(tmp_path: Path) -> None:
    from tempomem.storage.admission import admit_turn
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_snapshot import SnapshotPublisher

    intake = Intake(tmp_path / "mem")
    seen: list[IntakeSnapshot] = []
    publisher = SnapshotPublisher(intake, [seen.append], write_file=False)
    try:
        admit_turn(
            intake, turn("s1"), tier="lite", write_mode="append-host-summary",
            capture_cron=None, capture_webhook=None,
        )  # fmt: skip
        assert publisher.flush()
        assert [s.pending for s in seen][-1] == 1
        assert not (intake.base / "snapshot.json").exists()
        # A snapshot that cannot be computed is skipped (logged), and the publisher keeps going.
        aside = intake.base / "pending-aside"
        intake.pending_dir.rename(aside)
        intake.pending_dir.write_bytes(b"")  # a file where the folder was: counting fails
        before = len(seen)
        publisher.notify()
        assert publisher.flush()
        assert len(seen) == before
        intake.pending_dir.unlink()
        aside.rename(intake.pending_dir)
        publisher.notify()
        assert publisher.flush() and len(seen) == before + 1
    finally:
        publisher.close()


def test_publisher_logs_only_exception_types_and_counts_each_publish(tmp_path: Path, caplog) -> None:
    """INTAKE-32 and the privacy rule: a failing sink, file or count is logged by exception type only."""
    import logging
    import threading
    from datetime import timedelta

    from tempomem.storage.admission import admit_turn
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import FailureCategory
    from tempomem.storage.intake_snapshot import SnapshotPublisher

    def leaky_sink(_: IntakeSnapshot) -> None:
        raise RuntimeError("Marten-Quill-4410 secret")

    intake = Intake(tmp_path / "mem")
    seen: list[IntakeSnapshot] = []
    publisher = SnapshotPublisher(intake, [leaky_sink, seen.append])
    caplog.set_level(logging.WARNING, logger="tempomem.snapshot")
    try:
        assert publisher.published == 0
        assert any(t.name == "tempomem-snapshot" and t.daemon for t in threading.enumerate())
        result = admit_turn(
            intake, turn("s1"), tier="lite", write_mode="append-host-summary",
            capture_cron=None, capture_webhook=None,
        )  # fmt: skip
        assert publisher.flush() and publisher.published == 1
        intake.begin_attempt(result.intake_id, now=T0)
        intake.record_failure(
            result.intake_id, FailureCategory.LLM_ERROR, retry_in=timedelta(days=365), now=T0
        )
        assert publisher.flush() and publisher.published >= 2
        assert (seen[-1].pending, seen[-1].due) == (1, 0)  # counted against the current time
        (intake.base / "snapshot.json").unlink()
        (intake.base / "snapshot.json").mkdir()  # the file cannot be replaced
        publisher.notify()
        assert publisher.flush()
        (intake.base / "snapshot.json").rmdir()
        aside = intake.base / "pending-aside"
        intake.pending_dir.rename(aside)
        intake.pending_dir.write_bytes(b"")
        publisher.notify()
        assert publisher.flush()
        intake.pending_dir.unlink()
        aside.rename(intake.pending_dir)
    finally:
        publisher.close()
    messages = {r.getMessage() for r in caplog.records if r.name == "tempomem.snapshot"}
    assert messages == {
        "snapshot sink failed (RuntimeError)",
        "snapshot file not written (IsADirectoryError)",
        "snapshot not computed (NotADirectoryError)",
    }
    assert "Marten" not in caplog.text


def test_INTAKE29_the_intake_and_both_downstream_paths_are_bounded_and_observable(
    tmp_path: Path, monkeypatch
) -> None:
    """INTAKE-29: one intake feeds projection (a Lite summary) and curation (a BuJo capture turn). Both
    are bounded by the same active-record capacity (LIM-05, shrunk here to 2) and the same 16-attempt
    budget (LIM-01), and both are observable in the content-free snapshot (INTAKE-30)."""
    import pytest

    from tempomem.storage import intake as intake_module
    from tempomem.storage.admission import admit_turn
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import FailureCategory, IntakeCapacityError
    from tempomem.storage.intake_snapshot import SnapshotPublisher
    from tempomem.storage.limits import RETRY_MAX_ATTEMPTS, retry_delay_seconds

    monkeypatch.setattr(intake_module, "MAX_ACTIVE_RECORDS", 2)
    intake = Intake(tmp_path / "mem")
    seen: list[IntakeSnapshot] = []
    publisher = SnapshotPublisher(intake, [seen.append], write_file=False)
    try:
        summary = admit_turn(intake, turn("projection"), tier="lite", write_mode="append-host-summary")
        capture = admit_turn(
            intake,
            CompletedTurn(
                run_id="curation", conversation_id="c", final_answer="Noted.", admitted_at=T0,
                speaker_kind="human-turn", user_text="I moved to Porto.",
            ),
            tier="bujo",
            write_mode="capture",
        )  # fmt: skip
        assert (summary.status, capture.status) == (AdmissionStatus.ADMITTED, AdmissionStatus.ADMITTED)
        assert intake.load_payload(capture.intake_id).capture_user_text == "I moved to Porto."
        for write_mode, tier in (("append-host-summary", "lite"), ("capture", "bujo")):
            with pytest.raises(IntakeCapacityError):  # the bound holds whichever path a turn would take
                admit_turn(intake, turn(f"over-{tier}"), tier=tier, write_mode=write_mode)
        assert retry_delay_seconds(RETRY_MAX_ATTEMPTS) > 0
        with pytest.raises(ValueError):  # no attempt after the budget, on either path
            retry_delay_seconds(RETRY_MAX_ATTEMPTS + 1)
        intake.begin_attempt(capture.intake_id, now=T0)
        assert publisher.flush() and (seen[-1].pending, seen[-1].due, seen[-1].dead) == (2, 2, 0)
        intake.resolve(summary.intake_id, outcome="success", now=T0)
        intake.dead_letter(capture.intake_id, FailureCategory.LLM_ERROR, now=T0)
        assert publisher.flush()
        last = seen[-1]
        assert (last.pending, last.dead, last.resolved) == (0, 1, 1)
        assert "Porto" not in last.model_dump_json() and "Noted" not in last.model_dump_json()
    finally:
        publisher.close()


def test_a_failing_transition_callback_is_logged_by_name_only(tmp_path: Path, caplog) -> None:
    """INTAKE-32: the intake's own notification hook fails; the admission stands and one content-free
    warning names what failed."""
    import logging

    from tempomem.storage.admission import admit_turn
    from tempomem.storage.intake import Intake

    def hook() -> None:
        raise RuntimeError("Marten-Quill-4410 secret")

    intake = Intake(tmp_path / "mem")
    caplog.set_level(logging.WARNING, logger="tempomem.intake")
    admit_turn(intake, turn("h0"), tier="lite", write_mode="append-host-summary")
    assert caplog.records == []  # no hook: nothing to notify, nothing logged
    intake.on_transition = hook
    result = admit_turn(intake, turn("h1"), tier="lite", write_mode="append-host-summary")
    assert result.status is AdmissionStatus.ADMITTED
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("tempomem.intake", "transition notification failed")
    ]


class _HeldSnapshotFsync:
    """Holds the snapshot writer's fsync of its temp file until released, so a test can act while the
    temp file exists (a real file on disk; only the moment is chosen)."""

    def __init__(self, monkeypatch) -> None:
        import threading

        self.reached, self.release = threading.Event(), threading.Event()
        self._names: dict[int, str] = {}
        real_open, real_fsync = os.open, os.fsync

        def open_(path, flags, *args, **kw):
            fd = real_open(path, flags, *args, **kw)
            self._names[fd] = os.fspath(path)
            return fd

        def fsync(fd: int) -> None:
            if Path(self._names.get(fd, "")).name.startswith(".snapshot.json.tmp-"):
                self.reached.set()
                assert self.release.wait(10)
            real_fsync(fd)

        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "fsync", fsync)


def test_the_intake_tidy_waits_for_this_process_snapshot_write(tmp_path: Path, monkeypatch) -> None:
    """A worker starting beside the host's Store (one process) tidied the intake while the Store's
    publisher was writing: the tidy removed the live temp file, the write failed (FileNotFoundError)
    and the snapshot stayed stale. The tidy now waits for a writer of this process."""
    import threading
    import time

    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_tidy import tidy

    intake = Intake(tmp_path / "mem")
    intake.ensure_layout()
    held = _HeldSnapshotFsync(monkeypatch)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            atomic_write(intake.base / "snapshot.json", b'{"pending": 0}')
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    assert held.reached.wait(10)
    reports = []
    tidier = threading.Thread(target=lambda: reports.append(tidy(intake, now=T0)))
    tidier.start()
    time.sleep(0.3)  # time enough for the tidy to reach the temp file
    held.release.set()
    writer.join(10)
    tidier.join(10)
    assert errors == []
    assert (intake.base / "snapshot.json").read_bytes() == b'{"pending": 0}'
    assert reports[0].temp_files_removed == 0  # it was renamed, not left over


def test_a_snapshot_write_whose_temp_file_another_process_removed_is_written_again(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """Another process's tidy does not know this process's writer: it may remove the temp file
    mid-write. The publisher writes the file again instead of leaving the last snapshot stale."""
    import logging

    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_snapshot import SnapshotPublisher

    intake = Intake(tmp_path / "mem")
    intake.ensure_layout()
    caplog.set_level(logging.WARNING, logger="tempomem.snapshot")
    held = _HeldSnapshotFsync(monkeypatch)
    publisher = SnapshotPublisher(intake, [])
    try:
        publisher.set_shutdown("draining")
        assert held.reached.wait(10)
        [temp] = [p for p in intake.base.iterdir() if p.name.startswith(".snapshot.json.tmp-")]
        temp.unlink()  # what the other process's tidy does
        held.release.set()
        assert publisher.flush()
    finally:
        publisher.close()
    assert json.loads((intake.base / "snapshot.json").read_bytes())["shutdown"] == "draining"
    assert "snapshot file not written" not in caplog.text
