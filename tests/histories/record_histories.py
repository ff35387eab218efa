"""Record the workflow histories that ``tests/test_replay.py`` replays: CaptureWorkflow, IntakeSweepWorkflow,
BackfillWorkflow, ConsolidationWorkflow and RecurateWorkflow (dry run and real run).

Run after a deliberate, versioned workflow change (with ``workflow.patched``), never to paper over a
replay failure, and only for new names — old histories must keep replaying:
    python -m tests.histories.record_histories NAME ...
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from tempomem.devserver import temporal_cli
from tempomem.messages import search_attributes
from tempomem.messages.capture import CaptureOutcome
from tempomem.storage.turn import CompletedTurn
from tests.conftest import make_store, running_worker

HERE = Path(__file__).parent
T0 = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)


# A BuJo turn whose only memory is the owner's labelled preference: nothing is eligible for review.
PREFERENCE_ONLY = json.dumps(
    {
        "memories": [
            {
                "text": "The user prefers tea over coffee.",
                "kind": "preference",
                "source": "user",
                "salience": 0.8,
                "entities": [],
                "labels": [{"kind": "preference", "scope": "agent", "key": "drink:hot", "value": "tea"}],
            }
        ],
        "entities": [],
        "relations": [],
    }
)


async def record(env: WorkflowEnvironment, name: str, *, fail_first: bool) -> None:
    """Lite turns, or (``capture_bujo*``) a BuJo capture through the stages with the scripted model."""
    from tests.scripted_model import ScriptedModelServer

    client = env.client
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as model:
        if name.startswith("capture_bujo"):
            llm = {"provider": "ollama", "model": "scripted", "endpoint": model.url}
            store = make_store(Path(tmp) / "mem", client, mode="bujo", llm=llm)
            model.push(PREFERENCE_ONLY)
            turn = CompletedTurn(
                run_id=f"history-{name}",
                conversation_id="history:conv",
                speaker_kind="human-turn",
                user_text="I prefer tea over coffee.",
                final_answer="Noted: tea.",
                admitted_at=T0,
            )
        else:
            store = make_store(Path(tmp) / "mem", client, mode="lite")
            turn = CompletedTurn(
                run_id=f"history-{name}",
                conversation_id="history:conv",
                final_answer="Recorded for replay tests.",
                admitted_at=T0,
            )
        if fail_first:
            # A file where the daily/ folder belongs: projection fails with storage_error until removed.
            store.root.mkdir(parents=True, exist_ok=True)
            (store.root / "daily").write_text("")
        result = await store.persist_completed_turn(turn)
        handle = client.get_workflow_handle(result.workflow_id, result_type=CaptureOutcome)
        async with running_worker(client, store):
            if fail_first:
                while store.intake.view(result.intake_id, now=T0).failure_category is None:
                    await asyncio.sleep(0.1)
                (store.root / "daily").unlink()
            outcome = await handle.result()
        history = await handle.fetch_history()
        store.close()
    (HERE / f"{name}.json").write_text(json.dumps(history.to_json_dict(), indent=1) + "\n")
    print(f"{name}: {outcome}")


async def record_other(env: WorkflowEnvironment, name: str) -> None:
    """One run of a batch or maintenance workflow on a small store, through the public host-side starts."""
    from temporalio.common import WorkflowIDConflictPolicy

    from tempomem.backfill import follow_backfill, write_jsonl
    from tempomem.messages.capture import SWEEP_WORKFLOW, SweepInput, SweepResult
    from tempomem.messages.consolidation import consolidation_workflow_id
    from tempomem.recurate import make_request
    from tempomem.starts import consolidate_now, start_backfill, start_recurate
    from tests.scripted_model import Delay, ScriptedModelServer
    from tests.test_capture_pipeline import capture_store, extraction, memory

    client = env.client
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as model:
        root = Path(tmp) / "mem"
        if name in ("backfill_jsonl", "backfill_grouped"):
            # backfill_grouped (#15 item 2, patch "index-group-commit-v1"): children hand their index
            # update to the group commit, and the run's last step is index.flush.
            store = make_store(root, client, mode="lite")
            source = Path(tmp) / "turns.jsonl"
            write_jsonl(source, [_turn(f"bf-{i}", f"Backfilled line {i}.") for i in range(3)])
            async with running_worker(client, store):
                handle = await start_backfill(client, store, source, window=2, batch_size=2, poll_seconds=1)
                await follow_backfill(client, handle.id)
        elif name == "consolidation_regenerated":
            store = make_store(root, client, mode="lite")
            async with running_worker(client, store):
                result = await store.persist_completed_turn(_turn("cons-1", "A line to count."))
                await client.get_workflow_handle(result.workflow_id).result()
                await consolidate_now(client, store)
            handle = client.get_workflow_handle(consolidation_workflow_id(store.store_id))
        elif name == "sweep_started_one":
            offline = make_store(root, None, mode="lite")  # no client: admitted, never started
            await offline.persist_completed_turn(_turn("sweep-1", "Admitted while Temporal was away."))
            offline.close()
            store = make_store(root, client, mode="lite")
            handle = await client.start_workflow(
                SWEEP_WORKFLOW,
                SweepInput(store_id=store.store_id),
                id=f"history-sweep-{store.store_id}",
                task_queue=store.task_queue,
                result_type=SweepResult,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
            async with running_worker(client, store):
                await handle.result()
        elif name in ("capture_bujo_parallel_deferred", "capture_bujo_parallel_lean"):
            # Two turns, extractions on the model queue at once; the later one is answered first and
            # waits for its turn to commit (a deferred reconcile, then the commit_turn signal).
            store = capture_store(Path(tmp), client, model)
            assert store.config.memory.llm is not None
            store.config.memory.llm.concurrency = 2
            slow, fast = (
                extraction(memory("The user's dentist is Dr. Silva.")),
                extraction(memory("The user's bike is green.")),
            )
            model.push(*[_by_kind(lambda text: Delay(1.5, slow) if "dentist" in text else fast)] * 6)
            first = await store.persist_completed_turn(_capture_turn("par-1", "My dentist is Dr. Silva.", 0))
            second = await store.persist_completed_turn(_capture_turn("par-2", "My bike is green.", 1))
            async with running_worker(client, store):
                await client.get_workflow_handle(first.workflow_id).result()
                handle = client.get_workflow_handle(second.workflow_id)
                await handle.result()
        elif name == "recurate_windowed":
            # Two archived turns re-curated two at a time (patch "recurate-window-v1").
            store = capture_store(Path(tmp), client, model)
            now = datetime.now(UTC).replace(microsecond=0)
            texts = ("My dentist is Dr. Silva.", "My bike is green.")
            async with running_worker(client, store):
                model.push(
                    *[_by_kind(lambda text: extraction(memory("The user's dentist is Dr. Silva.")))] * 12
                )
                for n, text in enumerate(texts):
                    done = await store.persist_completed_turn(_capture_turn(f"rw-{n}", text, n, now))
                    await client.get_workflow_handle(done.workflow_id).result()
                req = make_request(store, since=now.date().isoformat(), run_id="histwin")
                handle = await start_recurate(client, store, req, window=2, batch_size=2)
                await handle.result()
        else:  # recurate_dry_run, recurate_real: one archived capture turn, then a re-curation
            store = capture_store(Path(tmp), client, model)
            model.push(extraction(memory("The user's dentist is Dr. Silva.")), _keep(1))
            turn = CompletedTurn(
                run_id="history-recurate",
                conversation_id="history:conv",
                speaker_kind="human-turn",
                user_text="My dentist is Dr. Silva.",
                final_answer="Noted.",
                admitted_at=datetime.now(UTC).replace(microsecond=0),
            )
            async with running_worker(client, store):
                first = await store.persist_completed_turn(turn)
                await client.get_workflow_handle(first.workflow_id).result()
                model.push(extraction(memory("The user's dentist is Dr. Silva.")), _keep(1))
                dry = name == "recurate_dry_run"
                day = turn.admitted_at.date().isoformat()
                req = make_request(store, since=day, model="scripted-v2", dry_run=dry, run_id="hist1")
                handle = await start_recurate(client, store, req, window=1, batch_size=1)
                await handle.result()
        if name in ("backfill_jsonl", "backfill_grouped"):
            handle = client.get_workflow_handle(handle.id)
        history = await handle.fetch_history()
        store.close()
    (HERE / f"{name}.json").write_text(json.dumps(history.to_json_dict(), indent=1) + "\n")
    print(f"{name}: recorded {len(history.events)} events")


def _turn(run_id: str, answer: str) -> CompletedTurn:
    return CompletedTurn(run_id=run_id, conversation_id="history:conv", final_answer=answer, admitted_at=T0)


def _capture_turn(run_id: str, user: str, minutes: int, at: datetime = T0) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id,
        conversation_id="history:conv",
        speaker_kind="human-turn",
        user_text=user,
        final_answer="Noted.",
        admitted_at=at + timedelta(minutes=minutes),
    )


def _by_kind(extract: Callable[[str], Any]) -> Callable[[dict[str, Any]], Any]:
    """A scripted answer for calls arriving in any order: extraction by ``extract(request text)``,
    review keeps line 1, reconciliation adds."""

    def answer(request: dict[str, Any]) -> Any:
        system = request["messages"][0]["content"]
        if system.startswith("You extract"):
            return extract(json.dumps(request["messages"]))
        if system.startswith("You review"):
            return _keep(1)
        return json.dumps({"decisions": [{"index": 0, "action": "ADD"}]})

    return answer


def _keep(*lines: int) -> str:
    return json.dumps({"decisions": [{"line": n, "decision": "keep"} for n in lines]})


OTHER_RECORDINGS = (
    "sweep_started_one",
    "backfill_jsonl",
    "consolidation_regenerated",
    "recurate_dry_run",
    "recurate_real",
    "capture_bujo_parallel_deferred",
    "recurate_windowed",
    "backfill_grouped",
    # #15 item 1, patch "capture-lean-steps-v1": the same two turns; the later one waits for the signal
    # before its only reconcile, its projection is in capture.settle, its resolve a local activity.
    "capture_bujo_parallel_lean",
)

RECORDINGS = {
    # Recorded before search attributes existed: they prove the workflow.patched path replays.
    "capture_lite_resolved": False,
    "capture_lite_retry_then_resolved": True,
    # Recorded with search attributes registered (patch "search-attributes-v1" taken).
    "capture_lite_retry_search_attributes": True,
    # BuJo, recorded before an extraction with nothing eligible skipped the review activity: review runs.
    "capture_bujo_review_ran": False,
    # BuJo with patch "skip-empty-review-v1" taken: nothing eligible, so no review activity.
    "capture_bujo_review_skipped": False,
    # #15 item 2, patch "settle-in-one-step-v1": the Lite turn settles in the local activity capture.settle;
    # the second fails there first (storage_error), records the failure, backs off and settles.
    "capture_lite_settled": False,
    "capture_lite_settle_failed_then_resolved": True,
    # #15 item 1, patch "capture-lean-steps-v1": a BuJo turn projected in capture.settle, resolved locally.
    "capture_bujo_lean": False,
}


async def main(names: list[str]) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()), search_attributes=search_attributes.ALL
    )
    try:
        for name in names:
            if name in OTHER_RECORDINGS:
                await record_other(env, name)
            else:
                await record(env, name, fail_first=RECORDINGS[name])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or [*RECORDINGS, *OTHER_RECORDINGS]))
