"""Re-curation (issue #6 item 2): the turn archive, ``memory.capture.turnArchiveDays``, ``RecurateWorkflow``
(dry run and real run) and the ``tempomem recurate`` CLI, on a real dev server with a scripted model."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from tempomem.activities.recurate import RECURATE_DIR
from tempomem.config import ConfigError, load_config_data
from tempomem.messages.recurate import RECURATE_WORKFLOW, recurate_workflow_id
from tempomem.recurate import RecurateRequestError, failure_category, make_request
from tempomem.starts import run_recurate, start_recurate
from tempomem.storage import replay_sidecar
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import (
    IntakePayload,
    RecordState,
    UnknownRecordError,
    build_payload,
    canonical_json,
    intake_id,
)
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import CompletedTurn
from tempomem.storage.turn_archive import ARCHIVE_DIR, TurnArchive, TurnArchiveConflictError
from tests.conftest import make_store, running_worker
from tests.helpers.processes import kill_when
from tests.scripted_model import Delay, ScriptedModelServer
from tests.test_capture_flow import _payload_data, outcome_of, wait_until
from tests.test_capture_pipeline import ANA, capture_store, extraction, memory

REPO = Path(__file__).resolve().parent.parent
# Admission days inside the default 90-day retention, which counts back from the real clock.
T1 = (datetime.now(UTC) - timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
DAY1 = T1.date().isoformat()

DENTIST = "The user's dentist is Dr. Silva."
VEGETARIAN = "Ana is vegetarian."
VEGAN = "Ana is vegan now, no dairy."
SECRETS = ("Silva", "vegetarian", "vegan", "dairy", "Ana is", "dentist")


def turn(run_id: str, at: datetime = T1, **kw: object) -> CompletedTurn:
    return CompletedTurn(
        run_id=run_id,
        conversation_id="web:conv-1",
        speaker_kind="human-turn",
        user_text=str(kw.pop("user", "My dentist is Dr. Silva and my sister Ana is vegetarian.")),
        final_answer=str(kw.pop("answer", "Noted both.")),
        admitted_at=at,
    )


def keep(*lines: int) -> str:
    return json.dumps({"decisions": [{"line": n, "decision": "keep"} for n in lines]})


def classify_vegetarian(action: str):
    """The classifier: ``action`` on whichever numbered existing memory is the vegetarian line (CAP-19)."""

    def answer(request: dict) -> str:
        user = request["messages"][-1]["content"]
        section = re.search(r"<existing_memories>\n(.*?)\n</existing_memories>", user, re.S)
        number = next(e["number"] for e in json.loads(section.group(1)) if e["text"] == VEGETARIAN)
        return json.dumps({"decisions": [{"index": 0, "action": action, "target": number, "text": VEGAN}]})

    return answer


def recurate_script(action: str) -> list:
    """What the new model answers for the archived turn: one unchanged fact, one changed fact."""
    return [
        extraction(memory(DENTIST), memory("Ana has turned vegan.", entities=["ana"]), entities=ANA),
        keep(1, 2),
        classify_vegetarian(action),  # only the changed fact is close to something: one classifier call
    ]


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under the root except the re-curation output folder and the intake snapshot
    (a content-free status file republished by a background thread after earlier transitions)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != RECURATE_DIR]
        for name in filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel != ".capture-intake/snapshot.json":
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def daily_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "daily").glob("*.md"))}


def decoded_history(history: object) -> list[str]:
    return [base64.b64decode(d).decode("utf-8", "replace") for d in _payload_data(history.to_json_dict())]


async def _cli_async(store, client: Client, *args: str) -> subprocess.CompletedProcess:
    """``tempomem recurate`` in a subprocess against the test server, while this loop runs the worker."""
    import asyncio

    cfg = store.root.parent / "cli.json"
    memory = store.config.memory.model_dump(by_alias=True, exclude_none=True)
    address = client.service_client.config.target_host
    cfg.write_text(json.dumps({"memory": memory, "temporal": {"address": address}}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tempomem.cli",
        "--config",
        str(cfg),
        "recurate",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


@pytest.fixture
def model():
    with ScriptedModelServer() as server:
        yield server


# -- the archive and its config, no server ------------------------------------------------------------------


def _capture_payload(run_id: str, at: datetime = T1) -> IntakePayload:
    return build_payload(turn(run_id, at), write_mode="capture", tier="bujo")


def test_archive_written_on_successful_resolve_only(tmp_path: Path) -> None:
    """Issue #6 item 2: a resolved capture turn keeps its exact payload bytes, owner-only; operator
    resolution, Lite records and re-curation records are not archived; same bytes again is a no-op."""
    intake = Intake(tmp_path)
    payload = _capture_payload("arch-1")
    assert intake.admit(payload) == "admitted"
    pending = (intake.pending_dir / payload.id).read_bytes()
    intake.resolve(payload.id, outcome="success", now=datetime.now(UTC))
    path = tmp_path / ARCHIVE_DIR / DAY1 / f"{payload.id}.json"
    assert path.read_bytes() == pending
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / ARCHIVE_DIR).stat().st_mode) == 0o700
    # Idempotent on identical bytes, fails closed on different bytes (nothing overwritten).
    archive = TurnArchive(tmp_path)
    assert archive.store(payload.id, payload.admitted_at, pending) == "present"
    with pytest.raises(TurnArchiveConflictError):
        archive.store(payload.id, payload.admitted_at, pending + b" ")
    assert path.read_bytes() == pending

    operator = _capture_payload("arch-2")
    intake.admit(operator)
    assert intake.operator_resolve(operator.id, "given-up", now=datetime.now(UTC))
    lite = build_payload(turn("arch-3"), write_mode="append-host-summary", tier="lite")
    intake.admit(lite)
    intake.resolve(lite.id, outcome="success", now=datetime.now(UTC))
    redo = payload.model_copy(
        update={
            "id": intake_id("recurate:x:" + payload.id),
            "run_id": "recurate:x:" + payload.id,
            "recurate_of": payload.id,
        }
    )
    intake.admit(redo)
    intake.resolve(redo.id, outcome="success", now=datetime.now(UTC))
    assert [t.id for t in archive.turns(since=T1.date())] == [payload.id]


def test_archive_retention_prunes_old_days_and_zero_disables(tmp_path: Path) -> None:
    """memory.capture.turnArchiveDays: older day folders go at the next resolve; 0 keeps none."""
    intake = Intake(tmp_path)
    intake.archive_days = 5
    old = _capture_payload("ret-old", at=T1 - timedelta(days=30))
    fresh = _capture_payload("ret-new")
    for p in (old, fresh):
        intake.admit(p)
    intake.resolve(old.id, outcome="success", now=datetime.now(UTC))
    assert not (tmp_path / ARCHIVE_DIR / old.admitted_at[:10]).exists()  # outside the window: not kept
    (tmp_path / ARCHIVE_DIR).mkdir(mode=0o700)
    (tmp_path / ARCHIVE_DIR / "2001-01-01").mkdir(mode=0o700)
    intake.resolve(fresh.id, outcome="success", now=datetime.now(UTC))
    assert TurnArchive(tmp_path).days() == [DAY1]

    off = Intake(tmp_path)
    off.archive_days = 0
    third = _capture_payload("ret-off")
    off.admit(third)
    off.resolve(third.id, outcome="success", now=datetime.now(UTC))
    assert TurnArchive(tmp_path).days() == []


@pytest.mark.parametrize("value", [-1, 3651, True, "30", 1.5])
def test_turn_archive_days_is_validated_with_its_key_path(value: object) -> None:
    with pytest.raises(ConfigError) as err:
        load_config_data({"memory": {"mode": "lite", "capture": {"turnArchiveDays": value}}})
    assert [v.path for v in err.value.violations] == ["memory.capture.turnArchiveDays"]


def test_turn_archive_days_bounds_and_default() -> None:
    for value in (0, 3650):
        cfg = load_config_data({"memory": {"mode": "lite", "capture": {"turnArchiveDays": value}}})
        assert cfg.memory.capture.turn_archive_days == value
    assert (
        load_config_data({"memory": {"mode": "lite", "capture": {}}}).memory.capture.turn_archive_days == 90
    )


def test_payload_bytes_unchanged_without_recurate_fields() -> None:
    """INTAKE-03: the optional re-curation fields never enter the bytes of an ordinary record."""
    payload = _capture_payload("bytes-1")
    data = canonical_json(payload.model_dump())
    assert b"recurate_of" not in data and b"model_override" not in data
    assert IntakePayload.model_validate_json(data) == payload
    redo = payload.model_copy(update={"recurate_of": payload.id, "model_override": "m2"})
    assert b'"recurate_of":"' in canonical_json(redo.model_dump())


# -- CLI refusals (no server needed) ------------------------------------------------------------------------


def _cli(tmp_path: Path, config: dict, *args: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "tempomem.json"
    cfg.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "-m", "tempomem.cli", "--config", str(cfg), "recurate", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_cli_refuses_bad_requests(tmp_path: Path) -> None:
    bujo = {
        "memory": {
            "mode": "bujo",
            "writeMode": "capture",
            "path": str(tmp_path / "mem"),
            "embeddings": {"provider": "local"},
            "llm": {"provider": "ollama", "model": "m"},
        },
        "temporal": {"address": "127.0.0.1:1"},
    }
    lite = {"memory": {"mode": "lite", "writeMode": "append-host-summary", "path": str(tmp_path / "lite")}}
    bad_date = _cli(tmp_path, bujo, "--since", "2026-13-01")
    assert bad_date.returncode == 2 and "YYYY-MM-DD" in bad_date.stderr
    empty = _cli(tmp_path, bujo, "--since", "2020-01-01", "--until", "2020-01-31")
    assert empty.returncode == 1 and "no archived turns" in empty.stderr
    tier = _cli(tmp_path, lite, "--since", "2020-01-01")
    assert tier.returncode == 1 and "BuJo capture store" in tier.stderr
    help_ = subprocess.run(
        [sys.executable, "-m", "tempomem.cli", "recurate", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert "--dry-run" in help_.stdout and "supersede" in help_.stdout


# -- the workflow, end to end ----------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["SUPERSEDE", "UPDATE"])
async def test_recurate_dry_run_then_real_run_then_rerun(
    client: Client, tmp_path: Path, model, action: str
) -> None:
    """Issue #6 item 2 end to end: the dry run changes nothing and prints the diff of the changed fact; the
    real run keeps the unchanged line byte-identical (AMB-18 NOOP), supersedes the changed one (history
    kept) and adds its replacement; re-running the same run id admits nothing; no memory text in history.
    A classifier UPDATE is turned into a supersession too: re-curation never rewrites a line in place."""
    store = capture_store(tmp_path, client, model)
    model.push(
        extraction(memory(DENTIST), memory(VEGETARIAN, entities=["ana"]), entities=ANA),
        keep(1, 2),
    )
    first = await store.persist_completed_turn(turn("rc-1"))
    async with running_worker(client, store):
        assert (await outcome_of(client, first)).state == "resolved"
        archived = store.root / ARCHIVE_DIR / DAY1 / f"{first.intake_id}.json"
        assert archived.is_file()
        original = {b.text: b for _, b in iter_bullets(store.root, "daily")}
        assert set(original) == {DENTIST, VEGETARIAN}
        before_daily = daily_bytes(store.root)
        dentist_block = next(
            line for line in before_daily[f"{DAY1}.md"].decode().split("\n- ") if DENTIST in line
        )
        calls_before = len(model.calls)

        # Dry run: canonical tree byte-identical, the diff names the changed line only.
        before = tree_digest(store.root)
        model.push(*recurate_script(action))
        req = make_request(store, since=DAY1, model="scripted-v2", dry_run=True, run_id="r1")
        dry = await run_recurate(client, store, req)
        now = tree_digest(store.root)
        assert {k for k in set(now) | set(before) if now.get(k) != before.get(k)} == set()
        assert any(k.startswith("index/") for k in before) and f"daily/{DAY1}.md" in before
        assert (dry.turns, dry.model_calls, dry.superseded) == (1, 3, 1)
        diff_file = Path(dry.diff_path)
        assert diff_file == store.root / RECURATE_DIR / "r1.diff"
        assert stat.S_IMODE(diff_file.stat().st_mode) == 0o600
        diff = diff_file.read_text()
        assert hashlib.sha256(diff.encode()).hexdigest() == dry.diff_sha256
        added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
        assert any(VEGAN in line for line in added) and not removed
        assert not any(DENTIST in line or VEGETARIAN in line for line in added)
        assert f"# supersedes: {original[VEGETARIAN].id} -> " in diff
        assert not (store.root / RECURATE_DIR / "r1.scratch").exists()
        assert {c.model for c in model.calls[calls_before:]} == {"scripted-v2"}

        # The CLI prints the diff file itself (user-requested output) and changes nothing either.
        model.push(*recurate_script(action))
        cli = await _cli_async(store, client, "--since", DAY1, "--dry-run", "--run-id", "cli1")
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout == (store.root / RECURATE_DIR / "cli1.diff").read_text()
        assert VEGAN in cli.stdout and "+++ b/daily/" in cli.stdout and "1 files would change" in cli.stderr
        # The progress bar (stderr): archived turns of the range as its total, counts only, no text.
        assert "cli1: 100%" in cli.stderr and "1/1" in cli.stderr and "model calls=3" in cli.stderr
        assert all(needle not in cli.stderr for needle in SECRETS)
        assert tree_digest(store.root) == before

        # Real run, same run id: the very ids the dry run showed.
        model.push(*recurate_script(action))
        calls_before_real = len(model.calls)
        real = await run_recurate(
            client, store, make_request(store, since=DAY1, model="scripted-v2", run_id="r1")
        )
        assert (real.turns, real.admitted, real.duplicates, real.resolved, real.dead) == (1, 1, 0, 1, 0)
        # True counts (#12): the calls the model server saw and the line the supersede added, not zeros.
        assert (real.model_calls, real.lines_added) == (len(model.calls) - calls_before_real, 1)
        after = daily_bytes(store.root)
        lines = [b for _, b in iter_bullets(store.root, "daily")]
        texts = [b.text for b in lines]
        assert sorted(texts) == sorted([DENTIST, VEGETARIAN, VEGAN])  # no duplicate lines
        assert dentist_block in after[f"{DAY1}.md"].decode()  # unchanged line: byte-identical
        new = next(b for b in lines if b.text == VEGAN)
        assert replay_sidecar.superseded(store.root)[original[VEGETARIAN].id].new_id == new.id
        assert f"-> {new.id}" in diff  # the dry run predicted exactly this line
        assert (new.recorded, new.source_session) == (original[VEGETARIAN].recorded, "web:conv-1")
        derived = intake_id(f"recurate:r1:{first.intake_id}")
        assert store.intake.view(derived, now=datetime.now(UTC)).state is RecordState.RESOLVED
        assert [t.id for t in TurnArchive(store.root).turns(since=T1.date())] == [first.intake_id]
        audit = [b for _, b in iter_bullets(store.root, "audit")]
        assert len(audit) == 1  # the observation is not projected a second time

        # Re-run of the same run id: the ledger says duplicate, nothing is curated again.
        calls = len(model.calls)
        again = await run_recurate(
            client, store, make_request(store, since=DAY1, model="scripted-v2", run_id="r1")
        )
        assert (again.admitted, again.duplicates, again.resolved) == (0, 1, 0)
        assert len(model.calls) == calls and daily_bytes(store.root) == after

    # Content-free histories: the recurate runs, the dry run and the capture child.
    for wid in (
        recurate_workflow_id(store.store_id, "r1", dry_run=True),
        recurate_workflow_id(store.store_id, "r1", dry_run=False),
        store.workflow_id(derived),
    ):
        history = await client.get_workflow_handle(wid).fetch_history()
        decoded = decoded_history(history)
        assert decoded and any("r1" in d or derived in d for d in decoded)
        raw = json.dumps(history.to_json_dict())
        for needle in SECRETS:
            assert needle not in raw and all(needle not in d for d in decoded), (wid, needle)
    # #16 item 4: the runs carry the store id, so the UI lists one store's re-curations.
    query = f"TempomemStoreId = '{store.store_id}' AND WorkflowType = '{RECURATE_WORKFLOW}'"
    want = {recurate_workflow_id(store.store_id, "r1", dry_run=d) for d in (True, False)}
    deadline = time.monotonic() + 30
    while {w.id async for w in client.list_workflows(query)} < want and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert want <= {w.id async for w in client.list_workflows(query)}


async def test_recurate_requires_archived_turns_and_capture_tier(
    client: Client, tmp_path: Path, model
) -> None:
    store = capture_store(tmp_path, client, model)
    with pytest.raises(RecurateRequestError, match="no archived turns"):
        make_request(store, since=DAY1)
    lite = make_store(tmp_path / "lite", client, mode="lite")
    with pytest.raises(RecurateRequestError, match="BuJo capture store"):
        make_request(lite, since=DAY1)
    with pytest.raises(RecurateRequestError) as err:
        make_request(store, since=DAY1, until="2000-01-01")
    assert err.value.usage


FACTS = {"bike": "The user's bike is green.", "Lisbon": "The user lives in Lisbon."}


def echo_model(request: dict) -> str:
    """An order-independent model: extraction returns the archived turn's own fact unchanged; review keeps."""
    content = json.dumps(request["messages"])
    if "extract durable long-term memories" in content:
        return extraction(*(memory(fact) for key, fact in FACTS.items() if key in content))
    return keep(1)


def slow_second_extraction(seconds: float):
    """``echo_model``, except that the first extraction of the second turn (Lisbon) takes ``seconds``:
    whichever order the windowed children's calls arrive in, the first child resolves while the second
    is still extracting."""
    delayed: list[bool] = []

    def answer(request: dict):
        content = json.dumps(request["messages"])
        if not delayed and "extract durable long-term memories" in content and "Lisbon" in content:
            delayed.append(True)
            return Delay(seconds, then=echo_model)
        return echo_model(request)

    return answer


async def _two_archived_turns(client: Client, tmp_path: Path, model, run_id: str):
    """A store with two curated, archived turns; (store, daily bytes, the intake ids ``run_id`` derives)."""
    store = capture_store(tmp_path, client, model)
    model.push(*[echo_model] * 4)
    async with running_worker(client, store):
        for i, (key, at) in enumerate((("bike", T1), ("Lisbon", T1 + timedelta(hours=1)))):
            result = await store.persist_completed_turn(turn(f"{run_id}-{i}", at, user=f"About {key}."))
            assert (await outcome_of(client, result)).state == "resolved"
    originals = [t.id for t in TurnArchive(store.root).turns(since=T1.date())]
    derived = [intake_id(f"recurate:{run_id}:{o}") for o in originals]
    assert len(derived) == 2
    return store, daily_bytes(store.root), derived


async def test_recurate_resumes_after_the_worker_stops_mid_run(client: Client, tmp_path: Path, model) -> None:
    """Issue #6 item 2: a worker stopped in the middle of a re-curation leaves it durable; the next worker
    finishes it, every archived turn re-admitted exactly once, unchanged facts NOOP (no new lines)."""
    store, before, derived = await _two_archived_turns(client, tmp_path, model, "res1")

    # Turn 2's extraction is slow, so the worker stops while that child is in flight.
    model.push(*[slow_second_extraction(3)] * 9)
    handle = await start_recurate(client, store, make_request(store, since=DAY1, run_id="res1"))
    async with running_worker(client, store):
        # The first child resolved and the second record is admitted, its extraction still in flight.
        await wait_until(
            lambda: (
                _state(store, derived[0]) is RecordState.RESOLVED
                and _state(store, derived[1]) is RecordState.PENDING
            )
        )
    assert _state(store, derived[1]) is RecordState.PENDING  # stopped mid-run

    await _finish_resumed_run(client, store, handle, derived, before)


async def test_recurate_resumes_after_its_worker_process_is_killed(
    client: Client, tmp_path: Path, model
) -> None:
    """Issue #6 item 2, the hard case: the `tempomem worker` process is SIGKILLed (no drain, no cleanup)
    while a re-curation's second child is extracting. A new worker finishes the run: every archived turn
    re-admitted and resolved exactly once, unchanged facts NOOP, nothing written twice."""
    import asyncio

    store, before, derived = await _two_archived_turns(client, tmp_path, model, "kill1")

    model.push(*[slow_second_extraction(6)] * 9)
    handle = await start_recurate(client, store, make_request(store, since=DAY1, run_id="kill1"))
    cfg = store.root.parent / "worker.json"
    memory = store.config.memory.model_dump(by_alias=True, exclude_none=True)
    cfg.write_text(
        json.dumps({"memory": memory, "temporal": {"address": client.service_client.config.target_host}})
    )
    log = (tmp_path / "worker.log").open("wb")
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tempomem.cli", "--config", str(cfg), "worker", cwd=REPO, stdout=log, stderr=log
    )
    try:
        await kill_when(
            worker,
            lambda: (
                _state(store, derived[0]) is RecordState.RESOLVED
                and _state(store, derived[1]) is RecordState.PENDING
            ),
            timeout=90,
        )
    finally:
        log.close()
    assert _state(store, derived[1]) is RecordState.PENDING  # killed mid-run

    await _finish_resumed_run(client, store, handle, derived, before)


async def _finish_resumed_run(client: Client, store, handle, derived: list[str], before: dict) -> None:
    """A new worker finishes the interrupted run. Every archived turn is re-admitted exactly once and
    none is dead; a record the run reports pending is the sweeper's (RecurateProgress.pending, README),
    which the next worker's start sweep resolves. Both facts are unchanged: nothing is written twice."""
    import asyncio

    async with running_worker(client, store):
        final = await asyncio.wait_for(handle.result(), 120)
    assert (final.turns, final.dead, final.resolved + final.pending) == (2, 0, 2)
    assert final.admitted + final.duplicates == 2
    if final.pending:
        async with running_worker(client, store):  # its start sweep
            await wait_until(lambda: {_state(store, d) for d in derived} == {RecordState.RESOLVED}, 60)
    assert {_state(store, d) for d in derived} == {RecordState.RESOLVED}
    assert daily_bytes(store.root) == before  # structural NOOPs: nothing written


def _state(store, record_id: str) -> RecordState | None:
    try:
        return store.intake.view(record_id, now=datetime.now(UTC)).state
    except UnknownRecordError:  # not admitted (yet)
        return None


async def test_failed_dry_run_reports_a_category_and_leaves_no_scratch(
    client: Client, tmp_path: Path, model
) -> None:
    """CAP-20: invalid model output fails the dry run with a bounded category; nothing canonical changes."""
    store = capture_store(tmp_path, client, model)
    model.push(echo_model, echo_model)
    async with running_worker(client, store):
        result = await store.persist_completed_turn(turn("fail-1", user="About bike."))
        assert (await outcome_of(client, result)).state == "resolved"
        before = tree_digest(store.root)
        model.push("Sure! Here are the memories: []")  # CAP-12: not one exact JSON value
        with pytest.raises(WorkflowFailureError) as err:
            await run_recurate(client, store, make_request(store, since=DAY1, dry_run=True, run_id="bad1"))
    assert failure_category(err.value) == "invalid_output"
    assert tree_digest(store.root) == before
    assert not (store.root / RECURATE_DIR / "bad1.scratch").exists()
    assert not (store.root / RECURATE_DIR / "bad1.diff").exists()


async def test_a_windowed_recurate_continues_as_new_with_its_cursor(
    client: Client, tmp_path: Path, model
) -> None:
    """The rolling window BackfillWorkflow and RecurateWorkflow share (workflows.child_capture
    capture_window, issue #18 item 3): with one turn per run, the windowed re-curation drains its window,
    continues as new with the cursor and its counts, and re-admits each archived turn exactly once."""
    from tempomem.messages.recurate import RecurateInput, RecurateProgress

    store, before, derived = await _two_archived_turns(client, tmp_path, model, "can1")
    model.push(*[echo_model] * 4)
    async with running_worker(client, store):
        handle = await client.start_workflow(
            RECURATE_WORKFLOW,
            RecurateInput(
                store_id=store.store_id,
                run_id="can1",
                since=DAY1,
                window=2,
                batch_size=1,
                continue_as_new_every=1,
                first_delay_seconds=store.first_delay_seconds,
            ),
            id=recurate_workflow_id(store.store_id, "can1", dry_run=False),
            task_queue=store.task_queue,
            result_type=RecurateProgress,
        )
        final = await asyncio.wait_for(handle.result(), 120)
    assert (final.turns, final.admitted, final.duplicates, final.dead) == (2, 2, 0, 0)
    assert final.continue_as_new_runs == 1 and final.done  # after turn 1; turn 2 is the end of the range
    assert final.resolved + final.pending == 2
    assert {_state(store, d) for d in derived} <= {RecordState.RESOLVED, RecordState.PENDING}
    assert daily_bytes(store.root) == before  # unchanged facts: structural NOOPs, nothing written twice
