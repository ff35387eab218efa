"""Backfill: JSONL / LoCoMo sources → intake admission → CaptureWorkflow children, on a real dev server.

Covers: bad lines reported by number and skipped (never half-admitted), exactly-once admission and
resolution, idempotent re-runs (all duplicates), continue-as-new with a forced tiny threshold, resuming
after the worker is stopped mid-backfill, the deterministic LoCoMo mapping, and a content-free history.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import itertools
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer, Worker

from tempomem.activities.backfill import iter_jsonl, load_locomo, locomo_run_id, read_jsonl
from tempomem.activities.sweep import sweep_store
from tempomem.backfill import FORMATS, ProgressBar, detect_format, follow_backfill, write_jsonl
from tempomem.messages.backfill import PROGRESS_QUERY, SOURCE_FORMATS, BackfillProgress
from tempomem.starts import run_backfill, start_backfill
from tempomem.storage.intake_records import RecordState, intake_id
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import CompletedTurn
from tempomem.store import MemoryStore
from tempomem.worker import backfill_worker_extras, store_activities
from tempomem.workflows.backfill import BackfillWorkflow
from tempomem.workflows.capture import CaptureWorkflow
from tempomem.workflows.sweep import IntakeSweepWorkflow
from tests.conftest import make_store
from tests.helpers.locomo import locomo_file, require_locomo
from tests.test_capture_flow import _payload_data

LOCOMO = locomo_file()
T0 = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
SECRET = "Zanzibar-Quokka"


def turns(n: int, prefix: str = "bf") -> list[CompletedTurn]:
    return [
        CompletedTurn(
            run_id=f"{prefix}-{i}",
            conversation_id="import:thread-1",
            speaker_kind="human-turn",
            user_text=f"question {i}",
            final_answer=f"{SECRET} fact number {i}: the boiler code is {1000 + i}.",
            admitted_at=T0 + timedelta(minutes=i),
        )
        for i in range(n)
    ]


@contextlib.asynccontextmanager
async def backfill_worker(
    client: Client, store: MemoryStore, *, graceful: float = 10.0, sweep: bool = False
) -> AsyncIterator[Worker]:
    """The store's worker as ``build_worker`` makes it, plus ``backfill_worker_extras`` (until wired)."""
    ctx = store.worker_context(client)
    workflows, activities = backfill_worker_extras(ctx)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        worker = Worker(
            client,
            task_queue=ctx.task_queue,
            workflows=[CaptureWorkflow, IntakeSweepWorkflow, *workflows],
            activities=[*store_activities(ctx), *activities],
            activity_executor=executor,
            max_concurrent_activities=1,
            graceful_shutdown_timeout=timedelta(seconds=graceful),
        )
        async with worker:
            if sweep:
                await sweep_store(ctx)  # what run_worker does on start
            yield worker


def daily_ids(store: MemoryStore) -> list[str]:
    return [b.id for _, b in iter_bullets(store.root, "daily")]


def states(store: MemoryStore, run_ids: list[str]) -> set[RecordState]:
    now = datetime.now(UTC)
    return {store.intake.view(intake_id(r), now=now).state for r in run_ids}


# -- sources (no server) ----------------------------------------------------------------------------------


def test_jsonl_lines_are_validated_fully_and_reported_by_number(tmp_path: Path) -> None:
    good = [t.model_dump_json() for t in turns(3)]
    lines = [
        good[0],
        "",  # blank: ignored, not a data line
        '{"run_id": "x", "conversation_id": "c", "final_answer": "' + SECRET + '"',  # truncated JSON
        good[1],
        json.dumps({"run_id": "y", "conversation_id": "c", "final_answer": SECRET}),  # no admitted_at
        json.dumps(
            {"run_id": "z", "conversation_id": "c", "final_answer": SECRET, "admitted_at": "2026-01-01T10:00"}
        ),  # naive instant
        json.dumps({**json.loads(good[2]), "mood": SECRET}),  # unknown key
        good[2],
    ]
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    items = iter_jsonl(path)
    assert [i.line for i in items] == [1, 3, 4, 5, 6, 7, 8]
    assert [i.line for i in items if i.turn is not None] == [1, 4, 8]
    reasons = {i.line: i.error for i in items if i.turn is None}
    assert reasons[3] == "<line>: json_invalid"
    assert reasons[5] == "admitted_at: missing"
    assert reasons[6] == "admitted_at: value_error"
    assert reasons[7] == "mood: extra_forbidden"
    assert all(SECRET not in (r or "") for r in reasons.values())  # reasons are content-free
    # Chunked reads resume exactly at a byte offset, whatever the chunk size.
    first = read_jsonl(path, max_items=2)
    rest = read_jsonl(path, position=first.position, byte_offset=first.byte_offset, max_items=100)
    assert [i.line for i in first.items + rest.items] == [i.line for i in items]
    assert not first.eof and rest.eof
    assert detect_format(path) == "jsonl"
    assert FORMATS == SOURCE_FORMATS  # the CLI's copy (kept import-light) matches the workflow's


def test_locomo_conversation_0_maps_every_turn_with_deterministic_run_ids() -> None:
    require_locomo()
    assert detect_format(LOCOMO) == "locomo-turns"
    raw = json.loads(LOCOMO.read_text(encoding="utf-8"))
    conv = raw[0]["conversation"]
    expected = sum(len(v) for k, v in conv.items() if re.fullmatch(r"session_\d+", k))
    items = load_locomo(LOCOMO)
    sample = raw[0]["sample_id"]
    mine = [i for i in items if i.turn is not None and i.turn.conversation_id == f"locomo:{sample}"]
    assert len(mine) == expected == 419
    assert all(i.error is None for i in items)
    assert len(items) == sum(
        len(v) for s in raw for k, v in s["conversation"].items() if re.fullmatch(r"session_\d+", k)
    )
    first = mine[0].turn
    assert first is not None
    assert first.run_id == locomo_run_id(sample, "D1:1") == "locomo:conv-26:D1:1"
    assert first.admitted_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # "1:56 pm on 8 May, 2023"
    assert first.final_answer == "Caroline: Hey Mel! Good to see you! How have you been?"
    run_ids = [i.turn.run_id for i in mine if i.turn]
    assert len(set(run_ids)) == len(run_ids)
    assert run_ids == [i.turn.run_id for i in load_locomo(LOCOMO)[: len(mine)] if i.turn]  # deterministic
    # Pairs: speaker_a → speaker_b turns fold into one user→assistant turn; every dialog turn used once.
    pairs = [
        i.turn
        for i in load_locomo(LOCOMO, pairs=True)
        if i.turn and i.turn.run_id.startswith("locomo:conv-26:")
    ]
    covered = [d for t in pairs for d in t.run_id.removeprefix("locomo:conv-26:").split("+")]
    assert sorted(covered) == sorted(r.removeprefix("locomo:conv-26:") for r in run_ids)
    assert any(t.user_text.startswith("Caroline: ") and t.final_answer.startswith("Melanie: ") for t in pairs)
    assert len(pairs) < len(mine)


def test_plain_progress_bar_renders_counts() -> None:
    p = BackfillProgress(total=10, settled=5, admitted=4, duplicates=1, bad_lines=0, in_flight=2)
    assert ProgressBar.render(p).startswith("[" + "#" * 15 + "-" * 15 + "] 5/10")
    assert "?" in ProgressBar.render(BackfillProgress())


# -- on the dev server ------------------------------------------------------------------------------------


async def test_backfill_admits_good_lines_once_skips_bad_and_rerun_is_all_duplicates(
    client: Client, tmp_path: Path
) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    good = turns(12)
    path = tmp_path / "turns.jsonl"
    lines = [t.model_dump_json() for t in good]
    lines.insert(5, '{"run_id": "broken", "final_answer": "' + SECRET + '"}')  # line 6
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen: list[BackfillProgress] = []
    async with backfill_worker(client, store):
        first = await run_backfill(
            client, store, path, window=3, batch_size=4, on_progress=seen.append, poll_interval=0.05
        )
        handle = await start_backfill(client, store, path, window=3, batch_size=4)
        second = await follow_backfill(client, handle.id)
    assert (first.total, first.read, first.admitted, first.duplicates, first.skipped) == (13, 13, 12, 0, 0)
    assert (first.bad_lines, [b.line for b in first.bad]) == (1, [6])
    assert "conversation_id: missing" in first.bad[0].reason and "admitted_at: missing" in first.bad[0].reason
    assert (first.completed, first.resolved, first.dead, first.settled, first.done) == (12, 12, 0, 13, True)
    assert seen and seen[-1] == first and all(a.settled <= b.settled for a, b in itertools.pairwise(seen))
    # Every good turn admitted exactly once and resolved; the bad line left nothing behind.
    run_ids = [t.run_id for t in good]
    assert states(store, run_ids) == {RecordState.RESOLVED}
    assert store.intake.ledger.verify_all(store.intake.has_receipt) == 12
    assert store.intake.counts(now=datetime.now(UTC)) == {"pending": 0, "due": 0, "dead": 0, "resolved": 12}
    assert len(daily_ids(store)) == len(set(daily_ids(store))) == 12
    # Re-run of the same file: nothing admitted twice, nothing captured again.
    assert (second.admitted, second.duplicates, second.completed, second.bad_lines) == (0, 12, 0, 1)
    assert store.intake.ledger.verify_all(store.intake.has_receipt) == 12
    assert len(daily_ids(store)) == 12
    # Both runs' histories hold the path, ids and counts — never memory text.
    decoded: list[str] = []
    async for run in client.list_workflows(f"WorkflowId = '{handle.id}'"):
        history = await client.get_workflow_handle(handle.id, run_id=run.run_id).fetch_history()
        decoded += [
            base64.b64decode(d).decode("utf-8", "replace") for d in _payload_data(history.to_json_dict())
        ]
    assert any(intake_id(run_ids[0]) in d for d in decoded)  # proves the payloads were decoded
    assert all(SECRET not in d and "boiler" not in d and "question" not in d for d in decoded)


async def test_tiny_continue_as_new_threshold_makes_several_runs(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    path = tmp_path / "turns.jsonl"
    write_jsonl(path, turns(10, prefix="can"))
    async with backfill_worker(client, store):
        handle = await start_backfill(client, store, path, window=2, batch_size=2, continue_as_new_every=3)
        result = await follow_backfill(client, handle.id)
    assert result.continue_as_new_runs == 3  # 3 + 3 + 3 + 1 lines
    assert (result.admitted, result.completed, result.resolved, result.done) == (10, 10, 10, True)
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert len(runs) == 4
    assert sum(1 for w in runs if w.status == WorkflowExecutionStatus.CONTINUED_AS_NEW) == 3
    # Every run's history replays deterministically against the current workflow code.
    replayer = Replayer(workflows=[BackfillWorkflow])
    for w in runs:
        await replayer.replay_workflow(
            await client.get_workflow_handle(handle.id, run_id=w.run_id).fetch_history()
        )
    assert states(store, [f"can-{i}" for i in range(10)]) == {RecordState.RESOLVED}
    assert len(daily_ids(store)) == 10


async def test_worker_stopped_mid_backfill_resumes_with_exactly_once_admission(
    client: Client, tmp_path: Path
) -> None:
    root = tmp_path / "mem"
    n = 40
    path = tmp_path / "turns.jsonl"
    write_jsonl(path, turns(n, prefix="crash"))
    first_store = make_store(root, client, mode="lite")
    # No drain: the stop abandons whatever activity is running, like a crash of the worker process.
    async with backfill_worker(client, first_store, graceful=0):
        handle = await start_backfill(
            client, first_store, path, window=2, batch_size=3, continue_as_new_every=12, poll_seconds=1
        )
        progress = await _progress_when(client, handle.id, lambda p: p.completed >= 3)
    assert not progress.done, "the backfill must still be running when its worker stops"
    # A fresh store object and worker, as after a restart; its start sweep races the backfill's children.
    second_store = make_store(root, client, mode="lite")
    async with backfill_worker(client, second_store, sweep=True):
        result = await follow_backfill(client, handle.id)
    run_ids = [f"crash-{i}" for i in range(n)]
    assert result.done and result.read == result.total == n
    assert result.admitted + result.duplicates == n and result.bad_lines == 0
    assert (result.completed, result.resolved, result.dead) == (n, n, 0)
    assert result.continue_as_new_runs >= 3
    assert states(second_store, run_ids) == {RecordState.RESOLVED}
    assert second_store.intake.ledger.verify_all(second_store.intake.has_receipt) == n
    ids = daily_ids(second_store)
    assert len(ids) == len(set(ids)) == n


async def test_locomo_backfill_of_two_sessions(client: Client, tmp_path: Path) -> None:
    sample = json.loads(require_locomo().read_text(encoding="utf-8"))[0]
    keep = ("speaker_a", "speaker_b", "session_1", "session_1_date_time", "session_2", "session_2_date_time")
    conversation = {k: sample["conversation"][k] for k in keep}
    src = tmp_path / "conv0.json"
    src.write_text(json.dumps([{"sample_id": sample["sample_id"], "conversation": conversation}]), "utf-8")
    expected = len(conversation["session_1"]) + len(conversation["session_2"])
    store = make_store(tmp_path / "mem", client, mode="lite")
    async with backfill_worker(client, store):
        result = await run_backfill(client, store, src, window=8, batch_size=16)
    assert (result.total, result.admitted, result.resolved, result.bad_lines) == (
        expected,
        expected,
        expected,
        0,
    )
    bullets = list(iter_bullets(store.root, "daily"))
    assert len(bullets) == expected
    assert {day for day, _ in bullets} == {"2023-05-08", "2023-05-25"}  # the two session dates
    # Captures run concurrently, so file order is completion order; ``recorded`` keeps the dialog order.
    first = min((b for _, b in bullets), key=lambda b: b.recorded)
    assert first.text == "Assistant: Caroline: Hey Mel! Good to see you! How have you been?"
    assert first.recorded == "2023-05-08T13:56:00.000Z" and first.source_session == "locomo:conv-26"


async def _progress_when(
    client: Client, workflow_id: str, predicate: Any, timeout: float = 60
) -> BackfillProgress:
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            p = await handle.query(PROGRESS_QUERY, result_type=BackfillProgress)
            if predicate(p):
                return p
        if time.monotonic() > deadline:
            pytest.fail("progress condition not reached in time")
        await asyncio.sleep(0.05)


def test_cli_backfill_runs_in_process_worker_and_reports_bad_lines(
    temporal_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tempomem backfill FILE --worker`` end to end, through worker.py's real wiring."""
    import argparse

    from tempomem.cli import batch as backfill_cli

    address = temporal_env.client.service_client.config.target_host
    config_path = tmp_path / "tempomem.json"
    config_path.write_text(
        json.dumps(
            {
                "memory": {"mode": "lite", "writeMode": "append-host-summary", "path": str(tmp_path / "mem")},
                "temporal": {"address": address},
            }
        ),
        encoding="utf-8",
    )
    source = tmp_path / "turns.jsonl"
    lines = [t.model_dump_json() for t in turns(5, prefix="cli")]
    lines.insert(2, "not json at all " + SECRET)
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    backfill_cli.add_backfill_arguments(parser)
    args = parser.parse_args(["--config", str(config_path), str(source), "--worker", "--window", "2"])
    assert backfill_cli.cmd_backfill(args) == 0
    out, err = capsys.readouterr()
    assert "admitted 5 · duplicates 0 · skipped 0 · bad lines 1" in out
    assert "bad line 3: <line>: json_invalid" in err
    assert SECRET not in out + err


async def test_backfill_and_the_host_write_through_one_admission(client: Client, tmp_path: Path) -> None:
    """STORE-11: the host's ``persist_completed_turn`` and a backfill admit through the same durable,
    run-idempotent admission. Turns the host already persisted come back from the backfill as
    duplicates with the host's intake ids; only the new ones are admitted; each turn is curated once."""
    store = make_store(tmp_path / "mem", client, mode="lite")
    batch = turns(6, prefix="shared")
    by_host = [await store.persist_completed_turn(t) for t in batch[:3]]
    assert [r.intake_id for r in by_host] == [intake_id(t.run_id) for t in batch[:3]]
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in batch), encoding="utf-8")
    async with backfill_worker(client, store, sweep=True):
        final = await run_backfill(client, store, path, window=2, batch_size=4, poll_interval=0.05)
        deadline = time.monotonic() + 60
        while store.intake.counts(now=datetime.now(UTC))["pending"] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    assert (final.read, final.admitted, final.duplicates, final.bad_lines) == (6, 3, 3, 0)
    assert states(store, [t.run_id for t in batch]) == {RecordState.RESOLVED}
    assert store.intake.ledger.verify_all(store.intake.has_receipt) == 6
    assert len(daily_ids(store)) == len(set(daily_ids(store))) == 6
