"""Crash-idempotent semantic commit (RPL-06..RPL-08): a worker SIGKILLed right after each commit boundary
is replaced, and the store converges to the same canonical bytes as an uninterrupted run, with no
duplicate fact and no second model call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from tempomem.storage.intake_records import RecordState
from tests.conftest import make_store, running_worker
from tests.helpers.canonical import canonical_bytes
from tests.scripted_model import ScriptedModelServer
from tests.test_capture_flow import outcome_of, wait_until
from tests.test_capture_pipeline import ANA, T2, extraction, memory, turn

REPO = Path(__file__).resolve().parent.parent
KEEP = json.dumps({"decisions": [{"line": 1, "decision": "keep"}]})
FIRST = [extraction(memory("Ana is vegetarian.", entities=["ana"]), entities=ANA), KEEP]
SECOND = [
    extraction(memory("Ana has become vegan.", entities=["ana"]), entities=ANA),
    KEEP,
    json.dumps({"decisions": [{"index": 0, "action": "SUPERSEDE", "target": 1, "text": "Ana is vegan."}]}),
]


def spawn_crash_worker(client: Client, store, model: ScriptedModelServer, step: str) -> subprocess.Popen:
    """A worker process for ``store`` that SIGKILLs itself right after commit boundary ``step``."""
    address = client.service_client.config.target_host
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.crash_worker",
            str(store.root),
            address,
            store.task_queue,
            model.url,
            step,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
    return proc


async def run_two_turns(
    client: Client, root: Path, model: ScriptedModelServer, crash_step: str | None
) -> int:
    """Turn 1 uninterrupted; turn 2 (a supersession) crashes after ``crash_step``. Returns model calls."""
    store = make_store(
        root, client, mode="bujo", llm={"provider": "ollama", "model": "scripted", "endpoint": model.url}
    )
    model.push(*FIRST)
    first = await store.persist_completed_turn(turn("crash-1", "Ana is vegetarian.", "Noted."))
    async with running_worker(client, store):
        await outcome_of(client, first)
    model.push(*SECOND)
    second_turn = turn("crash-2", "Ana is vegan now.", "Updated.", at=T2, conversation_id="web:conv-2")
    if crash_step is not None:
        proc = spawn_crash_worker(client, store, model, crash_step)
        second = await store.persist_completed_turn(second_turn)
        await wait_until(lambda: proc.poll() is not None, timeout=120)
        assert proc.returncode == -9  # it really died at the boundary
        assert store.intake.view(second.intake_id, now=T2).state is RecordState.PENDING
    else:
        second = await store.persist_completed_turn(second_turn)
    async with running_worker(client, store):
        outcome = await outcome_of(client, second, timeout=120)
    assert outcome.state == "resolved"
    return len(model.calls)


@pytest.mark.parametrize("step", ["intent", "markdown", "graph", "sidecar", "index", "committed"])
async def test_sigkill_at_each_commit_boundary_converges(client: Client, tmp_path: Path, step: str) -> None:
    with ScriptedModelServer() as model:
        reference_calls = await run_two_turns(client, tmp_path / "reference", model, None)
    with ScriptedModelServer() as model:
        calls = await run_two_turns(client, tmp_path / "crashed", model, step)
    assert calls == reference_calls == 5  # no second model call after the crash
    reference = canonical_bytes(tmp_path / "reference")
    crashed = canonical_bytes(tmp_path / "crashed")
    assert set(reference) == {
        "daily/2026-12-01.md",
        "daily/2026-12-02.md",
        "graph.jsonl",
        ".replay-projection-v1.json",
    }
    assert crashed == reference  # same bytes: no duplicate fact, no unattested edge


async def test_lost_sidecar_is_adopted_from_the_retained_intent(client: Client, tmp_path: Path) -> None:
    """RPL-10..RPL-15: after a crash past the sidecar step, a lost sidecar is re-attested from the retained
    capture intent alone (no index inference); the replay converges to the reference bytes, and health
    reports an edge naming no canonical line as canonical_mismatch."""
    from tempomem.capture.adoption import adopt_replay
    from tempomem.storage import replay_sidecar
    from tempomem.storage.fence import RebuildRequiredError
    from tempomem.storage.health import audit

    with ScriptedModelServer() as model:
        await run_two_turns(client, tmp_path / "reference", model, None)
    reference = canonical_bytes(tmp_path / "reference")
    root = tmp_path / "crashed"
    with ScriptedModelServer() as model:
        store = make_store(
            root, client, mode="bujo", llm={"provider": "ollama", "model": "scripted", "endpoint": model.url}
        )
        model.push(*FIRST)
        first = await store.persist_completed_turn(turn("crash-1", "Ana is vegetarian.", "Noted."))
        async with running_worker(client, store):
            await outcome_of(client, first)
        model.push(*SECOND)
        proc = spawn_crash_worker(client, store, model, "sidecar")
        second = await store.persist_completed_turn(
            turn("crash-2", "Ana is vegan now.", "Updated.", at=T2, conversation_id="web:conv-2")
        )
        await wait_until(lambda: proc.poll() is not None, timeout=120)
        sidecar = root / ".replay-projection-v1.json"
        written = sidecar.read_bytes()
        sidecar.unlink()  # the sidecar is lost
        report = adopt_replay(root)
        assert (report.status, report.intents, report.entries) == ("adopted", 1, 1)
        assert sidecar.read_bytes() == written  # exactly what the commit had published
        assert adopt_replay(root).status == "sidecar_present"
        assert audit(root, now=T2).status == "in_progress"  # the intent is still pending
        # RPL-17: the service never starts between adoption and rebuild.
        with pytest.raises(RebuildRequiredError):
            async with running_worker(client, store) as task:
                await task
        store.rebuild()
        async with running_worker(client, store):
            await outcome_of(client, second, timeout=120)
    assert canonical_bytes(root) == reference
    assert len(model.calls) == 5  # no provider work repeated
    assert audit(root, now=T2).status == "ok"
    forged = {
        "id": replay_sidecar.entry_id("supersede", "c-missing", "c-other"),
        "kind": "supersede",
        "from": "c-missing",
        "to": "c-other",
        "at": "2026-12-02T10:00:00.000Z",
        "authority": {"kind": "capture", "digest": "0" * 64},
    }
    replay_sidecar.apply_delta(root, [forged])
    health = audit(root, now=T2)
    assert health.status == "canonical_mismatch" and len(health.mismatches) == 1
