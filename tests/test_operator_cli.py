"""Operator commands on a real store, run as subprocesses: inspect, retry, resolve, health, and the
liveness fence (CLI-01..06, CLI-13, CLI-20, INTAKE-18..20, AMB-02)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tempomem.storage.fence import hold_fence
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import FailureCategory, ProcessingState, RecordState, build_payload
from tempomem.storage.turn import CompletedTurn
from tests.test_cli import tempomem, write_config

pytestmark = pytest.mark.slow  # each test runs the CLI as a process: not in the quick subset

NOW = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)
SECRET = "Okapi-Lantern-2291 is the name of the boat"


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path, str]:
    cfg = write_config(
        tmp_path / "c.json", {"mode": "lite", "writeMode": "append-host-summary", "path": "mem"}
    )
    root = tmp_path / "mem"
    turn = CompletedTurn(
        run_id="op-1", conversation_id="c", final_answer=SECRET, user_text=SECRET, admitted_at=NOW
    )
    payload = build_payload(turn, write_mode="append-host-summary", tier="lite")
    Intake(root).admit(payload)
    return cfg, root, payload.id


def run(cfg: Path, *args: str):
    return tempomem("--config", str(cfg), *args, cwd=cfg.parent)


def test_inspect_is_content_free(store) -> None:
    cfg, _, rid = store
    listing = run(cfg, "inspect", "--json")
    one = run(cfg, "inspect", rid, "--json")
    assert listing.returncode == 0 and one.returncode == 0
    for out in (listing.stdout, one.stdout):
        assert "Okapi" not in out and "boat" not in out  # CLI-03/CLI-20
    record = json.loads(one.stdout)
    assert set(record) == {
        "id",
        "state",
        "admitted_at",
        "attempts",
        "revision",
        "due_at",
        "due",
        "failure_category",
        "write_mode",
        "tier",
    }
    assert record["state"] == "pending" and record["due"] is True
    assert json.loads(listing.stdout)["counts"]["pending"] == 1


def test_health_states(store) -> None:
    cfg, root, rid = store
    health = run(cfg, "health", "--json")
    assert health.returncode == 0 and json.loads(health.stdout)["status"] == "in_progress"  # INTAKE-31
    Intake(root).dead_letter(rid, FailureCategory.LLM_TIMEOUT, now=NOW)
    health = run(cfg, "health", "--json")
    assert health.returncode == 1 and json.loads(health.stdout)["status"] == "dead_letters_present"
    (root / ".capture-intake" / "ledger" / f"shard-{rid[:2]}").unlink()
    health = run(cfg, "health", "--json")
    report = json.loads(health.stdout)
    assert health.returncode == 1 and report["status"] == "degraded"
    assert any(f"shard {rid[:2]} is missing" in p for p in report["problems"])
    assert "Okapi" not in health.stdout


def test_retry_dead_and_delayed_records(store) -> None:
    cfg, root, rid = store
    intake = Intake(root)
    assert json.loads(run(cfg, "retry", rid, "--json").stdout) == {"changed": False, "ids": []}  # already due
    for _ in range(3):
        intake.begin_attempt(rid, now=NOW)
    intake.dead_letter(rid, FailureCategory.INVALID_OUTPUT, now=NOW)
    result = run(cfg, "retry", "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == {"changed": True, "ids": [rid]}
    view = intake.view(rid, now=NOW)
    assert (view.state, view.attempts, view.due) == (RecordState.PENDING, 0, True)  # a fresh budget
    assert view.failure_category == "invalid_output"  # history of why it died stays visible


def test_resolve_rules(store) -> None:
    cfg, root, rid = store
    assert run(cfg, "resolve", rid, "Not A Slug").returncode == 1
    assert run(cfg, "resolve", "0" * 64, "gone").returncode == 2
    intake = Intake(root)
    intake._write_state(intake.pending_dir, rid, ProcessingState(retained_plan=True))
    refused = run(cfg, "resolve", rid, "provider-retired")
    assert refused.returncode == 4 and "retained plan" in refused.stderr
    intake._write_state(intake.pending_dir, rid, ProcessingState())
    done = run(cfg, "resolve", rid, "provider-retired", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"changed": True}
    assert json.loads(run(cfg, "resolve", rid, "provider-retired", "--json").stdout) == {"changed": False}
    receipt = json.loads((root / ".capture-intake" / "resolved" / f"{rid}.receipt.json").read_text())
    assert (receipt["outcome"], receipt["reason"]) == ("operator_resolved", "provider-retired")
    # Permanent duplicate protection survives the operator's resolution.
    turn = CompletedTurn(
        run_id="op-1", conversation_id="c", final_answer=SECRET, user_text=SECRET, admitted_at=NOW
    )
    assert intake.admit(build_payload(turn, write_mode="append-host-summary", tier="lite")) == "duplicate"


def test_mutating_commands_refuse_while_the_agent_runs(store) -> None:
    cfg, root, rid = store
    with hold_fence(root, what="test agent"):
        # CLI-07, CLI-12: repairs and maintenance need the agent stopped
        for args in (("retry", rid), ("resolve", rid, "gone"), ("rebuild",), ("adopt-replay",)):
            proc = run(cfg, *args)
            assert proc.returncode == 3 and "agent_running" in proc.stderr
        assert run(cfg, "inspect", "--json").returncode == 0  # read-only commands still work
    assert Intake(root).view(rid, now=NOW).state is RecordState.PENDING  # nothing changed
