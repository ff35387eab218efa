"""SIGKILL at every durable step of a tiny store's lifecycle, then restart and check (issue #13).

``tests/helpers/fault_child.py`` counts every durable filesystem call (create, write, fsync, rename,
replace, unlink, mkdir, rmdir) of admission, attempt bookkeeping, retry, dead-lettering, the Lite
projection with its index update (per turn, and grouped as a backfill does: day marker, flush, marker
removal), resolve and tidy, and kills itself at step K, for every K. After each
kill this test restarts the store as a worker would (``tidy``) and checks (a rebuild, consolidation, an
export and a restore into a second store are the last steps; each is run again after the kill):

* the store opens without a manual step, and ``health`` names no problem once tidied;
* every id admission returned is still there (a retried admission is a ``duplicate``, never new);
* an id that had a receipt at the kill is still resolved (never curated again);
* after finishing the work, each turn is resolved exactly once: one receipt, one ledger entry, one
  Markdown line, one index row, and health is ``ok``.

``TEMPOMEM_FAULT_REPEAT=N`` repeats the whole enumeration N times (``scripts/fault_injection.sh``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tempomem.capture.plan import fact_id
from tempomem.export import export_store, import_restore, is_canonical
from tempomem.recall.index import MemoryIndex
from tempomem.storage.admission import admit_turn
from tempomem.storage.consolidation import consolidate
from tempomem.storage.graph import load_graph
from tempomem.storage.health import audit
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import RecordState, intake_id
from tempomem.storage.intake_tidy import tidy
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import AdmissionStatus
from tests.helpers.fault_child import (
    BUJO_TURN,
    admit_lite,
    bujo_context,
    capture_bujo,
    curate,
    flush_backlog,
    turns,
)

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.crash, pytest.mark.slow]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class ForkServer:
    def __init__(self, base: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.fault_child", str(base)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, kill_at: int) -> tuple[int, int | None]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{kill_at}\n")
        self.proc.stdin.flush()
        steps = None
        while True:
            line = self.proc.stdout.readline()
            assert line, "the fork server died"
            word, value = line.split()
            if word == "steps":
                steps = int(value)
            else:
                return int(value), steps

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def returned_ids(run_dir: Path) -> list[str]:
    path = run_dir / "returned"
    return path.read_text().split() if path.exists() else []


def receipts(root: Path) -> set[str]:
    folder = root / ".capture-intake" / "resolved"
    names = os.listdir(folder) if folder.exists() else []
    return {n.removesuffix(".receipt.json") for n in names if n.endswith(".receipt.json") and n[0] != "."}


def recover_and_finish(run_dir: Path) -> list[str]:
    """Restart as a worker would, check the promises, finish the work, check exactly-once. Returns the
    problems health reported right after the restart (should be none)."""
    root = run_dir / "mem"
    promised = returned_ids(run_dir)
    resolved_before = receipts(root)
    attempts_before = {}
    intake = Intake(root)
    for record_id in resolved_before:
        attempts_before[record_id] = intake.receipt(record_id).attempts
    if root.exists():
        tidy(intake, now=NOW)  # what the worker does at start: no manual step
        flush_backlog(root)  # ... and its start sweep: days a group commit left marked are indexed
    after_restart = audit(root, now=NOW).problems if root.exists() else []
    for record_id in resolved_before:
        assert intake.view(record_id, now=NOW).state is RecordState.RESOLVED, "resolved turn came back"
    ids = []
    for turn in turns():  # the host retries admissions it did not see return, and may retry others
        result = admit_lite(intake, turn)
        assert result.intake_id is not None
        if result.intake_id in promised:
            assert result.status is AdmissionStatus.DUPLICATE, "a returned id was lost"
        ids.append(result.intake_id)
    assert set(promised) - {BUJO_ID} <= set(ids)
    for record_id in ids:
        state = intake.view(record_id, now=NOW).state
        if state is RecordState.DEAD:
            intake.retry(record_id, now=NOW)
            state = RecordState.PENDING
        if state is RecordState.PENDING:
            curate(root, intake, record_id, NOW + timedelta(minutes=1))
    # exactly once, everywhere
    assert receipts(root) == set(ids)
    for record_id, attempts in attempts_before.items():
        assert intake.receipt(record_id).attempts == attempts, "a resolved turn was attempted again"
    assert intake.ledger.verify_all(intake.has_receipt) == 3
    lines = [b.id for _, b in iter_bullets(root, "daily")]
    assert len(lines) == 3 and len(set(lines)) == 3
    hits = MemoryIndex(root, None).search("kiwi orchard", limit=10)
    assert sorted(h.id for h in hits) == sorted(lines)
    report = audit(root, now=NOW)
    assert (report.status, report.problems) == ("ok", [])
    # The operator's steps after the kill: a restore interrupted by it completes when run again (it was
    # rolled forward or discarded, never left half-applied) ...
    archive = run_dir / "backup.tar.gz"
    if archive.exists():
        import_restore(run_dir / "restored", archive)
        import_restore(run_dir / "restored-check", archive)
        assert canonical_files(run_dir / "restored") == canonical_files(run_dir / "restored-check")
    # ... and rebuild, consolidation, export and restore of the finished store converge on it.
    assert MemoryIndex(root, None).rebuild().rows == 3
    consolidate(root)
    final = export_store(root, run_dir / "final.tar.gz").path
    import_restore(run_dir / "restored-final", final)
    assert canonical_files(run_dir / "restored-final") == canonical_files(root)
    again = Intake(run_dir / "restored-final")
    assert again.ledger.verify_all(again.has_receipt) == 3
    return after_restart + recover_bujo(run_dir, promised)


BUJO_ID = intake_id(BUJO_TURN.run_id)


def recover_bujo(run_dir: Path, promised: list[str]) -> list[str]:
    """The BuJo capture turn: resolved stays resolved, an interrupted commit converges on exactly its
    two facts, one graph, no sidecar mismatch, one index row per fact."""
    root = run_dir / "bujo"
    resolved_before = BUJO_ID in receipts(root)
    ctx = bujo_context(root)
    tidy(ctx.intake, now=NOW)
    problems = audit(root, now=NOW).problems
    if resolved_before:
        assert ctx.intake.view(BUJO_ID, now=NOW).state is RecordState.RESOLVED
    result = admit_turn(ctx.intake, BUJO_TURN, tier="bujo", write_mode="capture", capture_cron=None,
                        capture_webhook=None)  # fmt: skip
    if BUJO_ID in promised:
        assert result.status is AdmissionStatus.DUPLICATE, "the BuJo turn's returned id was lost"
    if ctx.intake.view(BUJO_ID, now=NOW).state is RecordState.PENDING:
        capture_bujo(ctx, BUJO_ID, NOW + timedelta(minutes=2))
    assert receipts(root) == {BUJO_ID}
    facts = [b for _, b in iter_bullets(root, "daily")]
    assert sorted(b.id for b in facts) == sorted(fact_id(BUJO_ID, i) for i in (0, 1))
    assert len([b for _, b in iter_bullets(root, "audit")]) == 1
    entities = load_graph(root).entities
    assert sorted(entities) == ["person:ana", "place:lisbon"]
    assert entities["person:ana"].memories == tuple(sorted(b.id for b in facts))
    hits = MemoryIndex(root, None).search("Ana Lisbon sister", limit=10)
    assert sorted(h.id for h in hits) == sorted(b.id for b in facts)
    report = audit(root, now=NOW)
    assert (report.status, report.problems, report.mismatches) == ("ok", [], []), report.problems
    return [f"bujo: {p}" for p in problems]


def canonical_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and is_canonical(p.relative_to(root).as_posix())
    }


def test_sigkill_at_every_durable_step_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    repeat = int(os.environ.get("TEMPOMEM_FAULT_REPEAT", "1"))
    server = ForkServer(tmp_path)
    try:
        status, steps = server.run(0)
        assert status == 0 and steps is not None and steps > 50
        recover_and_finish(tmp_path / "run-0")
        kills = 0
        restart_problems: dict[int, list[str]] = {}
        for round_ in range(repeat):
            for kill_at in range(1, steps + 1):
                run_dir = tmp_path / f"run-{kill_at}"
                if round_:
                    subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                status, _ = server.run(kill_at)
                assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (kill_at, status)
                kills += 1
                problems = recover_and_finish(run_dir)
                if problems:
                    restart_problems[kill_at] = problems
        assert restart_problems == {}, "health found problems after the restart's tidy"
    finally:
        server.close()
    print(f"fault injection: {steps} durable steps, {kills} kills, 0 lost, 0 duplicated")
