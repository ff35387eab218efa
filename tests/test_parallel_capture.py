"""Model calls in parallel, commits in order (issue #15 item 1), on a real dev server with the scripted
chat model behind real HTTP answering concurrent requests.

Extraction and review of different turns overlap up to ``memory.llm.concurrency`` per store (and a
process-wide ``model_slots`` cap); reconciliation + commit stay one at a time and in admission order,
so a later turn is always reconciled against what the earlier ones committed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tempomem.activities.context import StoreContext
from tempomem.storage import replay_sidecar
from tempomem.storage.markdown import iter_bullets
from tempomem.store import MemoryStore
from tempomem.worker import run_worker
from tests.scripted_model import Hang, ScriptedModelServer
from tests.test_capture_flow import outcome_of
from tests.test_capture_pipeline import capture_store, extraction, memory, turn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TURN = re.compile(r"turn-(\d+)")


class Gauge:
    """How many model requests the server was answering at once (the most at any moment): all of them
    (``most``), and those of the model queue's stages, extraction and review (``most_queued``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.now_queued = 0
        self.most = self.most_queued = 0

    @contextmanager
    def answering(self, kind: str) -> Iterator[None]:
        queued = kind in ("extract", "review")
        with self._lock:
            self.now += 1
            self.now_queued += queued
            self.most = max(self.most, self.now)
            self.most_queued = max(self.most_queued, self.now_queued)
        try:
            yield
        finally:
            with self._lock:
                self.now -= 1
                self.now_queued -= queued


def kind_of(request: dict[str, Any]) -> str:
    system = request["messages"][0]["content"]
    if system.startswith("You extract"):
        return "extract"
    if system.startswith("You review"):
        return "review"
    return "reconcile"


def answering(gauge: Gauge, fact: Callable[[int], str], delay: Callable[[int], float], reconcile=None):
    """A scripted answer for any number of turns, whatever order their calls arrive in: extraction says
    ``fact(n)`` for the turn whose text names ``turn-n``, after ``delay(n)`` seconds; review keeps;
    reconciliation adds (or asks ``reconcile``)."""

    def answer(request: dict[str, Any]) -> str:
        kind = kind_of(request)
        with gauge.answering(kind):
            text = json.dumps(request["messages"])
            if kind == "extract":
                n = int(TURN.search(text).group(1))  # type: ignore[union-attr]
                time.sleep(delay(n))
                return extraction(memory(fact(n)))
            time.sleep(0.05)
            if kind == "review":
                lines = json.loads(request["messages"][1]["content"].split("\n", 1)[1].rsplit("\n", 1)[0])
                return json.dumps({"decisions": [{"line": x["line"], "decision": "keep"} for x in lines]})
            if reconcile is None:  # similar lines of different turns: keep each (ADD)
                return json.dumps({"decisions": [{"index": 0, "action": "ADD"}]})
            return reconcile(request)

    return answer


def serve(model: ScriptedModelServer, answer: Callable[[dict[str, Any]], str]) -> None:
    model.push(*[answer] * 100)  # the same computed answer for every call the test makes


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def parallel_store(
    tmp_path: Path, client: Client, model: ScriptedModelServer, concurrency: int
) -> MemoryStore:
    store = capture_store(tmp_path, client, model)
    assert store.config.memory.llm is not None
    store.config.memory.llm.concurrency = concurrency
    return store


async def admit(store: MemoryStore, count: int, text: Callable[[int], str]) -> list:
    return [
        await store.persist_completed_turn(
            turn(f"par-{n}", text(n), "Noted.", at=T0 + timedelta(minutes=n), conversation_id=f"c:{n}")
        )
        for n in range(count)
    ]


async def run_store(client: Client, store: MemoryStore, admitted: list, **worker: Any) -> list:
    ctx: StoreContext = store.worker_context(client)
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(client, ctx, stop=stop, schedule=False, **worker))
    try:
        return [await outcome_of(client, a, timeout=90) for a in admitted]
    finally:
        stop.set()
        await task


async def reversed_turns(
    client: Client,
    tmp_path: Path,
    model: ScriptedModelServer,
    gauge: Gauge,
    count: int,
    fact: str,
    step: float,
) -> tuple[MemoryStore, list]:
    """``count`` turns at concurrency ``count`` whose extractions finish in reverse admission order (turn
    n answers after ``step`` × (count − n) s); all resolved, their lines (``fact``) in admission order."""
    store = parallel_store(tmp_path, client, model, concurrency=count)
    serve(model, answering(gauge, lambda n: fact.format(n=n), lambda n: step * (count - n)))
    admitted = await admit(store, count, lambda n: f"turn-{n}: {fact.format(n=n)}")
    outcomes = await run_store(client, store, admitted)
    assert [o.state for o in outcomes] == ["resolved"] * count
    assert daily_texts(store.root) == [fact.format(n=n) for n in range(count)]
    return store, admitted


def daily_texts(root: Path) -> list[str]:
    return [b.text for _, b in iter_bullets(root, "daily")]


async def test_model_stages_overlap_up_to_the_store_limit(client: Client, tmp_path: Path, model) -> None:
    """memory.llm.concurrency = 3: six turns' extractions are answered three at a time, not one (the
    serial queue before #15 answered one), and every turn still commits exactly once. A reconciliation
    runs on the store's own queue beside them, so at most 3 + 1 calls are in flight (docs/capture.md)."""
    gauge = Gauge()
    store = parallel_store(tmp_path, client, model, concurrency=3)
    serve(model, answering(gauge, lambda n: f"The user's locker {n} is blue.", lambda n: 0.6))
    admitted = await admit(store, 6, lambda n: f"turn-{n}: my locker {n} is blue")
    outcomes = await run_store(client, store, admitted)
    assert [o.state for o in outcomes] == ["resolved"] * 6
    assert gauge.most_queued == 3
    assert gauge.most <= 4
    assert sorted(daily_texts(store.root)) == sorted(f"The user's locker {n} is blue." for n in range(6))


async def test_commits_follow_admission_order_when_extractions_finish_reversed(
    client: Client, tmp_path: Path, model
) -> None:
    """The first-admitted turn's extraction is the slowest, the last one's the fastest: they finish in
    reverse, yet the daily note receives the lines in admission order (each commit waited for the turns
    admitted before it)."""
    gauge = Gauge()
    await reversed_turns(client, tmp_path, model, gauge, 5, "The user's plant {n} needs water.", 0.3)
    assert gauge.most >= 4  # the extractions did overlap


async def test_a_later_correction_is_reconciled_against_the_earlier_turn(
    client: Client, tmp_path: Path, model
) -> None:
    """Turn 0 says Ana is vegetarian (slow extraction), turn 1 corrects it (fast). In parallel the
    correction is extracted first, but it reconciles after turn 0 committed, sees its line and
    supersedes it — the order a person said them in, not the order the model answered."""
    gauge = Gauge()
    seen: list[str] = []

    def reconcile(request: dict[str, Any]) -> str:
        seen.append(request["messages"][1]["content"])
        return json.dumps(
            {"decisions": [{"index": 0, "action": "SUPERSEDE", "target": 1, "text": "Ana is vegan."}]}
        )

    facts = {0: "Ana is vegetarian.", 1: "Ana has become vegan."}
    store = parallel_store(tmp_path, client, model, concurrency=2)
    serve(model, answering(gauge, facts.__getitem__, lambda n: 1.5 if n == 0 else 0.1, reconcile))
    admitted = await admit(store, 2, lambda n: f"turn-{n}: about Ana's diet")
    outcomes = await run_store(client, store, admitted)
    assert [o.state for o in outcomes] == ["resolved", "resolved"]
    assert len(seen) == 1 and "Ana is vegetarian." in seen[0]  # turn 1's reconciliation saw turn 0's line
    lines = {b.text: b.id for _, b in iter_bullets(store.root, "daily")}
    assert replay_sidecar.superseded(store.root)[lines["Ana is vegetarian."]].new_id == lines["Ana is vegan."]


async def test_process_wide_model_slots_cap_every_store(client: Client, tmp_path: Path, model) -> None:
    """run_worker(model_slots=Semaphore(2)) caps the process's model calls below the store's own 4."""
    gauge = Gauge()
    store = parallel_store(tmp_path, client, model, concurrency=4)
    serve(model, answering(gauge, lambda n: f"The user's badge {n} is green.", lambda n: 0.5))
    admitted = await admit(store, 6, lambda n: f"turn-{n}: badge {n} is green")
    outcomes = await run_store(client, store, admitted, model_slots=asyncio.Semaphore(2))
    assert [o.state for o in outcomes] == ["resolved"] * 6
    assert gauge.most == 2


async def test_concurrency_one_keeps_every_stage_on_the_store_queue(
    client: Client, tmp_path: Path, model
) -> None:
    """memory.llm.concurrency = 1: no model queue; the stages run where they always did (INTAKE-15)."""
    gauge = Gauge()
    store = parallel_store(tmp_path, client, model, concurrency=1)
    serve(model, answering(gauge, lambda n: f"The user's mug {n} is red.", lambda n: 0.2))
    admitted = await admit(store, 3, lambda n: f"turn-{n}: mug {n} is red")
    outcomes = await run_store(client, store, admitted)
    assert [o.state for o in outcomes] == ["resolved"] * 3
    assert gauge.most == 1
    history = await client.get_workflow_handle(admitted[0].workflow_id).fetch_history()
    queues = {
        e["activityTaskScheduledEventAttributes"]["taskQueue"]["name"]
        for e in history.to_json_dict()["events"]
        if "activityTaskScheduledEventAttributes" in e
    }
    assert queues == {store.task_queue}


async def test_a_turn_stuck_in_flight_holds_later_commits_back_only_for_the_wait_limit(
    client: Client, tmp_path: Path, model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turn 0's extraction never answers, so it stays in flight. Turn 1 waits for it, then after
    ORDER_WAIT_MAX_SECONDS (2 s here, 5 minutes in production) commits without it and says so in the
    activity summary; turn 0 is still pending, untouched."""
    from tempomem.storage import limits

    monkeypatch.setattr(limits, "ORDER_WAIT_MAX_SECONDS", 2)  # the workflow reads limits.* when it waits
    monkeypatch.setattr(limits, "ORDER_RECHECK_SECONDS", 1)
    gauge = Gauge()
    store = parallel_store(tmp_path, client, model, concurrency=2)
    quick = answering(gauge, lambda n: f"The user's scarf {n} is wool.", lambda n: 0.1)
    serve(model, lambda request: Hang() if "turn-0" in json.dumps(request["messages"]) else quick(request))
    stuck, later = await admit(store, 2, lambda n: f"turn-{n}: scarf {n} is wool")
    outcomes = await run_store(client, store, [later])
    assert [o.state for o in outcomes] == ["resolved"]
    assert daily_texts(store.root) == ["The user's scarf 1 is wool."]
    assert store.intake.view(stuck.intake_id, now=T0).state.value == "pending"
    history = await client.get_workflow_handle(later.workflow_id).fetch_history()
    summaries = [
        e.user_metadata.summary.data.decode()
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes") and e.HasField("user_metadata")
    ]
    assert summaries.count('"reconciliation (stopped waiting for earlier turns)"') == 1


async def test_only_reconciliation_takes_the_serial_queue_and_a_waiting_turn_asks_once(
    client: Client, tmp_path: Path, model
) -> None:
    """Patch ``capture-lean-steps-v1`` (issue #15 item 1): a capture turn's observation is projected in
    the local capture.settle and its record resolved in a local activity, so reconciliation is the only
    activity of the store's serial queue. A turn whose model stages ended while an earlier turn was in
    flight waits for that turn's signal before its first reconciliation: with extractions finishing in
    reverse order, every turn asks to reconcile exactly once (before, each later turn ran a deferred
    reconciliation first). The observations are in audit/, the lines in admission order."""
    store, admitted = await reversed_turns(
        client, tmp_path, model, Gauge(), 4, "The user's kite {n} is red.", 0.4
    )
    assert len([b for _, b in iter_bullets(store.root, "audit")]) == 4
    for a in admitted:
        events = (await client.get_workflow_handle(a.workflow_id).fetch_history()).to_json_dict()["events"]
        serial = [
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
            for e in events
            if "activityTaskScheduledEventAttributes" in e
            and e["activityTaskScheduledEventAttributes"]["taskQueue"]["name"] == store.task_queue
        ]
        assert serial == ["capture.reconcile"]
        local = [
            json.loads(base64.b64decode(m["details"]["data"]["payloads"][0]["data"]))["activity_type"]
            for e in events
            if (m := e.get("markerRecordedEventAttributes", {})).get("markerName") == "core_local_activity"
        ]
        assert local == ["capture.settle", "intake.resolve"]
