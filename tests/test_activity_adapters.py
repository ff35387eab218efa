"""The thin activity adapters over the intake and the projection, and replay adoption, run in the SDK's
``ActivityEnvironment`` without a server (INTAKE-13, INTAKE-15, TIER-01, TIER-02, TIER-07, TIER-10,
RPL-11..RPL-15): what
each returns to its workflow and leaves on disk, including the refusals (a wrong store, an unknown or
corrupt record). The workflows around them run against the dev server in tests/test_capture_flow.py.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tempomem.activities.context import StoreContext, WrongStoreError
from tempomem.activities.intake_ops import IntakeActivities
from tempomem.activities.projection import ProjectionActivities
from tempomem.capture.adoption import adopt_replay
from tempomem.capture.plan import PlanDecision, PlanMemory, RetainedPlan, fact_id
from tempomem.messages.capture import AttemptInfo, FailureInput, ProjectionResult, RecordRef
from tempomem.recall.index import MemoryIndex
from tempomem.storage import replay_sidecar
from tempomem.storage.admission import admit_turn
from tempomem.storage.intake_records import FailureCategory, RecordState
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.projection import project
from tempomem.storage.turn import CompletedTurn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def context(root: Path, tier: str = "lite") -> StoreContext:
    write_mode = "capture" if tier == "bujo" else "append-host-summary"
    return StoreContext(root=root, tier=tier, write_mode=write_mode, task_queue="t")


def admit(ctx: StoreContext, run_id: str, text: str = "Ana moved to Lisbon.") -> str:
    turn = CompletedTurn(
        run_id=run_id,
        conversation_id="web:c1",
        speaker_kind="human-turn",
        user_text="Where does Ana live now?",
        final_answer=text,
        admitted_at=T0,
    )
    result = admit_turn(
        ctx.intake, turn, tier=ctx.tier, write_mode=ctx.write_mode, capture_cron=None, capture_webhook=None
    )
    assert result.intake_id is not None
    return result.intake_id


async def run(fn, arg):
    result = ActivityEnvironment().run(fn, arg)  # a sync activity's result, or an async one's awaitable
    return await result if inspect.isawaitable(result) else result


async def test_begin_attempt_reports_work_and_counts_it(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    acts = IntakeActivities(ctx)
    record = admit(ctx, "r1")
    ref = RecordRef(record, ctx.store_id)
    assert await run(acts.begin_attempt, ref) == AttemptInfo(1, True, "append-host-summary", "lite")
    assert await run(acts.begin_attempt, ref) == AttemptInfo(2, True, "append-host-summary", "lite")
    await run(acts.resolve, ref)
    # Resolved: no work, and the receipt's attempt count is reported.
    assert await run(acts.begin_attempt, ref) == AttemptInfo(2, False, "", "")
    assert await run(acts.begin_attempt, RecordRef("a" * 64, ctx.store_id)) == AttemptInfo(0, False, "", "")


async def test_begin_attempt_quarantines_a_corrupt_record_instead_of_curating_it(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    record = admit(ctx, "r1")
    (ctx.intake.pending_dir / record).write_bytes(b'{"edited": true}')
    info = await run(IntakeActivities(ctx).begin_attempt, RecordRef(record, ctx.store_id))
    assert info == AttemptInfo(0, False, "", "")
    assert record not in ctx.intake.list_ids(RecordState.PENDING)
    assert any(p.name.startswith(record) for p in (ctx.intake.base / "quarantine").rglob("*"))


async def test_failure_and_dead_letter_keep_the_category_or_unknown(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    acts = IntakeActivities(ctx)
    record = admit(ctx, "r1")
    await run(acts.begin_attempt, RecordRef(record, ctx.store_id))
    await run(acts.record_failure, FailureInput(record, ctx.store_id, "llm_timeout", 3600))
    view = ctx.intake.view(record, now=datetime.now(UTC))
    assert view.failure_category is FailureCategory.LLM_TIMEOUT
    assert view.due is False and view.due_at is not None
    due = datetime.fromisoformat(view.due_at.replace("Z", "+00:00"))
    assert timedelta(minutes=59) < due - datetime.now(UTC) <= timedelta(hours=1)
    await run(acts.dead_letter, FailureInput(record, ctx.store_id, "not-a-category", 0))
    view = ctx.intake.view(record, now=datetime.now(UTC))
    assert (view.state, view.failure_category) == (RecordState.DEAD, FailureCategory.UNKNOWN)


async def test_a_task_for_another_store_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    record = admit(ctx, "r1")
    before = (ctx.intake.pending_dir / record).read_bytes()
    acts, projection = IntakeActivities(ctx), ProjectionActivities(ctx)
    for fn, arg in (
        (acts.begin_attempt, RecordRef(record, "other-store")),
        (acts.resolve, RecordRef(record, "other-store")),
        (acts.dead_letter, FailureInput(record, "other-store", "unknown", 0)),
        (acts.record_failure, FailureInput(record, "other-store", "unknown", 1)),
        (projection.project, RecordRef(record, "other-store")),
    ):
        with pytest.raises(WrongStoreError):
            await run(fn, arg)
    view = ctx.intake.view(record, now=T0)
    assert (view.state, view.attempts, view.revision) == (RecordState.PENDING, 0, 0)
    assert (ctx.intake.pending_dir / record).read_bytes() == before
    assert not (ctx.root / "daily").exists()


async def test_projection_writes_the_line_and_indexes_it_even_when_the_line_exists(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    act = ProjectionActivities(ctx).project
    first = admit(ctx, "r0", text="Bo drinks green tea.")
    # The first line of a store: the index is built from the Markdown, which already holds it.
    assert await run(act, RecordRef(first, ctx.store_id)) == ProjectionResult("daily", 1, 0)
    record = admit(ctx, "r1")
    assert await run(act, RecordRef(record, ctx.store_id)) == ProjectionResult("daily", 1, 1)
    [line] = [b for _, b in iter_bullets(ctx.root, "daily") if "Lisbon" in b.text]
    assert [h.id for h in MemoryIndex(ctx.root, None).search("Ana Lisbon", limit=5)] == [line.id]

    # A crash between the Markdown write and the index update leaves the line unindexed; the retried
    # activity adds no line and indexes it.
    crashed = admit(ctx, "r2", text="Ana adopted a cat named Miso.")
    project(ctx.root, ctx.intake.load_payload(crashed))
    assert MemoryIndex(ctx.root, None).search("Miso cat", limit=5) == []
    assert await run(act, RecordRef(crashed, ctx.store_id)) == ProjectionResult("daily", 0, 1)
    hits = MemoryIndex(ctx.root, None).search("Miso cat", limit=5)
    assert [h.id for h in hits] == [b.id for _, b in iter_bullets(ctx.root, "daily") if "Miso" in b.text]
    assert len(list(iter_bullets(ctx.root, "daily"))) == 3


async def test_projection_of_a_missing_record_is_a_storage_failure_without_text(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    record = admit(ctx, "r1", text="my pin is 4711")
    ctx.intake.resolve(record, outcome="success", now=T0)
    with pytest.raises(ApplicationError) as err:
        await run(ProjectionActivities(ctx).project, RecordRef(record, ctx.store_id))
    assert err.value.type == "storage_error" and err.value.non_retryable
    assert "4711" not in str(err.value) and err.value.message == "UnknownRecordError"


async def test_bujo_projection_goes_to_the_audit_log_and_is_not_indexed(tmp_path: Path) -> None:
    """TIER-09: with no model at all, the raw observation reaches audit/ only, never recall."""
    ctx = context(tmp_path / "mem", tier="bujo")
    record = admit(ctx, "r1")
    result = await run(ProjectionActivities(ctx).project, RecordRef(record, ctx.store_id))
    assert result == ProjectionResult(target="audit", lines_added=1, indexed=0)
    assert len(list(iter_bullets(ctx.root, "audit"))) == 1
    assert list(iter_bullets(ctx.root, "daily")) == []


def plan(decisions: tuple[PlanDecision, ...] | None) -> bytes:
    memories = tuple(
        PlanMemory(index=i, text=f"m{i}", kind="fact", source="user", salience=0.9, entities=())
        for i in range(2)
    )
    return RetainedPlan(memories=memories, entities=(), relations=(), decisions=decisions).to_bytes()


def test_adoption_attests_only_decided_intents_and_never_replaces_a_sidecar(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem", tier="bujo")
    assert adopt_replay(ctx.root).model_dump() == {"status": "nothing_to_adopt", "intents": 0, "entries": 0}
    decided, undecided, empty = admit(ctx, "r1"), admit(ctx, "r2"), admit(ctx, "r3")
    ctx.intake.save_plan(
        decided,
        plan(
            (
                PlanDecision(index=0, action="SUPERSEDE", target_id="c-old", via="classifier"),
                PlanDecision(index=1, action="ADD", via="novel", thread_to="c-task"),
            )
        ),
        now=T0,
    )
    ctx.intake.save_plan(undecided, plan(None), now=T0)
    ctx.intake.save_plan(empty, plan((PlanDecision(index=0, action="NOOP", via="classifier"),)), now=T0)
    report = adopt_replay(ctx.root)
    assert report.model_dump() == {"status": "adopted", "intents": 2, "entries": 2}
    edges = {(e.kind, e.from_, e.to) for e in replay_sidecar.load(ctx.root).entries}
    assert edges == {("supersede", "c-old", fact_id(decided, 0)), ("thread", fact_id(decided, 1), "c-task")}
    before = replay_sidecar.sidecar_path(ctx.root).read_bytes()
    assert adopt_replay(ctx.root).model_dump() == {"status": "sidecar_present", "intents": 0, "entries": 0}
    assert replay_sidecar.sidecar_path(ctx.root).read_bytes() == before
    replay_sidecar.sidecar_path(ctx.root).write_bytes(b"{broken")
    with pytest.raises(replay_sidecar.SidecarError):
        adopt_replay(ctx.root)


def test_RPL17_adoption_blocks_a_worker_start_until_a_rebuild(tmp_path: Path) -> None:
    from tempomem.storage.fence import (
        REBUILD_REQUIRED_FILE,
        RebuildRequiredError,
        clear_rebuild_required,
        refuse_start_before_rebuild,
    )

    ctx = context(tmp_path / "mem", tier="bujo")
    adopt_replay(ctx.root)  # nothing to adopt: a start stays allowed
    refuse_start_before_rebuild(ctx.root)
    decided = admit(ctx, "r1")
    decision = PlanDecision(index=0, action="SUPERSEDE", target_id="c-old", via="classifier")
    ctx.intake.save_plan(decided, plan((decision,)), now=T0)
    assert adopt_replay(ctx.root).status == "adopted"
    marker = ctx.root / REBUILD_REQUIRED_FILE
    assert marker.read_bytes() == b"adopt-replay\n" and marker.stat().st_mode & 0o777 == 0o600
    with pytest.raises(RebuildRequiredError) as err:
        refuse_start_before_rebuild(ctx.root)
    assert str(err.value) == (
        f"adopt-replay ran on {ctx.root} and no rebuild has completed since: "
        "run tempomem rebuild before starting the worker (RPL-17)"
    )
    clear_rebuild_required(ctx.root)
    refuse_start_before_rebuild(ctx.root)
    assert not marker.exists()


def test_adoption_with_only_undecided_plans_counts_nothing(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem", tier="bujo")
    ctx.intake.save_plan(admit(ctx, "r1"), plan(None), now=T0)
    noop = admit(ctx, "r2")
    ctx.intake.save_plan(noop, plan((PlanDecision(index=0, action="NOOP", via="classifier"),)), now=T0)
    assert adopt_replay(ctx.root).model_dump() == {"status": "nothing_to_adopt", "intents": 1, "entries": 0}
    assert not replay_sidecar.sidecar_path(ctx.root).exists()


async def test_an_unwritable_day_file_is_a_storage_failure_and_the_record_stays(
    tmp_path: Path, caplog
) -> None:
    ctx = context(tmp_path / "mem")
    record = admit(ctx, "r1")
    (ctx.root / "daily" / "2026-12-01.md").mkdir(parents=True)  # where the day file should be
    with pytest.raises(ApplicationError) as err:
        await run(ProjectionActivities(ctx).project, RecordRef(record, ctx.store_id))
    assert (err.value.type, err.value.message, err.value.non_retryable) == (
        "storage_error",
        "UnsafePathError",
        True,
    )
    assert [r.getMessage() for r in caplog.records if "projection failed" in r.getMessage()] == [
        "projection failed: storage_error (UnsafePathError)"
    ]
    assert ctx.intake.view(record, now=T0).state is RecordState.PENDING


async def test_an_index_that_cannot_be_written_is_an_index_failure(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem")
    record = admit(ctx, "r1")
    (ctx.root / "index").write_bytes(b"")  # a file where the index folder goes
    with pytest.raises(ApplicationError) as err:
        await run(ProjectionActivities(ctx).project, RecordRef(record, ctx.store_id))
    assert (err.value.type, err.value.message, err.value.non_retryable) == (
        "index_error",
        "UnsafePathError",
        True,
    )
    assert len(list(iter_bullets(ctx.root, "daily"))) == 1  # the Markdown line is written; a retry indexes it


async def test_a_recuration_record_projects_nothing(tmp_path: Path) -> None:
    from tempomem.storage.intake_records import build_payload

    ctx = context(tmp_path / "mem", tier="bujo")
    turn = CompletedTurn(run_id="again", conversation_id="web:c1", final_answer="Ana moved.", admitted_at=T0)
    payload = build_payload(turn, write_mode="capture", tier="bujo").model_copy(
        update={"recurate_of": "a" * 64}
    )
    assert ctx.intake.admit(payload) == "admitted"
    result = await run(ProjectionActivities(ctx).project, RecordRef(payload.id, ctx.store_id))
    assert result == ProjectionResult(target="audit", lines_added=0, indexed=0)
    assert not (ctx.root / "audit").exists()


async def test_only_the_journal_tier_embeds_its_observations(tmp_path: Path) -> None:
    from tempomem.recall.embedding import LocalMiniLMEmbedder

    embedder = LocalMiniLMEmbedder()
    for tier, expected in (("journal", embedder.identity.as_dict()), ("lite", None)):
        ctx = context(tmp_path / tier, tier=tier)
        ctx.embedder = embedder
        record = admit(ctx, "r1")
        result = await run(ProjectionActivities(ctx).project, RecordRef(record, ctx.store_id))
        assert result.target == "daily"
        manifest = MemoryIndex(ctx.root, None).manifest()
        assert manifest is not None and manifest.get("embedding") == expected, tier


async def test_an_embedder_outage_is_its_own_failure_and_the_log_names_only_types(
    tmp_path: Path, caplog
) -> None:
    from tempomem.recall.embedding import HttpEmbedder

    ctx = context(tmp_path / "mem", tier="journal")
    ctx.embedder = HttpEmbedder("ollama", "nomic-embed-text", 768, "http://127.0.0.1:9")  # nothing listens
    record = admit(ctx, "r1", text="my pin is 4711")
    with pytest.raises(ApplicationError) as err:
        await run(ProjectionActivities(ctx).project, RecordRef(record, ctx.store_id))
    assert (err.value.type, err.value.non_retryable) == ("embedding_unavailable", True)
    assert err.value.message == "EmbeddingError"
    messages = [r.getMessage() for r in caplog.records if "projection failed" in r.getMessage()]
    assert messages == ["projection failed: embedding_unavailable (EmbeddingError)"]
    assert "4711" not in caplog.text


def test_adoption_reads_past_records_without_plans_or_decisions(tmp_path: Path) -> None:
    ctx = context(tmp_path / "mem", tier="bujo")
    no_plan, undecided, decided = sorted(admit(ctx, f"r{i}") for i in range(3))  # in the order they are read
    ctx.intake.save_plan(undecided, plan(None), now=T0)
    ctx.intake.save_plan(
        decided, plan((PlanDecision(index=0, action="ADD", via="novel", thread_to="c-task"),)), now=T0
    )
    assert adopt_replay(ctx.root).model_dump() == {"status": "adopted", "intents": 1, "entries": 1}
    assert no_plan != decided
