"""The BuJo semantic commit driven directly (tests/test_commit_path.py, tests/test_commit_lines.py): a store
context with no reachable model, admission, plans with their decisions, and the reconcile activity run in
the SDK's ActivityEnvironment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from tempomem.activities.context import StoreContext
from tempomem.activities.curation import CurationActivities
from tempomem.capture.plan import (
    PlanDecision,
    PlanEntity,
    PlanMemory,
    PlanRelation,
    RetainedPlan,
    entity_id,
    fact_id,
)
from tempomem.capture.settings import CaptureSettings
from tempomem.messages.capture import CurationInput
from tempomem.recall.index import MemoryIndex
from tempomem.storage.admission import admit_turn
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import CompletedTurn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ANA, LISBON = entity_id("person", "Ana"), entity_id("place", "Lisbon")


def context(root: Path, embedder) -> StoreContext:
    # The endpoint is a closed port: any model call would fail the test loudly.
    settings = CaptureSettings("ollama", "unused", "http://127.0.0.1:9")
    return StoreContext(
        root=root, tier="bujo", write_mode="capture", task_queue="t", capture=settings, embedder=embedder
    )


def admit(
    ctx: StoreContext,
    run_id: str,
    minutes: int,
    conversation: str = "web:c1",
    *,
    speaker_kind: str = "human-turn",
    trigger_kind: str = "none",
) -> str:
    turn = CompletedTurn(
        run_id=run_id,
        conversation_id=conversation,
        speaker_kind=speaker_kind,  # type: ignore[arg-type]
        trigger_kind=trigger_kind,  # type: ignore[arg-type]
        user_text=f"turn {run_id}",
        final_answer="noted",
        admitted_at=T0 + timedelta(minutes=minutes),
    )
    result = admit_turn(
        ctx.intake, turn, tier="bujo", write_mode="capture", capture_cron=None, capture_webhook=None
    )
    assert result.intake_id is not None
    return result.intake_id


def mem(index: int, text: str, *entities: str, kind: str = "fact") -> PlanMemory:
    return PlanMemory(
        index=index, text=text, kind=kind, source="user", salience=0.9, entities=tuple(entities)
    )


def decide(index: int, action: str = "ADD", **kw: object) -> PlanDecision:
    return PlanDecision(index=index, action=action, via="classifier", **kw)  # type: ignore[arg-type]


async def reconcile(ctx: StoreContext, record: str, plan: RetainedPlan) -> None:
    ctx.intake.begin_attempt(record, now=T0 + timedelta(hours=1))
    if ctx.intake.load_plan(record) is None:
        ctx.intake.save_plan(record, plan.to_bytes(), now=T0 + timedelta(hours=1))
    await run_reconcile(ctx, record)


async def run_reconcile(ctx: StoreContext, record: str) -> None:
    inp = CurationInput(record, ctx.store_id, final_attempt=False)
    await ActivityEnvironment().run(CurationActivities(ctx).reconcile, inp)


def lines(root: Path) -> dict[str, object]:
    return {b.id: b for _, b in iter_bullets(root, "daily")}


def index_ids(root: Path) -> set[str]:
    return {h.id for h in MemoryIndex(root, None).search("Ana Lisbon sister spring vegan", limit=50)}


def two_facts_threaded(record: str) -> RetainedPlan:
    """Two facts about Ana, the second threaded to the first, with one relation between two entities."""
    return RetainedPlan(
        memories=(
            mem(0, "Ana, the user's sister, lives in Lisbon.", ANA, LISBON),
            mem(1, "Ana moved last spring.", ANA),
        ),
        entities=(
            PlanEntity(id=ANA, name="Ana", type="person"),
            PlanEntity(id=LISBON, name="Lisbon", type="place"),
        ),
        relations=(PlanRelation(from_id=ANA, relation="lives_in", to_id=LISBON),),
        reviewed=True,
        decisions=(decide(0), decide(1, thread_to=fact_id(record, 0))),
    )
