"""BuJo capture end to end on a real dev server with a scripted chat model behind real HTTP:
extraction → review → reconciliation + commit (CAP-02..CAP-75, RPL-06..08, PROV-08)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from tempomem.storage import graph, replay_sidecar
from tempomem.storage.intake_records import RecordState
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import CompletedTurn
from tests.conftest import make_store, running_worker
from tests.scripted_model import Delay, HttpError, ScriptedModelServer
from tests.test_capture_flow import _payload_data, outcome_of

T1 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def capture_store(tmp_path: Path, client: Client, model: ScriptedModelServer, **capture: object):
    memory: dict[str, object] = {"llm": {"provider": "ollama", "model": "scripted", "endpoint": model.url}}
    if capture:
        memory["capture"] = capture
    store = make_store(tmp_path / "mem", client, mode="bujo", **memory)
    assert store.config.memory.mode == "bujo"
    return store


def turn(run_id: str, user: str, answer: str, at: datetime = T1, **kw: object) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id,
        conversation_id=str(kw.pop("conversation_id", "web:conv-1")),
        speaker_kind=str(kw.pop("speaker_kind", "human-turn")),  # type: ignore[arg-type]
        user_text=user,
        final_answer=answer,
        admitted_at=at,
    )


def extraction(*memories: dict, entities: list | None = None, relations: list | None = None) -> str:
    return json.dumps({"memories": list(memories), "entities": entities or [], "relations": relations or []})


def memory(text: str, source: str = "user", salience: float = 0.9, kind: str = "fact", entities=()) -> dict:
    return {"text": text, "kind": kind, "source": source, "salience": salience, "entities": list(entities)}


ANA = [{"ref": "ana", "name": "Ana", "type": "person"}]


def bullets(root: Path) -> list:
    return [b for _, b in iter_bullets(root, "daily")]


async def test_capture_extracts_reviews_and_commits(client: Client, tmp_path: Path, model) -> None:
    """CAP-01, WM-04: admitted, the raw audit projected, then curated in the background; CAP-03: one
    review call; CAP-24: the line keeps the source the extraction marked (user, the owner); GRAPH-01:
    the entity goes to graph.jsonl; PROV-10: the session is the host's conversation id, never the model's."""
    store = capture_store(tmp_path, client, model)
    model.push(
        extraction(
            memory("Ana, the user's sister, is vegetarian.", entities=["ana"]),
            memory("I searched three restaurant sites.", source="assistant", salience=0.2),  # CAP-26
            entities=ANA,
        ),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    result = await store.persist_completed_turn(
        turn("cap-1", "My sister Ana is vegetarian.", "Noted that Ana is vegetarian; I searched three sites.")
    )
    async with running_worker(client, store):
        outcome = await outcome_of(client, result)
    assert outcome.state == "resolved"
    assert len(model.calls) == 2  # extraction + review; the clearly novel line skipped reconcile (CAP-07)
    [line] = bullets(store.root)
    assert line.text == "Ana, the user's sister, is vegetarian."
    assert line.id.startswith("c-") and line.entities == ("person:ana",)
    assert (line.src, line.attr, line.source_session, line.signifier) == ("user", "owner", "web:conv-1", "–")
    assert [e.id for e in graph.load_graph(store.root).entities.values()] == ["person:ana"]
    assert next(b.text for _, b in iter_bullets(store.root, "audit")).startswith("Assistant: Noted")
    assert store.intake.view(result.intake_id, now=T1).state is RecordState.RESOLVED
    assert store.search("what does my sister eat")[0].id == line.id
    # Memory text and model output never reach Temporal history.
    history = await client.get_workflow_handle(result.workflow_id).fetch_history()
    decoded = [base64.b64decode(d).decode("utf-8", "replace") for d in _payload_data(history.to_json_dict())]
    assert not [d for d in decoded if "vegetarian" in d or "restaurant" in d]


def _activities(history) -> list[str]:
    return [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in history.to_json_dict()["events"]
        if "activityTaskScheduledEventAttributes" in e
    ]


async def test_a_failed_projection_in_settle_is_one_attempt_and_the_retry_curates_once(
    client: Client, tmp_path: Path, model
) -> None:
    """Patch capture-lean-steps-v1: a capture turn's observation is projected in capture.settle. A file
    where audit/ belongs fails that projection: the attempt is recorded as storage_error before any
    model call (the stages never start), and once the file is gone the retry projects, curates with one
    extraction and one review call and resolves, with no projection activity scheduled at all."""
    store = capture_store(tmp_path, client, model)
    store.root.mkdir(parents=True, exist_ok=True)
    (store.root / "audit").write_text("")
    model.push(
        extraction(memory("The user's cat is called Miso.")),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    admitted = await store.persist_completed_turn(turn("settle-fail", "My cat is Miso.", "Noted."))
    async with running_worker(client, store):
        while store.intake.view(admitted.intake_id, now=T1).failure_category is None:
            await asyncio.sleep(0.1)
        assert store.intake.view(admitted.intake_id, now=T1).failure_category.value == "storage_error"
        assert model.calls == []
        (store.root / "audit").unlink()
        outcome = await outcome_of(client, admitted)
    assert (outcome.state, outcome.attempts, outcome.model_calls) == ("resolved", 2, 2)
    assert len(model.calls) == 2
    assert [b.text for b in bullets(store.root)] == ["The user's cat is called Miso."]
    assert len([b for _, b in iter_bullets(store.root, "audit")]) == 1
    history = await client.get_workflow_handle(admitted.workflow_id).fetch_history()
    assert "capture.project" not in _activities(history)


async def test_review_stage_is_not_scheduled_when_nothing_is_eligible(
    client: Client, tmp_path: Path, model
) -> None:
    """CAP-06 / CAP-41: with nothing eligible for review (the owner's labelled preference, or nothing
    extracted) extraction marks the plan reviewed and the workflow skips the review activity (one
    dispatch fewer, patch ``skip-empty-review-v1``); an eligible line still gets its review stage."""
    store = capture_store(tmp_path, client, model)
    preference = memory("The user prefers window seats.", kind="preference") | {
        "labels": [{"kind": "preference", "scope": "agent", "key": "seat:plane", "value": "window"}]
    }
    model.push(
        extraction(preference),  # a labelled owner preference: not eligible (CAP-40)
        extraction(),  # nothing extracted
        extraction(memory("The user's flat is on the 4th floor.")),  # an owner fact: eligible
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    results = []
    async with running_worker(client, store):
        # One at a time, so the scripted answers meet their turns in order.
        for i, text in enumerate(["I like window seats.", "Thanks!", "I live on the 4th floor."]):
            r = await store.persist_completed_turn(
                turn(f"rev-{i}", text, "Noted.", at=T1 + timedelta(minutes=i))
            )
            assert (await outcome_of(client, r)).state == "resolved"
            results.append(r)
    stages = []
    for r in results:
        history = await client.get_workflow_handle(r.workflow_id).fetch_history()
        stages.append([a for a in _activities(history) if a.startswith("capture.")])
    assert stages == [  # the projection runs in the local capture.settle (patch capture-lean-steps-v1)
        ["capture.extract", "capture.reconcile"],
        ["capture.extract", "capture.reconcile"],
        ["capture.extract", "capture.review", "capture.reconcile"],
    ]
    assert len(model.calls) == 4  # three extractions and the one review call
    assert sorted(b.text for b in bullets(store.root)) == [
        "The user prefers window seats.",
        "The user's flat is on the 4th floor.",
    ]


async def test_invalid_output_is_a_failed_attempt_then_the_retry_succeeds(
    client: Client, tmp_path: Path, model
):
    """CAP-73: invalid output is one failed durable attempt; the record stays pending and the retry
    succeeds (INTAKE-13)."""
    store = capture_store(tmp_path, client, model)
    model.push(
        '{"memories": [], "entities": [], "relations": []} trailing prose',  # CAP-12: rejected
        extraction(memory("The user's flat is on the 4th floor.", kind="fact")),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    result = await store.persist_completed_turn(turn("cap-2", "I live on the 4th floor.", "Noted."))
    async with running_worker(client, store):
        outcome = await outcome_of(client, result)
    assert (outcome.state, outcome.attempts) == ("resolved", 2)
    assert [b.text for b in bullets(store.root)] == ["The user's flat is on the 4th floor."]


async def test_retained_plan_means_no_second_extraction(client: Client, tmp_path: Path, model) -> None:
    store = capture_store(tmp_path, client, model)
    model.push(
        extraction(memory("The user's bike is a green Brompton.")),
        HttpError(500),  # the review call fails: one failed attempt
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    result = await store.persist_completed_turn(turn("cap-3", "My bike is a green Brompton.", "Nice bike."))
    async with running_worker(client, store):
        outcome = await outcome_of(client, result)
    assert (outcome.state, outcome.attempts) == ("resolved", 2)
    extraction_calls = [
        c for c in model.calls if "extract durable long-term memories" in json.dumps(c.messages)
    ]
    assert len(extraction_calls) == 1 and len(model.calls) == 3  # CAP-05, CAP-75
    assert len(bullets(store.root)) == 1


async def test_users_correction_supersedes_and_keeps_history(client: Client, tmp_path: Path, model) -> None:
    store = capture_store(tmp_path, client, model)
    model.push(
        extraction(memory("Ana is vegetarian.", entities=["ana"]), entities=ANA),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    first = await store.persist_completed_turn(turn("cap-4a", "Ana is vegetarian.", "Noted."))
    async with running_worker(client, store):
        await outcome_of(client, first)
        [old] = bullets(store.root)
        model.push(
            extraction(memory("Ana has become vegan.", entities=["ana"]), entities=ANA),
            json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
            json.dumps(
                {"decisions": [{"index": 0, "action": "SUPERSEDE", "target": 1, "text": "Ana is vegan."}]}
            ),
        )
        second = await store.persist_completed_turn(
            turn("cap-4b", "Correction: Ana is vegan now.", "Updated.", at=T2, conversation_id="web:conv-2")
        )
        outcome = await outcome_of(client, second)
    assert outcome.state == "resolved"
    # 2 for the first turn, 3 (the maximum, CAP-05) for the second: one batched classifier call (CAP-04)
    assert len(model.calls) == 5
    texts = {b.id: b for b in bullets(store.root)}
    assert old.id in texts and texts[old.id].text == "Ana is vegetarian."  # history stays
    [new] = [b for b in texts.values() if b.id != old.id]
    assert (new.text, new.source_session) == ("Ana is vegan.", "web:conv-2")  # PROV-08
    supersede = replay_sidecar.superseded(store.root)
    assert supersede[old.id].new_id == new.id
    raw = (store.root / ".replay-projection-v1.json").read_text()
    assert "vegan" not in raw and "vegetarian" not in raw  # RPL-03: metadata only


async def test_exact_duplicate_is_noop_without_a_call(client: Client, tmp_path: Path, model) -> None:
    store = capture_store(tmp_path, client, model)
    model.push(
        extraction(memory("The user's dentist is Dr. Silva.")),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
        extraction(memory("the user's dentist is Dr Silva")),  # same words, same order (AMB-18)
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    async with running_worker(client, store):
        a = await store.persist_completed_turn(turn("cap-5a", "My dentist is Dr. Silva.", "Noted."))
        await outcome_of(client, a)
        b = await store.persist_completed_turn(turn("cap-5b", "Dentist: Dr Silva.", "Noted.", at=T2))
        await outcome_of(client, b)
    assert len(model.calls) == 4  # no reconcile call for the duplicate (CAP-56)
    assert len(bullets(store.root)) == 1


async def test_capture_only_and_task_lines(client: Client, tmp_path: Path, model) -> None:
    store = capture_store(tmp_path, client, model, only=["preference"])
    model.push(
        extraction(
            memory("The user prefers window seats.", kind="preference"),
            memory("Book the dentist for Friday.", kind="task"),
        ),
        json.dumps(
            {"decisions": [{"line": 1, "decision": "add_preference"}, {"line": 2, "decision": "keep"}]}
        ),
    )
    result = await store.persist_completed_turn(
        turn("cap-6", "I like window seats; book the dentist.", "OK.")
    )
    async with running_worker(client, store):
        await outcome_of(client, result)
    lines = bullets(store.root)
    assert [b.text for b in lines] == ["The user prefers window seats."]  # CAP-70: only preference kept
    assert all(b.signifier != "[ ]" for b in lines)  # CAP-62: capture never writes an open task


async def test_intention_lifecycle_states_ends_and_supersession(
    client: Client, tmp_path: Path, model
) -> None:
    """INTENT-07/09/10/17/18 with capture.intentLifecycle on."""
    store = capture_store(tmp_path, client, model, intentLifecycle=True)
    plan = memory("The user plans to renew the passport.", kind="note")
    model.push(
        extraction({**plan, "intentState": "planned", "validTo": "2027-03-31"}),
        json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
    )
    async with running_worker(client, store):
        first = await store.persist_completed_turn(
            turn("int-1", "I plan to renew my passport by March.", "OK.")
        )
        await outcome_of(client, first)
        [planned] = bullets(store.root)
        assert (planned.status, planned.due) == ("scheduled", "2027-03-31")  # INTENT-07, INTENT-10
        done = memory("The user renewed the passport.", kind="note")
        model.push(
            extraction({**done, "intentState": "done"}),
            json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),
            json.dumps({"decisions": [{"index": 0, "action": "NOOP", "target": 1}]}),
        )
        second = await store.persist_completed_turn(turn("int-2", "Passport renewed!", "Great.", at=T2))
        await outcome_of(client, second)
        # A trigger turn cannot supply an intention (INTENT-09).
        model.push(
            extraction({**memory("Reminder ran.", source="user"), "intentState": "pending"}),
            json.dumps({"decisions": [{"line": 1, "decision": "keep"}]}),  # now an assistant line: reviewed
        )
        third = await store.persist_completed_turn(
            turn("int-3", "", "Reminder ran.", at=T2, speaker_kind="trigger")
        )
        await outcome_of(client, third)
    lines = {b.text: b for b in bullets(store.root)}
    renewed = lines["The user renewed the passport."]
    # The classifier's NOOP changed the state, so it became a supersession (INTENT-17) that keeps the end.
    assert (renewed.status, renewed.due) == ("done", "2027-03-31")  # INTENT-18
    assert replay_sidecar.superseded(store.root)[planned.id].new_id == renewed.id
    assert lines["The user plans to renew the passport."].status == "scheduled"  # history stays
    reminder = lines["Reminder ran."]
    assert (reminder.status, reminder.due) == ("open", None)


async def test_a_failed_model_call_publishes_no_graph_state(client: Client, tmp_path: Path, model) -> None:
    """CAP-74, GRAPH-06: the extraction named an entity and a line, then the review call fails (HTTP 500;
    the script has nothing after it, so the retries fail too). Nothing of the turn is published: no
    graph entity, no daily line, nothing in the replay sidecar; the record stays pending with the failed
    attempt counted and its category recorded (content-free)."""
    from tempomem.storage.intake import Intake
    from tests.test_capture_flow import wait_until

    store = capture_store(tmp_path, client, model)
    model.push(
        extraction(memory("Ana, the user's sister, is vegetarian.", entities=["ana"]), entities=ANA),
        HttpError(500),
    )
    result = await store.persist_completed_turn(turn("cap-74", "My sister Ana is vegetarian.", "Noted."))
    intake = Intake(store.root)

    def failed_once() -> bool:
        view = intake.view(result.intake_id, now=datetime.now(UTC))
        return view.attempts >= 1 and view.failure_category is not None

    async with running_worker(client, store):
        await wait_until(failed_once, timeout=60)
    view = intake.view(result.intake_id, now=datetime.now(UTC))
    assert view.state is RecordState.PENDING
    assert len(model.calls) >= 2  # the extraction ran and the review was asked
    assert graph.load_graph(store.root).entities == {}
    assert bullets(store.root) == []
    assert replay_sidecar.superseded(store.root) == {}
    assert not (store.root / "graph.jsonl").exists() or (store.root / "graph.jsonl").read_text() == ""


async def test_capture_runs_after_admission_and_never_holds_up_the_host(
    client: Client, tmp_path: Path, model
) -> None:
    """CAP-09, GRAPH-05: capture (and the graph it feeds) runs only after the durable local admission,
    one turn at a time per store, off the provider path. Admitted with no worker, a turn is on disk and
    the model was never asked; while the worker's model call for it hangs for 4 s, the host admits a
    second turn at once; then both are curated, the first first."""
    import time

    from tests.test_capture_flow import wait_until

    store = capture_store(tmp_path, client, model)
    first = await store.persist_completed_turn(turn("cap-9a", "My sister Ana is vegetarian.", "Noted."))
    assert store.intake.view(first.intake_id, now=T1).state is RecordState.PENDING
    assert model.calls == []  # admission asked no model

    def respond(body: dict) -> str | Delay:
        """Answers by what is asked, so overlapping model stages of the two turns cannot swap answers."""
        asked = json.dumps(body.get("messages", []))
        if "extract durable long-term memories" not in asked:
            return json.dumps({"decisions": [{"line": 1, "decision": "keep"}]})
        if "Ana" in asked:
            ana = memory("Ana, the user's sister, is vegetarian.", entities=["ana"])
            return Delay(4, extraction(ana, entities=ANA))  # the first turn's extraction is slow
        return extraction(memory("The user's flat is on the 4th floor."))

    model.push(*[respond] * 8)
    async with running_worker(client, store):
        await wait_until(lambda: len(model.calls) == 1, timeout=30, step=0.02)  # the extraction hangs
        started = time.monotonic()
        second = await store.persist_completed_turn(
            turn("cap-9b", "I live on the 4th floor.", "Noted.", at=T1 + timedelta(minutes=1))
        )
        assert time.monotonic() - started < 2.0  # not behind the 4 s model call
        assert second.status == "admitted"
        assert [(await outcome_of(client, r)).state for r in (first, second)] == ["resolved", "resolved"]
    assert [b.text for b in bullets(store.root)] == [
        "Ana, the user's sister, is vegetarian.",
        "The user's flat is on the 4th floor.",
    ]
    assert [e.id for e in graph.load_graph(store.root).entities.values()] == ["person:ana"]
