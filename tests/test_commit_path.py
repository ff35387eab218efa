"""The BuJo semantic commit driven directly, without a Temporal server (RPL-06..RPL-08, CAP-49..CAP-65,
PROV-08, AMB-28): what one reconciliation publishes in each canonical place, that a repeat publishes
nothing more, the order of the commit boundaries (a stop after each leaves only states a reader may
see), and which lines reconciliation is offered.

The activity runs in the SDK's own ``ActivityEnvironment`` (heartbeats, no server) on a real store
(Markdown, graph, sidecar, DuckDB/LanceDB index, real embedder). Plans carry their decisions, as a
retained intent does after a crash (RPL-07), so no model is needed; the model-facing stages are
covered by tests/test_capture_pipeline.py.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tempomem.capture import commit
from tempomem.capture.commit import current_lines, plan_edges
from tempomem.capture.plan import (
    PlanEntity,
    RetainedPlan,
    fact_id,
)
from tempomem.recall.embedding import LocalMiniLMEmbedder
from tempomem.recall.index import MemoryIndex
from tempomem.storage import replay_sidecar
from tempomem.storage.graph import load_graph
from tempomem.storage.health import audit
from tests.helpers.canonical import canonical_bytes
from tests.helpers.commit_path import (
    ANA,
    LISBON,
    T0,
    admit,
    context,
    decide,
    index_ids,
    lines,
    mem,
    reconcile,
    run_reconcile,
    two_facts_threaded,
)


@pytest.fixture(scope="module")
def embedder():
    return LocalMiniLMEmbedder()


async def test_commit_publishes_each_place_once(tmp_path: Path, embedder) -> None:
    ctx = context(tmp_path / "mem", embedder)
    record = admit(ctx, "r1", 0)
    await reconcile(ctx, record, two_facts_threaded(record))
    first, second = fact_id(record, 0), fact_id(record, 1)

    found = lines(ctx.root)
    assert sorted(found) == sorted([first, second])
    assert found[first].text == "Ana, the user's sister, lives in Lisbon."  # type: ignore[attr-defined]
    assert found[first].entities == (ANA, LISBON)  # type: ignore[attr-defined]
    # The graph links each entity to exactly the lines that name it; the relation to the lines naming both.
    g = load_graph(ctx.root)
    assert g.entities[ANA].memories == tuple(sorted([first, second]))
    assert g.entities[LISBON].memories == (first,)
    assert [(r.from_, r.relation, r.to, r.memories) for r in g.relations.values()] == [
        (ANA, "lives_in", LISBON, (first,))
    ]
    # CAP-64: the thread edge is published in the sidecar, from the new note to what it continues.
    assert replay_sidecar.threads(ctx.root) == {(second, first): 1}
    assert replay_sidecar.superseded(ctx.root) == {}
    assert index_ids(ctx.root) == {first, second}
    plan = RetainedPlan.from_bytes(ctx.intake.load_plan(record) or b"")
    assert plan.committed

    # RPL-07: a repeated reconciliation (a retry after the commit) changes no byte and adds no row.
    before = canonical_bytes(ctx.root)
    await run_reconcile(ctx, record)
    assert canonical_bytes(ctx.root) == before
    assert index_ids(ctx.root) == {first, second}
    report = audit(ctx.root, now=T0 + timedelta(hours=2))
    assert (report.problems, report.mismatches) == ([], [])


async def test_supersede_keeps_history_and_current_lines_offer_only_the_live(
    tmp_path: Path, embedder
) -> None:
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0)
    await reconcile(
        ctx,
        r1,
        RetainedPlan(
            memories=(mem(0, "Ana is vegetarian.", ANA), mem(1, "Book the Lisbon flight.", kind="task")),
            entities=(PlanEntity(id=ANA, name="Ana", type="person"),),
            relations=(),
            reviewed=True,
            decisions=(decide(0), decide(1)),
        ),
    )
    old, task = fact_id(r1, 0), fact_id(r1, 1)
    assert {e.id for e in current_lines(ctx.root)} == {old, task}

    r2 = admit(ctx, "r2", 5)
    await reconcile(
        ctx,
        r2,
        RetainedPlan(
            memories=(mem(0, "Ana has become vegan.", ANA), mem(1, "Book the Porto flight.", kind="task")),
            entities=(PlanEntity(id=ANA, name="Ana", type="person"),),
            relations=(),
            reviewed=True,
            decisions=(
                decide(0, "SUPERSEDE", target_id=old, text="Ana is vegan."),
                # CAP-65: superseding a task invalidates it; the replacement is a note.
                decide(1, "SUPERSEDE", target_id=task, invalidate=task),
            ),
        ),
    )
    new, note = fact_id(r2, 0), fact_id(r2, 1)
    found = lines(ctx.root)
    # The old line stays as history, unchanged; the sidecar records who replaced it and when.
    assert found[old].text == "Ana is vegetarian." and found[old].status != "invalidated"  # type: ignore[attr-defined]
    assert found[new].text == "Ana is vegan."  # type: ignore[attr-defined]
    assert found[task].status == "invalidated"  # type: ignore[attr-defined]
    # CAP-65: the replacement of a task is a note (the BuJo "–" signifier), even when extracted as a task.
    assert found[note].signifier == "–" and found[note].type != "task"  # type: ignore[attr-defined]
    sup = replay_sidecar.superseded(ctx.root)
    assert {k: v.new_id for k, v in sup.items()} == {old: new, task: note}
    assert sup[old].at.startswith("2026-12-01T09:05:00")  # the replacing turn's admission instant
    # AMB-28: reconciliation is offered neither superseded nor invalidated lines.
    assert {e.id for e in current_lines(ctx.root)} == {new, note}


async def test_update_rewrites_in_place_and_records_the_conversation(tmp_path: Path, embedder) -> None:
    """PROV-09: the line names the latest conversation that contributed to it."""
    ctx = context(tmp_path / "mem", embedder)
    r1 = admit(ctx, "r1", 0, conversation="web:first")
    plan = RetainedPlan(
        memories=(mem(0, "Ana lives in Porto.", ANA),),
        entities=(PlanEntity(id=ANA, name="Ana", type="person"),),
        relations=(),
        reviewed=True,
        decisions=(decide(0),),
    )
    await reconcile(ctx, r1, plan)
    target = fact_id(r1, 0)
    r2 = admit(ctx, "r2", 5, conversation="web:second")
    await reconcile(
        ctx,
        r2,
        plan.model_copy(
            update={"decisions": (decide(0, "UPDATE", target_id=target, text="Ana lives in Lisbon."),)}
        ),
    )
    found = lines(ctx.root)
    assert list(found) == [target]  # an UPDATE adds no line
    assert found[target].text == "Ana lives in Lisbon."  # type: ignore[attr-defined]
    assert found[target].source_session == "web:second"  # type: ignore[attr-defined]  # PROV-08
    assert found[target].status == "open"  # type: ignore[attr-defined]  # an UPDATE never invalidates
    hits = MemoryIndex(ctx.root, None).search("Lisbon", limit=5)
    assert [h.id for h in hits] == [target]  # the index row follows the rewritten text
    assert replay_sidecar.load(ctx.root).entries == ()  # no edge for an UPDATE


def test_plan_edges_publish_supersession_and_threads_only() -> None:
    class Payload:
        admitted_at = "2026-12-01T09:00:00Z"

    plan = RetainedPlan(
        memories=tuple(mem(i, f"m{i}") for i in range(7)),
        entities=(),
        relations=(),
        decisions=(
            decide(4, "NOOP", thread_to="c-task"),  # first: a NOOP never ends the walk
            decide(5, "DROP", thread_to="c-task"),
            decide(0, "SUPERSEDE", target_id="c-old"),
            decide(1, thread_to="c-task"),
            decide(2, "UPDATE", target_id="c-x", thread_to="c-task"),
            decide(6, "ADD", target_id="c-near"),  # an ADD names no line it replaces
            decide(3, "NOOP", thread_to="c-task"),
        ),
    )
    edges = plan_edges("rec", Payload(), plan)  # type: ignore[arg-type]
    assert [(e["kind"], e["from"], e["to"], e.get("weight")) for e in edges] == [
        ("supersede", "c-old", fact_id("rec", 0), None),
        ("thread", fact_id("rec", 1), "c-task", 1),
    ]
    assert all(e["at"] == "2026-12-01T09:00:00Z" and e["authority"]["kind"] == "capture" for e in edges)
    assert [e["authority"]["digest"] for e in edges] == [
        replay_sidecar.authority_digest("capture", "rec", e["from"], e["to"]) for e in edges
    ]
    assert [e["id"] for e in edges] == [replay_sidecar.entry_id(e["kind"], e["from"], e["to"]) for e in edges]


STEPS = ("markdown", "graph", "sidecar", "index")


class Stop(Exception):
    pass


@pytest.mark.parametrize("step", STEPS)
async def test_each_commit_boundary_leaves_a_readable_store_and_converges(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """RPL-06 order: Markdown (+ graph) → sidecar → index → verify. Stopped right after ``step``, the
    store holds exactly the parts up to it: nothing derived names a line the Markdown lacks. The next
    attempt converges on the bytes of an uninterrupted commit."""
    # An earlier turn gives the index an active generation, so a search reads the index as it stands
    # (a store without one would build it from the Markdown on the first search).
    earlier = RetainedPlan(
        memories=(mem(0, "Bo drinks green tea."),),
        entities=(),
        relations=(),
        reviewed=True,
        decisions=(decide(0),),
    )
    whole = context(tmp_path / "whole", embedder)
    await reconcile(whole, admit(whole, "r0", 0), earlier)
    rec = admit(whole, "r1", 1)
    await reconcile(whole, rec, two_facts_threaded(rec))
    expected = canonical_bytes(whole.root)

    ctx = context(tmp_path / "mem", embedder)
    await reconcile(ctx, admit(ctx, "r0", 0), earlier)
    record = admit(ctx, "r1", 1)
    assert record == rec
    before = set(lines(ctx.root))

    def stop_at(name: str) -> None:
        if name == step:
            raise Stop(name)

    monkeypatch.setattr(commit, "commit_step", stop_at)
    with pytest.raises(Stop):
        await reconcile(ctx, record, two_facts_threaded(record))
    done = STEPS[: STEPS.index(step) + 1]
    ids = set(lines(ctx.root)) - before
    assert ids == {fact_id(record, 0), fact_id(record, 1)}  # Markdown is always first
    graph_ids = {m for e in load_graph(ctx.root).entities.values() for m in e.memories} - before
    assert graph_ids == (ids if "graph" in done else set())
    edges = replay_sidecar.load(ctx.root).entries
    assert {x for e in edges for x in (e.from_, e.to)} == (ids if "sidecar" in done else set())
    assert index_ids(ctx.root) - before == (ids if "index" in done else set())
    assert not RetainedPlan.from_bytes(ctx.intake.load_plan(record) or b"").committed

    monkeypatch.setattr(commit, "commit_step", lambda name: None)
    await run_reconcile(ctx, record)
    assert canonical_bytes(ctx.root) == expected
    assert index_ids(ctx.root) - before == ids
