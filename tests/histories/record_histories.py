"""Record the CaptureWorkflow histories that ``tests/test_replay.py`` replays.

Run after a deliberate, versioned workflow change (with ``workflow.patched``), never to paper over a
replay failure, and only for new names — old histories must keep replaying:
    python -m tests.histories.record_histories NAME ...
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tempomem.devserver import temporal_cli
from tempomem.storage.turn import CompletedTurn
from tempomem.workflows import search_attributes
from tempomem.workflows.common import CaptureOutcome
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
}


async def main(names: list[str]) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()), search_attributes=search_attributes.ALL
    )
    try:
        for name in names:
            await record(env, name, fail_first=RECORDINGS[name])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or list(RECORDINGS)))
