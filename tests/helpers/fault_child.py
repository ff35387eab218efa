"""Fault-injection fork server: runs the durable lifecycle of a tiny store and SIGKILLs itself at the Nth
durable filesystem step (issue #13): the intake lifecycle, the Lite projection with its index, then a
rebuild, consolidation, an export and a restore; then a BuJo capture turn through its semantic commit
(intent, Markdown, graph, sidecar, index, verify) and resolve.

Usage: python -m tests.helpers.fault_child BASE

Reads one integer K per line on stdin. For each, forks a child that runs ``scenario`` on a fresh store
``BASE/run-K`` with every ``os.open(O_CREAT)``, ``os.write``, ``os.fsync``, ``os.rename``,
``os.replace``, ``os.unlink``, ``os.mkdir`` and ``os.rmdir`` counted, and kills itself with SIGKILL when
the count reaches K (K = 0: never; the child then prints how many steps there were). Each id that
admission *returned* is appended to ``BASE/run-K/returned`` (not counted) before the next step, so the
checker knows what a caller was promised. The server answers one line per K: the child's wait status.

It forks from a single-threaded interpreter that has imported, but never used, the storage and index
code, so each run costs milliseconds instead of an interpreter start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tempomem.activities.context import StoreContext
from tempomem.activities.curation import CurationActivities
from tempomem.capture.plan import PlanEntity, PlanMemory, PlanRelation, RetainedPlan, entity_id
from tempomem.capture.settings import CaptureSettings
from tempomem.export import export_store, import_restore
from tempomem.messages.capture import CurationInput
from tempomem.recall.index import MemoryIndex
from tempomem.storage.admission import admit_turn
from tempomem.storage.consolidation import consolidate
from tempomem.storage.fsio import exclusive_lock
from tempomem.storage.index_backlog import IndexBacklog
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import FailureCategory
from tempomem.storage.intake_tidy import tidy
from tempomem.storage.projection import project
from tempomem.storage.store_ref import STORE_LOCK
from tempomem.storage.turn import AdmissionResult, CompletedTurn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HOOKED = ("open", "write", "fsync", "rename", "replace", "unlink", "mkdir", "rmdir")
_raw = {name: getattr(os, name) for name in HOOKED}


def turns() -> list[CompletedTurn]:
    return [
        CompletedTurn(
            run_id=f"fault-run-{i}",
            conversation_id="web:fault",
            speaker_kind="human-turn",
            user_text=f"question {i}",
            final_answer=f"The answer number {i} mentions the kiwi orchard {i}.",
            admitted_at=T0 + timedelta(minutes=i),
        )
        for i in range(3)
    ]


def admit_lite(intake: Intake, turn: CompletedTurn) -> AdmissionResult:
    return admit_turn(
        intake, turn, tier="lite", write_mode="append-host-summary", capture_cron=None, capture_webhook=None
    )


def curate(root: Path, intake: Intake, record_id: str, now: datetime) -> None:
    """What one capture workflow does for a Lite record: attempt, projection + index, resolve."""
    intake.begin_attempt(record_id, now=now)
    payload = intake.load_payload(record_id)
    with exclusive_lock(root / STORE_LOCK):
        projected = project(root, payload)
        MemoryIndex(root, None).upsert([(projected.day, projected.bullet)])
    intake.resolve(record_id, outcome="success", now=now)


def curate_grouped(root: Path, intake: Intake, backlog: IndexBacklog, record_id: str, now: datetime) -> None:
    """What a backfill's capture does for a Lite record (issue #15 item 2): attempt, projection with its
    index update handed to the group commit (a durable day marker), resolve; the flush comes later."""
    intake.begin_attempt(record_id, now=now)
    payload = intake.load_payload(record_id)
    with exclusive_lock(root / STORE_LOCK):
        projected = project(root, payload)
        backlog.add(projected.day, projected.bullet)
    intake.resolve(record_id, outcome="success", now=now)


def flush_backlog(root: Path, backlog: IndexBacklog | None = None) -> int:
    """The group commit's flush: at a backfill's end, or (a fresh backlog) the sweeper's after a crash."""
    with exclusive_lock(root / STORE_LOCK):
        return (backlog or IndexBacklog(root)).flush(MemoryIndex(root, None))


def scenario(root: Path, returned: Path) -> None:
    """Admit three turns; curate the first as a backfill does (group commit, then its flush); fail the
    second to the dead letter, retry and curate it; leave the third pending. Every transition of the
    intake and the Lite projection is on the way."""
    intake = Intake(root)
    ids = []
    for turn in turns():
        result = admit_lite(intake, turn)
        assert result.intake_id is not None
        ids.append(result.intake_id)
        note_returned(returned, result.intake_id)
    now = T0 + timedelta(hours=1)
    backlog = IndexBacklog(root)
    curate_grouped(root, intake, backlog, ids[0], now)
    flush_backlog(root, backlog)
    intake.begin_attempt(ids[1], now=now)
    intake.record_failure(ids[1], FailureCategory.INDEX_ERROR, retry_in=timedelta(minutes=1), now=now)
    intake.begin_attempt(ids[1], now=now)
    intake.dead_letter(ids[1], FailureCategory.INDEX_ERROR, now=now)
    intake.retry(ids[1], now=now)
    curate(root, intake, ids[1], now)
    tidy(intake, now=now)
    maintain(root)
    ctx = bujo_context(root.parent / "bujo")
    admitted = admit_turn(ctx.intake, BUJO_TURN, tier="bujo", write_mode="capture", capture_cron=None,
                          capture_webhook=None)  # fmt: skip
    assert admitted.intake_id is not None
    note_returned(returned, admitted.intake_id)
    capture_bujo(ctx, admitted.intake_id, now)


def bujo_context(root: Path) -> StoreContext:
    """A BuJo capture store whose plan needs no model call: every memory is novel (no existing lines),
    so reconciliation decides ADD by itself and the model endpoint is never contacted."""
    settings = CaptureSettings("ollama", "unused", "http://127.0.0.1:9")
    return StoreContext(root=root, tier="bujo", write_mode="capture", task_queue="fault", capture=settings)


BUJO_TURN = CompletedTurn(
    run_id="fault-bujo-1",
    conversation_id="web:fault",
    speaker_kind="human-turn",
    user_text="My sister Ana moved to Lisbon last spring.",
    final_answer="Noted: Ana lives in Lisbon now.",
    admitted_at=T0 + timedelta(minutes=9),
)


def bujo_plan() -> RetainedPlan:
    ana, lisbon = entity_id("person", "Ana"), entity_id("place", "Lisbon")
    return RetainedPlan(
        memories=(
            PlanMemory(index=0, text="Ana, the user's sister, lives in Lisbon.", kind="fact", source="user",
                       salience=0.9, entities=(ana, lisbon)),
            PlanMemory(index=1, text="Ana moved last spring.", kind="fact", source="user", salience=0.7,
                       entities=(ana,)),
        ),
        entities=(
            PlanEntity(id=ana, name="Ana", type="person"),
            PlanEntity(id=lisbon, name="Lisbon", type="place"),
        ),
        relations=(PlanRelation(from_id=ana, relation="lives_in", to_id=lisbon),),
        reviewed=True,
    )  # fmt: skip


def capture_bujo(ctx: StoreContext, record_id: str, now: datetime) -> None:
    """What a BuJo capture workflow does after admission: attempt, projection (audit), the retained plan
    (what extraction and review would keep), reconciliation with the semantic commit, resolve."""
    ctx.intake.begin_attempt(record_id, now=now)
    project(ctx.root, ctx.intake.load_payload(record_id))
    if ctx.intake.load_plan(record_id) is None:
        ctx.intake.save_plan(record_id, bujo_plan().to_bytes(), now=now)
    curation = CurationInput(record_id, ctx.store_id, final_attempt=False)
    asyncio.run(CurationActivities(ctx).reconcile(curation))
    ctx.intake.resolve(record_id, outcome="success", now=now)


def maintain(root: Path) -> None:
    """The operator's durable steps: a rebuild (generation switch), consolidation, an export and a
    restore of it into a second store beside the first."""
    MemoryIndex(root, None).rebuild()
    consolidate(root)
    archive = export_store(root, root.parent / "backup.tar.gz").path
    import_restore(root.parent / "restored", archive)


def note_returned(returned: Path, record_id: str) -> None:
    """Remember an id admission returned (uncounted: the checker's own bookkeeping)."""
    fd = _raw["open"](returned, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    _raw["write"](fd, (record_id + "\n").encode())
    _raw["fsync"](fd)
    os.close(fd)


def install(kill_at: int) -> list[int]:
    count = [0]

    def hook(name: str):
        raw = _raw[name]

        def counted(*args, **kwargs):
            if name != "open" or (len(args) > 1 and args[1] & os.O_CREAT):
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return raw(*args, **kwargs)

        return counted

    for name in HOOKED:
        setattr(os, name, hook(name))
    return count


def run_one(base: Path, kill_at: int) -> int:
    pid = os.fork()
    if pid == 0:  # the child: hooks, scenario, exit without running the parent's cleanup
        try:
            root = base / f"run-{kill_at}"
            _raw["mkdir"](root, 0o700)
            count = install(kill_at)
            scenario(root / "mem", root / "returned")
            if kill_at == 0:
                sys.stdout.write(f"steps {count[0]}\n")
                sys.stdout.flush()
            os._exit(0)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(70)
    _, status = os.waitpid(pid, 0)
    return status


def main() -> None:
    base = Path(sys.argv[1])
    for line in sys.stdin:
        status = run_one(base, int(line))
        sys.stdout.write(f"status {status}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
