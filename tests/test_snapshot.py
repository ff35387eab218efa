"""Runtime snapshots: republished after every transition, content-free, and a failing sink never rolls
back a transition (INTAKE-30..INTAKE-32)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from tempomem.storage.intake import RecordState
from tempomem.storage.snapshot import IntakeSnapshot
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
