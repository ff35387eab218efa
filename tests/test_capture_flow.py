"""End to end on a real Temporal dev server: admit → CaptureWorkflow → Markdown → index → recall.

Covers INTAKE-01/03/06/12, TIER-01/03/06/07/10, PROV-05 and the ARCHITECTURE rule that memory text never
enters Temporal history.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tempomem.messages.capture import CaptureOutcome
from tempomem.storage.intake_records import RecordState
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import AdmissionResult, AdmissionStatus, CompletedTurn
from tempomem.store import START_TIMEOUT_SECONDS
from tests.conftest import make_store, running_worker

T0 = datetime(2026, 12, 3, 9, 30, 15, 123000, tzinfo=UTC)
REPO = Path(__file__).resolve().parent.parent


def turn(run_id: str, answer: str, **kw: object) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id,
        conversation_id=str(kw.pop("conversation_id", "web:thread-7")),
        speaker_kind="human-turn",
        user_text=str(kw.pop("user_text", "tell me")),
        final_answer=answer,
        admitted_at=kw.pop("admitted_at", T0),  # type: ignore[arg-type]
    )


async def when_found(call, timeout: float = 60):
    """Await ``call()`` until Temporal stops answering NOT_FOUND (the worker may not have started it yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def outcome_of(client: Client, admitted: AdmissionResult, timeout: float = 60) -> CaptureOutcome:
    """The CaptureWorkflow result of one admission (its workflow id carries the store id, #13)."""
    assert admitted.workflow_id is not None
    handle = client.get_workflow_handle(admitted.workflow_id, result_type=CaptureOutcome)
    await when_found(handle.describe, timeout)
    return await asyncio.wait_for(handle.result(), timeout)


async def wait_until(predicate, timeout: float = 60, step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(step)


async def test_lite_turn_is_projected_indexed_and_resolved(client: Client, tmp_path: Path) -> None:
    """WM-03: append-host-summary admits one deterministic host observation and projects it, no model;
    INTAKE-08: the line carries the host's admission instant."""
    store = make_store(tmp_path / "mem", client, mode="lite")
    result = await store.persist_completed_turn(
        turn("lite-1", "Your dentist appointment is on Friday at 3pm.")
    )
    assert result.status is AdmissionStatus.ADMITTED and result.workflow_started
    async with running_worker(client, store):
        outcome = await outcome_of(client, result)
    assert (outcome.state, outcome.attempts, outcome.lines_added) == ("resolved", 1, 1)
    bullets = list(iter_bullets(store.root, "daily"))
    assert len(bullets) == 1
    day, bullet = bullets[0]
    assert day == "2026-12-03" and bullet.recorded == "2026-12-03T09:30:15.123Z"
    assert bullet.source_session == "web:thread-7"  # PROV-05
    assert not (store.root / "graph.jsonl").exists()  # GRAPH-04: Lite and Journal never build a graph
    assert bullet.text == "Assistant: Your dentist appointment is on Friday at 3pm."
    hits = store.search("dentist appointment")
    assert [h.id for h in hits][:1] == [bullet.id]
    assert store.intake.view(result.intake_id, now=T0).state is RecordState.RESOLVED


async def test_history_contains_no_memory_text(client: Client, tmp_path: Path) -> None:
    secret_answer = "Zanzibar-Quokka-7731 is the codename of your garden project."
    secret_user = "Whisper-Marmot-5519"
    store = make_store(tmp_path / "mem", client, mode="journal")
    result = await store.persist_completed_turn(turn("hist-1", secret_answer, user_text=secret_user))
    async with running_worker(client, store):
        assert (await outcome_of(client, result)).state == "resolved"
    history = await client.get_workflow_handle(result.workflow_id).fetch_history()
    raw = json.dumps(history.to_json_dict())
    decoded = [base64.b64decode(d).decode("utf-8", "replace") for d in _payload_data(history.to_json_dict())]
    assert decoded, "the history must carry payloads for this check to mean anything"
    assert any(result.intake_id in d for d in decoded)  # the id is there, proving payloads were decoded
    for needle in ("Zanzibar", "Quokka", "Marmot", "garden project", "web:thread-7"):
        assert needle not in raw
        assert all(needle not in d for d in decoded)
    # And the recall side did get it: the text lives on disk only.
    assert store.search("garden project codename")[0].text.endswith(secret_answer)


def _payload_data(node: object) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_payload_data(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_payload_data(item))
    return found


async def test_temporal_unreachable_at_admission_then_swept(client: Client, tmp_path: Path) -> None:
    """INTAKE-12: projection runs after the reply and resumes from the durable record."""
    # Port 1 on loopback: nothing listens there, so the start attempt fails.
    offline = make_store(tmp_path / "mem", None, mode="lite", address="127.0.0.1:1")
    started = time.monotonic()
    result = await offline.persist_completed_turn(turn("offline-1", "The boiler was serviced on 2026-11-20."))
    elapsed = time.monotonic() - started
    assert result.status is AdmissionStatus.ADMITTED and not result.workflow_started
    assert result.warning and "pending" in result.warning
    assert elapsed < START_TIMEOUT_SECONDS + 1.0  # INTAKE-06: bounded
    assert offline.intake.view(result.intake_id, now=T0).state is RecordState.PENDING
    # The worker's start sweep finds the pending record and starts its workflow.
    online = make_store(tmp_path / "mem", client, mode="lite")
    async with running_worker(client, online):
        outcome = await outcome_of(client, result)
    assert outcome.state == "resolved"
    assert [b.text for _, b in iter_bullets(online.root)] == [
        "Assistant: The boiler was serviced on 2026-11-20."
    ]


async def test_duplicate_admission_after_resolution_adds_nothing(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    t = turn("dup-1", "Your passport expires in June 2028.")
    first = await store.persist_completed_turn(t)
    async with running_worker(client, store):
        await outcome_of(client, first)
        second = await store.persist_completed_turn(t)
    assert second.status is AdmissionStatus.DUPLICATE and not second.workflow_started
    assert len(list(iter_bullets(store.root))) == 1


async def test_journal_repeated_content_converges_on_one_identity(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="journal")
    a = await store.persist_completed_turn(turn("j-1", "Your  Wi-Fi password hint is the cat's name."))
    b = await store.persist_completed_turn(turn("j-2", "Your Wi-Fi password hint is the cat's name."))
    assert a.intake_id != b.intake_id
    async with running_worker(client, store):
        assert (await outcome_of(client, a)).state == "resolved"
        assert (await outcome_of(client, b)).state == "resolved"
    bullets = [bl for _, bl in iter_bullets(store.root)]
    assert len(bullets) == 1 and bullets[0].id.startswith("j-")  # TIER-03, TIER-06
    assert store.search("wifi password hint")[0].id == bullets[0].id


async def test_bujo_host_summary_goes_to_audit_only(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="bujo")
    result = await store.persist_completed_turn(turn("b-1", "The quarterly report is due on the 15th."))
    async with running_worker(client, store):
        outcome = await outcome_of(client, result)
    assert outcome.state == "resolved"
    assert list(iter_bullets(store.root, "daily")) == []  # TIER-07, TIER-08
    audit = list(iter_bullets(store.root, "audit"))
    assert [b.text for _, b in audit] == ["Assistant: The quarterly report is due on the 15th."]
    assert store.search("quarterly report") == []  # audit lines are never indexed


async def test_skipped_turn_writes_nothing(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    result = await store.persist_completed_turn(turn("s-1", "All quiet.\nNOTHING_TO_REPORT"))
    assert result.status is AdmissionStatus.SKIPPED and result.intake_id is None
    assert not (store.root / ".capture-intake").exists() or not any(
        (store.root / ".capture-intake" / "pending").iterdir()
    )


async def test_worker_killed_mid_settle_recovers_exactly_once(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    entered = tmp_path / "entered"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    address = client.service_client.config.target_host
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.slow_worker",
            str(store.root),
            address,
            store.task_queue,
            str(entered),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
        result = await store.persist_completed_turn(
            turn("kill-1", "Your bike lock code is stored in the safe.")
        )
        await wait_until(entered.exists)
        assert store.intake.view(result.intake_id, now=T0).attempts == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert list(iter_bullets(store.root)) == []  # killed before any write
    async with running_worker(client, store):
        outcome = await outcome_of(client, result, timeout=90)
    # Attempt 1 died with the worker (heartbeat timeout), attempt 2 ran on the new worker.
    assert (outcome.state, outcome.attempts) == ("resolved", 2)
    assert len(list(iter_bullets(store.root))) == 1


async def test_sweep_schedule_starts_records_admitted_while_temporal_was_away(
    client: Client, tmp_path: Path
) -> None:
    from tempomem.worker import schedule_id

    store = make_store(tmp_path / "mem", client, mode="lite")
    offline = make_store(tmp_path / "mem", None, mode="lite", address="127.0.0.1:1")
    async with running_worker(client, store, schedule=True):
        schedule = client.get_schedule_handle(schedule_id(store.store_id))
        try:
            description = await when_found(schedule.describe)
            assert description.schedule.spec.intervals[0].every.total_seconds() == 60
            # Admitted after the worker's start sweep, with Temporal unreachable: no workflow exists yet.
            result = await offline.persist_completed_turn(turn("sched-1", "The car's MOT is due in April."))
            assert not result.workflow_started
            await schedule.trigger()  # what the schedule does every minute
            outcome = await outcome_of(client, result)
        finally:
            await schedule.delete()
    assert outcome.state == "resolved"
    assert [b.text for _, b in iter_bullets(store.root)] == ["Assistant: The car's MOT is due in April."]


async def test_workflow_is_observable_in_the_ui_without_content(client: Client, tmp_path: Path) -> None:
    from tempomem.messages import search_attributes as sa
    from tempomem.messages.capture import CaptureStatus

    store = make_store(tmp_path / "mem", client, mode="journal")
    result = await store.persist_completed_turn(turn("ui-1", "Heron-Paddle-8812 is where the spare key is."))
    handle = client.get_workflow_handle(result.workflow_id, result_type=CaptureOutcome)
    async with running_worker(client, store):
        await outcome_of(client, result)
        status = await handle.query("status", result_type=CaptureStatus)
    assert (status.state, status.attempt, status.stage) == ("resolved", 1, "resolve")
    description = await handle.describe()
    attrs = description.typed_search_attributes
    assert attrs.get(sa.STORE_ID) == store.store_id
    assert (attrs.get(sa.TIER), attrs.get(sa.WRITE_MODE)) == ("journal", "append-host-summary")
    assert (attrs.get(sa.STATE), attrs.get(sa.ATTEMPT)) == ("resolved", 1)
    summary = await description.static_summary()
    assert summary and "journal" in summary and "Heron" not in summary
    # The UI's list filter finds it by store and state.
    query = f"TempomemStoreId = '{store.store_id}' AND TempomemState = 'resolved'"
    found = [w.id async for w in client.list_workflows(query)]
    # Visibility is eventually consistent: poll briefly.
    for _ in range(50):
        if found:
            break
        await asyncio.sleep(0.2)
        found = [w.id async for w in client.list_workflows(query)]
    assert found == [result.workflow_id]


async def test_two_stores_that_admit_the_same_run_id_are_both_curated(client: Client, tmp_path: Path) -> None:
    """#13 item 3: workflow ids carry the store's stable id, so the same run id in two stores of one
    namespace never collides (it used to: the second was not curated while the first was open, and
    admission still said it had started a workflow)."""
    first = make_store(tmp_path / "a", client, mode="lite")
    second = make_store(tmp_path / "b", client, mode="lite")
    one = await first.persist_completed_turn(turn("shared-run", "Store A keeps the blue kayak."))
    two = await second.persist_completed_turn(turn("shared-run", "Store B keeps the red canoe."))
    assert one.intake_id == two.intake_id and one.workflow_id != two.workflow_id
    assert one.workflow_started and two.workflow_started
    async with running_worker(client, first), running_worker(client, second):
        assert (await outcome_of(client, one)).state == "resolved"
        assert (await outcome_of(client, two)).state == "resolved"
    assert "kayak" in first.search("kayak")[0].text and "canoe" in second.search("canoe")[0].text


async def test_a_moved_store_keeps_its_id_and_task_queue(client: Client, tmp_path: Path) -> None:
    """The id is written into the store at creation, so a move or restore keeps naming the same store."""
    import shutil

    store = make_store(tmp_path / "here", client, mode="lite")
    admitted = await store.persist_completed_turn(turn("moving-1", "The atlas is on the top shelf."))
    before = (store.store_id, store.task_queue, admitted.workflow_id)
    shutil.move(tmp_path / "here", tmp_path / "there")
    moved = make_store(tmp_path / "there", client, mode="lite")
    assert (moved.store_id, moved.task_queue, moved.workflow_id(admitted.intake_id)) == before
    async with running_worker(client, moved):  # its pending turn is on the queue the moved worker polls
        assert (await outcome_of(client, admitted)).state == "resolved"


def test_a_store_from_before_ids_keeps_its_path_name(tmp_path: Path) -> None:
    """Stores created before ids were written keep their path-derived name (open workflows stay valid)."""
    from tempomem.storage.store_ref import STORE_ID_FILE, path_store_id, store_id

    (tmp_path / "old" / ".capture-intake").mkdir(parents=True)
    assert store_id(tmp_path / "old") == path_store_id(tmp_path / "old")
    assert (tmp_path / "old" / STORE_ID_FILE).read_text().strip() == path_store_id(tmp_path / "old")
    fresh = store_id(tmp_path / "new")
    assert fresh != path_store_id(tmp_path / "new") and store_id(tmp_path / "new") == fresh
    assert oct((tmp_path / "new" / STORE_ID_FILE).stat().st_mode & 0o777) == "0o600"
