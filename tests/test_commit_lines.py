"""The lines one BuJo commit writes, driven directly without a Temporal server (PROV-08, CAP-48, CAP-62..65,
INTENT-18, GRAPH-07, GRAPH-16): the fields reconciliation reads back, who said each line, a task as a note,
intention ends, entities and relations, and a commit that did not land.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from tempomem.activities.curation import CurationActivities
from tempomem.capture import commit
from tempomem.capture.commit import current_lines
from tempomem.capture.plan import (
    PlanEntity,
    PlanLabel,
    PlanMemory,
    PlanRelation,
    RetainedPlan,
    fact_id,
)
from tempomem.messages.capture import CurationInput
from tempomem.recall.embedding import LocalMiniLMEmbedder
from tempomem.recall.index import MemoryIndex
from tempomem.storage.graph import load_graph
from tests.helpers.commit_path import (
    ANA,
    LISBON,
    T0,
    admit,
    context,
    decide,
    lines,
    mem,
    reconcile,
    run_reconcile,
    two_facts_threaded,
)


def test_current_lines_carry_every_field_reconciliation_reads(tmp_path: Path) -> None:
    from tempomem.capture.plan import Existing, PlanLabel
    from tempomem.storage.markdown import Bullet, append_bullets

    label = {"kind": "preference", "scope": "food", "key": "diet", "value": "vegan", "attribution": "owner"}
    rec = "2026-12-01T09:00:00.000Z"
    lines = [
        Bullet(signifier="–", text="Ana is vegan.", id="c-0001", type="fact", status="open", recorded=rec,
               due="2026-12-31", labels=json.dumps([label]), entities=(ANA,), src="user", attr="owner"),
        Bullet(signifier="–", text="Bad labels.", id="c-0002", type="fact", status="done", recorded=rec,
               labels="not json"),
        Bullet(signifier="–", text="Dropped.", id="c-0003", type="note", status="dropped", recorded=rec),
        Bullet(signifier="–", text="Invalidated.", id="c-0004", type="note", status="invalidated",
               recorded=rec),
    ]  # fmt: skip
    append_bullets(tmp_path / "daily" / "2026-12-01.md", "2026-12-01", lines)
    assert current_lines(tmp_path) == [
        Existing(id="c-0001", text="Ana is vegan.", type="fact", signifier="–", recorded=rec,
                 labels=(PlanLabel(**label),), attr="owner", src="user", entities=(ANA,), status="open",
                 due="2026-12-31"),
        Existing(id="c-0002", text="Bad labels.", type="fact", signifier="–", recorded=rec, status="done"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def embedder():
    return LocalMiniLMEmbedder()


async def test_noop_and_drop_decisions_write_nothing_and_do_not_stop_the_rest(
    tmp_path: Path, embedder
) -> None:
    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    plan = RetainedPlan(
        memories=tuple(mem(i, f"Memory number {i}.") for i in range(4)),
        entities=(),
        relations=(),
        reviewed=True,
        decisions=(decide(0, "NOOP"), decide(1, "DROP"), decide(2), decide(3, "NOOP")),
    )
    await reconcile(ctx, record, plan)
    assert list(lines(ctx.root)) == [fact_id(record, 2)]


async def test_a_superseding_intention_inherits_the_end_of_what_it_replaces(tmp_path: Path, embedder) -> None:
    """INTENT-18: a replacement keeps the target's end date unless it states its own."""
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0)
    first = PlanMemory(index=0, text="Plan the Lisbon trip.", kind="fact", source="user", salience=0.9,
                       entities=(), intent_state="planned", valid_to="2026-12-20")  # fmt: skip
    plan = RetainedPlan(memories=(first,), entities=(), relations=(), reviewed=True, decisions=(decide(0),))
    await reconcile(ctx, r1, plan)
    target = fact_id(r1, 0)
    assert lines(ctx.root)[target].due == "2026-12-20"  # type: ignore[attr-defined]
    r2 = admit(ctx, "r2", 5)
    second = first.model_copy(
        update={"text": "The Lisbon trip is booked.", "intent_state": "done", "valid_to": None}
    )
    await reconcile(
        ctx,
        r2,
        plan.model_copy(
            update={"memories": (second,), "decisions": (decide(0, "SUPERSEDE", target_id=target),)}
        ),
    )
    new = lines(ctx.root)[fact_id(r2, 0)]
    assert (new.status, new.due) == ("done", "2026-12-20")  # type: ignore[attr-defined]


async def test_only_an_intention_inherits_an_end(tmp_path: Path, embedder) -> None:
    """INTENT-18 is about intentions: a plain fact replacing a dated line states no end, so it gets none,
    even when another memory of the same plan is an intention."""
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0)
    dated = PlanMemory(index=0, text="Renew the passport.", kind="fact", source="user", salience=0.9,
                       entities=(), intent_state="planned", valid_to="2026-12-20")  # fmt: skip
    plan = RetainedPlan(memories=(dated,), entities=(), relations=(), reviewed=True, decisions=(decide(0),))
    await reconcile(ctx, r1, plan)
    target = fact_id(r1, 0)
    r2 = admit(ctx, "r2", 5)
    plain = mem(0, "The passport office moved to the harbour.")
    intention = dated.model_copy(update={"index": 1, "text": "Book the ferry.", "valid_to": None})
    await reconcile(
        ctx,
        r2,
        RetainedPlan(
            memories=(plain, intention),
            entities=(),
            relations=(),
            reviewed=True,
            decisions=(decide(0, "SUPERSEDE", target_id=target), decide(1)),
        ),
    )
    assert lines(ctx.root)[fact_id(r2, 0)].due is None  # type: ignore[attr-defined]


async def test_reconcile_without_a_plan_is_a_content_free_storage_failure(tmp_path: Path, embedder) -> None:
    from temporalio.exceptions import ApplicationError

    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    with pytest.raises(ApplicationError) as err:
        await run_reconcile(ctx, record)
    assert (err.value.type, err.value.message, err.value.non_retryable) == (
        "storage_error",
        "CaptureFailure",
        True,
    )


async def test_provenance_of_add_supersede_noop_and_the_superseded_line(tmp_path: Path, embedder) -> None:
    """PROV-08: ADD and SUPERSEDE stamp the capturing conversation; NOOP and the superseded old line keep
    the provenance they had (UPDATE: test_update_rewrites_in_place_and_records_the_conversation)."""
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0, conversation="web:first")
    first = RetainedPlan(
        memories=(mem(0, "Ana lives in Porto.", ANA), mem(1, "Ana plays the cello.", ANA)),
        entities=(PlanEntity(id=ANA, name="Ana", type="person"),),
        relations=(),
        reviewed=True,
        decisions=(decide(0), decide(1)),
    )
    await reconcile(ctx, r1, first)
    porto, cello = fact_id(r1, 0), fact_id(r1, 1)
    r2 = admit(ctx, "r2", 5, conversation="web:second")
    second = RetainedPlan(
        memories=(mem(0, "Ana moved to Lisbon.", ANA), mem(1, "Ana plays the cello.", ANA)),
        entities=(PlanEntity(id=ANA, name="Ana", type="person"),),
        relations=(),
        reviewed=True,
        decisions=(decide(0, "SUPERSEDE", target_id=porto), decide(1, "NOOP", target_id=cello)),
    )
    await reconcile(ctx, r2, second)
    found = lines(ctx.root)
    sessions = {k: b.source_session for k, b in found.items()}  # type: ignore[attr-defined]
    assert sessions == {porto: "web:first", cello: "web:first", fact_id(r2, 0): "web:second"}


@pytest.mark.parametrize(
    ("speaker_kind", "trigger_kind", "user_attr"),
    [("human-turn", "none", "owner"), ("human-turn", "cron", "assistant"), ("unknown", "none", "assistant")],
)
async def test_each_line_records_who_said_it_and_a_task_becomes_a_note(
    tmp_path: Path, embedder, speaker_kind: str, trigger_kind: str, user_attr: str
) -> None:
    """CAP-63 and the attribution of a captured line: the owner only on a host-verified owner turn
    (a human turn that no trigger started); a document stays a document; everything else is the
    assistant's word. An event keeps its own signifier. INTENT-01: memory is not a second task list, so
    a task the model extracted is written as a history note, never an open task."""
    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0, speaker_kind=speaker_kind, trigger_kind=trigger_kind)
    label = PlanLabel(
        kind="fact", scope="agent", key="other:fruit", value="figo de São Paulo", attribution="owner"
    )
    memories = (
        mem(0, "Ana likes figs.").model_copy(update={"labels": (label,)}),
        PlanMemory(
            index=1,
            text="Ana said figs are best dried.",
            kind="fact",
            source="assistant",
            salience=0.9,
            entities=(),
        ),
        PlanMemory(
            index=2,
            text="The fig guide lists six kinds.",
            kind="fact",
            source="document",
            salience=0.9,
            entities=(),
        ),
        mem(3, "Buy figs on Friday.", kind="task"),
        mem(4, "Fig festival on Saturday.", kind="event"),
    )
    plan = RetainedPlan(
        memories=memories,
        entities=(),
        relations=(),
        reviewed=True,
        decisions=tuple(decide(i) for i in range(5)),
    )
    await reconcile(ctx, record, plan)
    found = lines(ctx.root)
    got = {
        i: (
            found[fact_id(record, i)].attr,
            found[fact_id(record, i)].type,  # type: ignore[attr-defined]
            found[fact_id(record, i)].signifier,
        )
        for i in range(5)
    }  # type: ignore[attr-defined]
    # The labels are stored as sorted-key JSON with text as written; src is the model's source.
    stored = found[fact_id(record, 0)].labels  # type: ignore[attr-defined]
    assert json.loads(stored) == [label.model_dump()] and "São Paulo" in stored
    assert list(json.loads(stored)[0]) == sorted(label.model_dump())
    assert found[fact_id(record, 3)].labels is None  # type: ignore[attr-defined]
    assert [found[fact_id(record, i)].src for i in range(3)] == ["user", "assistant", "document"]  # type: ignore[attr-defined]
    assert got == {
        0: (user_attr, "fact", "–"),
        1: ("assistant", "fact", "–"),
        2: ("document", "fact", "–"),
        3: (user_attr, "note", "–"),
        4: (user_attr, "event", "o"),
    }


async def test_the_commit_publishes_entities_alone_and_only_relations_between_kept_entities(
    tmp_path: Path, embedder
) -> None:
    """The graph gets a plan's entities even without relations, and only relations whose two ends are
    entities of kept lines (an end no line names would be an unknown entity to the graph)."""
    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    plan = RetainedPlan(
        memories=(mem(0, "Ana loves the sea.", ANA), mem(1, "Lisbon is windy.", LISBON)),
        entities=(
            PlanEntity(id=ANA, name="Ana", type="person"),
            PlanEntity(id=LISBON, name="Lisbon", type="place"),
        ),
        relations=(PlanRelation(from_id=ANA, relation="lives_in", to_id=LISBON),),
        reviewed=True,
        decisions=(decide(0), decide(1, "DROP")),
    )
    await reconcile(ctx, record, plan)
    graph = load_graph(ctx.root)
    assert sorted(graph.entities) == [ANA] and graph.relations == {}


async def test_the_commit_indexes_with_the_store_embedder(tmp_path: Path, embedder) -> None:
    # The index generation the commit writes carries the store's embedding identity: a search with that
    # embedder reads it as it is (no rebuild to a new generation).
    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    await reconcile(ctx, record, two_facts_threaded(record))
    index = MemoryIndex(ctx.root, embedder)
    generation = index.active_generation()
    assert generation is not None
    assert [h.id for h in index.search("Where does Ana live?", limit=1)] == [fact_id(record, 0)]
    assert index.active_generation() == generation


@pytest.mark.parametrize("skipped", ["append_bullets", "apply_delta"])
async def test_a_commit_that_did_not_land_is_a_storage_failure(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch, skipped: str
) -> None:
    """RPL-06: the commit proves Markdown and sidecar hold the delta before the receipt may retire the
    intent; a write that silently did not happen is a content-free storage failure."""
    from temporalio.exceptions import ApplicationError

    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    if skipped == "append_bullets":
        monkeypatch.setattr(commit, "append_bullets", lambda *a, **k: 0)
    else:
        monkeypatch.setattr(commit.replay_sidecar, "apply_delta", lambda *a, **k: 0)
    with pytest.raises(ApplicationError) as err:
        await reconcile(ctx, record, two_facts_threaded(record))
    assert (err.value.type, err.value.message) == ("storage_error", "CaptureFailure")
    # Called directly (no activity around it), the commit raises the typed failure, whose message is the
    # category alone: nothing of the plan or the store.
    with pytest.raises(commit.CaptureFailure) as direct:
        commit.commit_plan(
            ctx.root, embedder, record, ctx.intake.load_payload(record), two_facts_threaded(record)
        )
    assert (direct.value.category.value, str(direct.value)) == ("storage_error", "storage_error")


async def test_an_update_rewrites_only_the_file_that_holds_its_target(tmp_path: Path, embedder) -> None:
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0)
    await reconcile(ctx, r1, _single("Ana lives in Porto."))
    r2 = admit(ctx, "r2", 24 * 60)  # the next day: its own daily file
    await reconcile(ctx, r2, _single("Ana plays the cello."))
    other = ctx.root / "daily" / "2026-12-02.md"
    before = (other.stat().st_ino, other.read_bytes())
    r3 = admit(ctx, "r3", 24 * 60 + 5)
    update = decide(0, "UPDATE", target_id=fact_id(r1, 0), text="Ana lives in Lisbon.")
    await reconcile(ctx, r3, _single("Ana lives in Lisbon.").model_copy(update={"decisions": (update,)}))
    assert lines(ctx.root)[fact_id(r1, 0)].text == "Ana lives in Lisbon."  # type: ignore[attr-defined]
    assert (other.stat().st_ino, other.read_bytes()) == before  # untouched, not rewritten in place


def _single(text: str) -> RetainedPlan:
    return RetainedPlan(
        memories=(mem(0, text, ANA),),
        entities=(PlanEntity(id=ANA, name="Ana", type="person"),),
        relations=(),
        reviewed=True,
        decisions=(decide(0),),
    )


async def test_CAP48_a_failed_review_on_the_final_attempt_keeps_the_unreviewed_plan(
    tmp_path: Path, embedder
) -> None:
    """The review call fails (the model endpoint is a closed port): before the final attempt that is a
    failed attempt; on the final one the plan is kept whole, marked reviewed, nothing dropped."""
    from temporalio.exceptions import ApplicationError

    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    said = PlanMemory(index=0, text="I looked up three ferry times.", kind="fact", source="assistant",
                      salience=0.9, entities=())  # fmt: skip
    plan = RetainedPlan(memories=(said, mem(1, "The ferry leaves at nine.")), entities=(), relations=())
    ctx.intake.begin_attempt(record, now=T0 + timedelta(hours=1))
    ctx.intake.save_plan(record, plan.to_bytes(), now=T0 + timedelta(hours=1))
    activities = CurationActivities(ctx)
    with pytest.raises(ApplicationError):
        await ActivityEnvironment().run(
            activities.review, CurationInput(record, ctx.store_id, final_attempt=False)
        )
    assert RetainedPlan.from_bytes(ctx.intake.load_plan(record) or b"").reviewed is False
    result = await ActivityEnvironment().run(
        activities.review, CurationInput(record, ctx.store_id, final_attempt=True)
    )
    kept = RetainedPlan.from_bytes(ctx.intake.load_plan(record) or b"")
    assert kept.reviewed and [m.text for m in kept.live()] == [said.text, "The ferry leaves at nine."]
    assert (result.model_calls, result.items) == (1, 2)


async def test_an_update_does_not_end_the_walk_over_the_decisions(tmp_path: Path, embedder) -> None:
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0)
    await reconcile(ctx, r1, _single("The ferry leaves at nine."))
    target = fact_id(r1, 0)
    r2 = admit(ctx, "r2", 5)
    plan = RetainedPlan(
        memories=(mem(0, "The ferry leaves at ten."), mem(1, "The harbour café opens at eight.")),
        entities=(),
        relations=(),
        reviewed=True,
        decisions=(decide(0, "UPDATE", target_id=target, text="The ferry leaves at ten."), decide(1)),
    )
    await reconcile(ctx, r2, plan)
    texts = {i: b.text for i, b in lines(ctx.root).items()}  # type: ignore[attr-defined]
    assert texts == {target: "The ferry leaves at ten.", fact_id(r2, 1): "The harbour café opens at eight."}


async def test_graph07_graph16_each_fact_links_its_own_entities_and_a_speaker_makes_none(
    tmp_path: Path, embedder
) -> None:
    """GRAPH-07: no Cartesian product: each line names only the entities its own memory named.
    GRAPH-16 / STORE-10: a host-verified owner turn adds no entity for the speaker by itself."""
    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0, speaker_kind="human-turn")
    plan = RetainedPlan(
        memories=(
            mem(0, "Ana moved to Lisbon.", ANA, LISBON),
            mem(1, "Ana likes tea.", ANA),
            mem(2, "The weather was rainy."),
        ),
        entities=(
            PlanEntity(id=ANA, name="Ana", type="person"),
            PlanEntity(id=LISBON, name="Lisbon", type="place"),
        ),
        relations=(),
        reviewed=True,
        decisions=(decide(0), decide(1), decide(2)),
    )
    await reconcile(ctx, record, plan)
    by_text = {b.text: b.entities for b in lines(ctx.root).values()}  # type: ignore[attr-defined]
    assert by_text == {
        "Ana moved to Lisbon.": (ANA, LISBON),
        "Ana likes tea.": (ANA,),
        "The weather was rainy.": (),
    }
    g = load_graph(ctx.root)
    assert set(g.entities) == {ANA, LISBON}  # nobody for the speaker
    assert g.entities[LISBON].memories == (fact_id(record, 0),)


async def test_INTENT21_a_retained_plan_finishes_its_admitted_proposals_with_the_switch_off(
    tmp_path: Path, embedder
) -> None:
    """INTENT-21: a plan retained while ``capture.intentLifecycle`` was on keeps its admitted proposal after
    the switch goes off (this store's capture settings have it off): the commit writes the planned state
    and the end as decided, never reclassified retrospectively."""
    ctx = context(tmp_path / "mem", embedder)
    assert ctx.capture is not None and ctx.capture.intent_lifecycle is False
    record = admit(ctx, "r1", 0)
    proposal = PlanMemory(index=0, text="Renew the passport.", kind="fact", source="user", salience=0.9,
                          entities=(), intent_state="planned", valid_to="2027-01-31")  # fmt: skip
    plan = RetainedPlan(
        memories=(proposal,), entities=(), relations=(), reviewed=True, decisions=(decide(0),)
    )
    await reconcile(ctx, record, plan)
    line = lines(ctx.root)[fact_id(record, 0)]
    assert (line.status, line.due) == ("scheduled", "2027-01-31")  # type: ignore[attr-defined]


async def test_a_damaged_plan_is_a_content_free_storage_failure(tmp_path: Path, embedder) -> None:
    """A retained plan that no longer validates (damaged, or edited by hand) fails the stage as a
    content-free ``storage_error``: neither its text nor pydantic's quote of it reaches the error that
    Temporal records, and nothing is committed."""
    from temporalio.exceptions import ApplicationError

    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    plan = json.loads(two_facts_threaded(record).to_bytes())
    plan["memories"][0]["salience"] = "Okapi-5521 is the safe code"
    ctx.intake.begin_attempt(record, now=T0 + timedelta(hours=1))
    ctx.intake.save_plan(record, json.dumps(plan).encode(), now=T0 + timedelta(hours=1))
    with pytest.raises(ApplicationError) as err:
        await run_reconcile(ctx, record)
    assert (err.value.type, err.value.message) == ("storage_error", "CaptureFailure")
    assert "Okapi" not in str(err.value) and "Okapi" not in repr(err.value.__cause__)
    assert lines(ctx.root) == {}
    with pytest.raises(ValueError) as direct:  # the model itself never quotes what it refused
        RetainedPlan.model_validate_json(json.dumps(plan))
    assert "Okapi" not in str(direct.value)
