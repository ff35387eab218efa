"""``tempomem demo``: admit a bundled conversation, let the worker curate it, recall from it.

The recall part prints what the model would see from ``MemoryRecall`` (``recall.tools.memory_recall``):
the tail cut, currentness marks and ``Insufficient evidence:`` notes included, not raw reference scores.
Memory text goes only into the returned lines the CLI prints to stdout, never to a logger.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from importlib import resources

from pydantic import BaseModel, ConfigDict
from temporalio.client import Client

from tempomem.messages.capture import CaptureOutcome
from tempomem.recall.tools import RecallResult, memory_recall
from tempomem.storage.fence import fence_is_held
from tempomem.storage.turn import AdmissionStatus, CompletedTurn
from tempomem.store import MemoryStore
from tempomem.worker import run_worker


class DemoTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    speaker_kind: str = "unknown"
    trigger_kind: str = "none"
    user_text: str = ""
    final_answer: str
    admitted_at: datetime


class DemoConversation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation_id: str
    turns: list[DemoTurn]
    queries: list[str]


def recall_text(store: MemoryStore, query: str) -> str:
    """The shaped ``MemoryRecall`` rendering for one demo query (REC-13..REC-47)."""
    policy = store.config.memory.recall
    result: RecallResult = memory_recall(
        store, query=query, intent_expiry=bool(policy is not None and policy.intent_expiry)
    )
    return result.text


def load_demo() -> DemoConversation:
    text = resources.files("tempomem").joinpath("data/demo_conversation.json").read_text("utf-8")
    return DemoConversation.model_validate_json(text)


async def run_demo(store: MemoryStore, client: Client, *, ui_url: str, namespace: str, out: list[str]) -> int:
    """Returns the number of turns whose workflow finished; lines to print go to ``out``."""
    demo = load_demo()
    stop = asyncio.Event()
    worker: asyncio.Task[object] | None = None
    if fence_is_held(store.root):
        out.append("  (a worker for this store is already running; it will curate the demo turns)")
    else:
        worker = asyncio.create_task(run_worker(client, store.worker_context(client), stop=stop))
    finished = 0
    try:
        ids: list[str] = []
        for t in demo.turns:
            result = await store.persist_completed_turn(
                CompletedTurn.model_validate(
                    {**t.model_dump(), "conversation_id": demo.conversation_id}, strict=False
                )
            )
            label = result.skip_reason.value if result.skip_reason else result.status.value
            out.append(
                f"  {t.run_id}: {label}"
                + (f" (intake id {result.intake_id[:12]}…)" if result.intake_id else "")
            )
            if result.status in (AdmissionStatus.ADMITTED, AdmissionStatus.DUPLICATE) and result.intake_id:
                ids.append(result.intake_id)
        for intake_id in ids:
            handle = client.get_workflow_handle(store.workflow_id(intake_id), result_type=CaptureOutcome)
            try:
                outcome = await asyncio.wait_for(handle.result(), timeout=120)
            except Exception as exc:  # e.g. a duplicate whose workflow history lives on another server
                out.append(f"  capture-{intake_id[:12]}…: no finished workflow here ({type(exc).__name__})")
                continue
            finished += 1
            out.append(f"  capture-{intake_id[:12]}…: {outcome.state} after {outcome.attempts} attempt(s)")
        for query in demo.queries:
            text = await asyncio.to_thread(recall_text, store, query)
            out.append(f'\nMemoryRecall "{query}"')
            out.extend(f"  {line}" for line in text.splitlines())
        out.append("\nEach turn's workflow in the Temporal Web UI:")
        out.extend(f"  {ui_url}/namespaces/{namespace}/workflows/{store.workflow_id(i)}" for i in ids)
    finally:
        stop.set()
        if worker is not None:
            await worker
    return finished
