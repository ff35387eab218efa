"""One worker process serving every store under a directory (issue #16 items 1 and 2, tempomem.fleet).

On a real dev server: each store keeps its own task queue and fence, stores created while the worker
runs are picked up, a store another process owns is refused (and taken over once it is free) without
stopping the others, and anything under the directory that is not a usable store is reported by path
and skipped. Two fleets on two roots share one namespace and the same run id in their stores."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tempomem.config import TempomemConfig, load_config_data
from tempomem.fleet import Fleet, FleetConfigError, StoreStatus, scan_stores, store_config
from tempomem.storage.fence import hold_fence
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.store_ref import STORE_ID_FILE, store_id
from tempomem.store import MemoryStore
from tests.conftest import make_config
from tests.helpers.processes import kill_when
from tests.test_capture_flow import outcome_of, turn, wait_until

REPO = Path(__file__).resolve().parent.parent


def fleet_config(stores: Path) -> TempomemConfig:
    return make_config(stores / "unused", mode="lite")


def agent_store(config: TempomemConfig, root: Path, client: Client) -> MemoryStore:
    """What the agent host opens: the store on its own disk, under the worker's stores directory."""
    return MemoryStore(store_config(config, root), client=client, first_delay_seconds=1)


@contextlib.asynccontextmanager
async def serving(fleet: Fleet) -> AsyncIterator[asyncio.Task]:
    stop = asyncio.Event()
    task = asyncio.create_task(fleet.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await task


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


def test_scan_reports_what_is_not_a_usable_store_by_path(tmp_path: Path) -> None:
    stores = private_dir(tmp_path / "stores")
    good = private_dir(stores / "alice")
    store_id(good)
    private_dir(stores / "empty")  # not a store: no id, no store content
    loose = private_dir(stores / "loose")
    store_id(loose)
    os.chmod(loose, 0o755)
    corrupt = private_dir(stores / "corrupt")
    (corrupt / STORE_ID_FILE).write_text("not-an-id\n")
    os.chmod(corrupt / STORE_ID_FILE, 0o600)
    (stores / "notes.txt").write_text("x")
    (stores / "link").symlink_to(good)
    private_dir(stores / ".hidden")

    found = scan_stores(stores)

    assert found.stores == [good]
    reasons = {s.path.name: s.reason for s in found.skipped}
    assert set(reasons) == {"empty", "loose", "corrupt", "notes.txt", "link"}
    assert reasons["empty"].startswith("not a tempomem store")
    assert reasons["loose"] == "wrong permissions: mode 755, expected 700"
    assert reasons["corrupt"].startswith("corrupt:") and "not-an-id" not in reasons["corrupt"]
    assert reasons["link"].startswith("a symlink")
    assert os.stat(loose).st_mode & 0o777 == 0o755  # reported, never repaired behind the owner's back
    assert not (stores / "empty" / STORE_ID_FILE).exists()  # a scan writes nothing


def test_a_config_with_one_task_queue_cannot_serve_many_stores(tmp_path: Path) -> None:
    config = load_config_data(
        {"memory": {"mode": "lite", "path": str(tmp_path)}, "temporal": {"taskQueue": "shared"}}
    )
    with pytest.raises(FleetConfigError, match=r"temporal\.taskQueue"):
        Fleet(None, config, tmp_path)  # type: ignore[arg-type]  # refused before any connection


async def test_one_process_serves_every_store_and_skips_the_rest(client: Client, tmp_path: Path) -> None:
    stores = private_dir(tmp_path / "stores")
    config = fleet_config(stores)
    alice = agent_store(config, stores / "alice", client)
    bob = agent_store(config, stores / "bob", client)
    one = await alice.persist_completed_turn(turn("shared-run", "Alice keeps the blue kayak."))
    two = await bob.persist_completed_turn(turn("shared-run", "Bob keeps the red canoe."))
    private_dir(stores / "stray")  # not a store
    owned = agent_store(config, stores / "owned", client)
    three = await owned.persist_completed_turn(turn("owned-run", "Owned keeps the green raft."))
    seen: list[StoreStatus] = []
    fleet = Fleet(
        client, config, stores, scan_seconds=0.2, schedule=False, on_change=lambda s: seen.append(s)
    )

    with hold_fence(owned.root, what="test"):  # another live process owns this store
        async with serving(fleet):
            assert (await outcome_of(client, one)).state == "resolved"
            assert (await outcome_of(client, two)).state == "resolved"
            # A store made while the worker runs is picked up at a later scan.
            carol = agent_store(config, stores / "carol", client)
            four = await carol.persist_completed_turn(turn("carol-run", "Carol keeps the yellow dinghy."))
            assert (await outcome_of(client, four)).state == "resolved"
            status = fleet.status.stores
            assert status[owned.root].state == "skipped"
            assert "owned by another live worker" in (status[owned.root].reason or "")
            assert status[stores / "stray"].state == "skipped"
            assert {p.name for p, s in status.items() if s.state == "running"} == {"alice", "bob", "carol"}
            assert status[alice.root].store_id == alice.store_id
            assert [b.text for _, b in iter_bullets(owned.root, "daily")] == []  # not curated elsewhere
    # Its owner stopped: the next run takes the store over and curates what waited.
    async with serving(Fleet(client, config, stores, scan_seconds=0.2, schedule=False)):
        assert (await outcome_of(client, three)).state == "resolved"
    texts = {root.name: [b.text for _, b in iter_bullets(root, "daily")] for root in (alice.root, bob.root)}
    assert texts == {
        "alice": ["Assistant: Alice keeps the blue kayak."],
        "bob": ["Assistant: Bob keeps the red canoe."],
    }
    # Reported once per change, not once per scan.
    owned_reports = [s for s in seen if s.path == owned.root]
    assert len(owned_reports) == 1


async def test_two_hosts_share_one_namespace_each_with_its_own_stores(client: Client, tmp_path: Path) -> None:
    """#16 item 2: two worker processes' fleets on two roots (two hosts' disks), one namespace; the same
    run id admitted on both hosts is curated once in each store, by the host that holds it."""
    roots = [private_dir(tmp_path / "host-a"), private_dir(tmp_path / "host-b")]
    configs = [fleet_config(root) for root in roots]
    admitted = []
    for config, root in zip(configs, roots, strict=True):
        for name in ("u1", "u2"):
            store = agent_store(config, root / name, client)
            admitted.append(await store.persist_completed_turn(turn("same-run", f"{root.name} {name} note.")))
    assert len({a.workflow_id for a in admitted}) == 4
    fleets = [
        Fleet(client, c, r, scan_seconds=0.2, schedule=False) for c, r in zip(configs, roots, strict=True)
    ]
    async with serving(fleets[0]), serving(fleets[1]):
        outcomes = [await outcome_of(client, a) for a in admitted]
    assert [o.state for o in outcomes] == ["resolved"] * 4
    for root in roots:
        for name in ("u1", "u2"):
            assert [b.text for _, b in iter_bullets(root / name, "daily")] == [
                f"Assistant: {root.name} {name} note."
            ]


async def test_a_store_whose_worker_fails_does_not_stop_the_others(client: Client, tmp_path: Path) -> None:
    stores = private_dir(tmp_path / "stores")
    config = fleet_config(stores)
    broken = agent_store(config, stores / "broken", client)
    await broken.persist_completed_turn(turn("b-run", "Broken store note."))
    (broken.root / ".rebuild-required").write_bytes(b"adopt-replay\n")  # RPL-17 refuses this store
    fine = agent_store(config, stores / "fine", client)
    done = await fine.persist_completed_turn(turn("f-run", "Fine store note."))
    fleet = Fleet(client, config, stores, scan_seconds=0.2, schedule=False)
    async with serving(fleet):
        assert (await outcome_of(client, done)).state == "resolved"
        await wait_until(
            lambda: getattr(fleet.status.stores.get(broken.root), "state", None) == "skipped", timeout=30
        )
        assert "RebuildRequiredError" in (fleet.status.stores[broken.root].reason or "")


def test_cli_refuses_a_missing_stores_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    proc = subprocess.run(
        [sys.executable, "-m", "tempomem.cli", "worker", "--stores", str(missing)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"no stores directory at {missing}" in proc.stderr
    assert not missing.exists()


@pytest.mark.slow  # runs CLI processes
def test_health_reports_every_store_under_a_directory_and_the_totals(tmp_path: Path) -> None:
    """#16 item 4: `health --stores DIR` audits each store, lists what was skipped, sums the counts;
    content-free, and exit 1 while one store is unhealthy."""
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import FailureCategory, build_payload
    from tests.test_operator_cli import NOW

    stores = private_dir(tmp_path / "stores")
    ids = {}
    for name in ("alice", "bob"):
        root = private_dir(stores / name)
        store_id(root)
        secret = f"Okapi-{name}-2291 is the boat"
        t = turn(f"{name}-run", secret, user_text=secret)
        payload = build_payload(t, write_mode="append-host-summary", tier="lite")
        Intake(root).admit(payload)
        ids[name] = payload.id
    private_dir(stores / "stray")

    def health(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tempomem.cli", "health", "--stores", str(stores), *extra],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )

    report = health("--json")
    data = json.loads(report.stdout)
    assert report.returncode == 1  # the stray directory is reported
    assert [(s["path"], s["status"]) for s in data["stores"]] == [
        (str(stores / "alice"), "in_progress"),
        (str(stores / "bob"), "in_progress"),
    ]
    stray = {"path": str(stores / "stray"), "reason": "not a tempomem store (no .store-id)"}
    assert data["skipped"] == [stray]
    assert data["total"]["stores"] == 2 and data["total"]["counts"]["pending"] == 2
    assert "Okapi" not in report.stdout + report.stderr

    Intake(stores / "bob").dead_letter(ids["bob"], FailureCategory.LLM_TIMEOUT, now=NOW)
    only_bob = health("--store", "bob")
    assert only_bob.returncode == 1
    lines = only_bob.stdout.splitlines()
    assert lines[0].startswith("dead_letters_present bob [")
    assert lines[-1].startswith("total: 1 store(s), 1 unhealthy, 0 skipped")
    assert health("--store", "alice").returncode == 0
    assert health("--store", "nobody").returncode == 1


def cli_config(tmp_path: Path, client: Client) -> Path:
    """A Lite config file for CLI runs against the session's dev server."""
    path = tmp_path / "tempomem.json"
    address = client.service_client.config.target_host
    path.write_text(json.dumps({"memory": {"mode": "lite"}, "temporal": {"address": address}}))
    return path


async def worker_process(
    stores: Path, config: Path, status_seconds: str, out: Any
) -> asyncio.subprocess.Process:
    """A real `tempomem worker --stores` process (stdout and stderr to ``out``)."""
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tempomem.cli", "worker", "--stores", str(stores), "--config", str(config)),
        *("--scan-seconds", "0.2", "--status-seconds", status_seconds),
        stdout=out,
        stderr=out,
        cwd=stores.parent,
    )


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tempomem.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.mark.slow  # runs CLI processes
def test_inspect_reports_across_stores_and_the_store_selector_refuses_bad_names(tmp_path: Path) -> None:
    """#16 item 4: `inspect --stores DIR` gives every store's counts and the totals, `inspect ID --stores
    DIR` finds the store holding a record, `--store NAME` picks one store for any store command; a name
    that is a path, a skipped store or a missing one is refused without creating anything. Content-free."""
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import build_payload

    stores = private_dir(tmp_path / "stores")
    ids: dict[str, list[str]] = {}
    for name, n in (("alice", 1), ("bob", 2)):
        root = private_dir(stores / name)
        store_id(root)
        ids[name] = []
        for i in range(n):
            secret = f"Okapi-{name}-{i} keeps the boat"
            payload = build_payload(
                turn(f"{name}-{i}", secret, user_text=secret), write_mode="append-host-summary", tier="lite"
            )
            Intake(root).admit(payload)
            ids[name].append(payload.id)
    private_dir(stores / "stray")
    before = sorted(p.name for p in stores.iterdir())

    across = _cli(tmp_path, "inspect", "--stores", str(stores), "--json")
    assert across.returncode == 0, across.stderr
    data = json.loads(across.stdout)
    assert [(Path(s["path"]).name, s["counts"]["pending"]) for s in data["stores"]] == [
        ("alice", 1),
        ("bob", 2),
    ]
    assert data["stores"][1]["store_id"] == store_id(stores / "bob")
    assert data["skipped"] == [
        {"path": str(stores / "stray"), "reason": "not a tempomem store (no .store-id)"}
    ]
    assert data["total"]["stores"] == 2 and data["total"]["pending"] == 3
    text = _cli(tmp_path, "inspect", "--stores", str(stores))
    assert text.stdout.splitlines()[-1].startswith("total: 2 store(s), 1 skipped  pending=3")

    found = _cli(tmp_path, "inspect", ids["bob"][1], "--stores", str(stores), "--json")
    assert found.returncode == 0, found.stderr
    [holder] = json.loads(found.stdout)
    assert (Path(holder["path"]).name, holder["id"], holder["state"]) == ("bob", ids["bob"][1], "pending")
    assert _cli(tmp_path, "inspect", "0" * 64, "--stores", str(stores)).returncode == 2

    one = _cli(tmp_path, "inspect", "--stores", str(stores), "--store", "bob", "--json")
    assert one.returncode == 0, one.stderr
    assert sorted(r["id"] for r in json.loads(one.stdout)["records"]) == sorted(ids["bob"])
    for out in (across, text, found, one):
        assert "Okapi" not in out.stdout + out.stderr

    for bad in ("../stores/alice", ".hidden", "a/b"):
        refused = _cli(tmp_path, "inspect", "--stores", str(stores), "--store", bad)
        assert refused.returncode == 2 and f"--store {bad!r}" in refused.stderr, refused.stderr
    no_dir = _cli(tmp_path, "inspect", "--store", "bob")
    assert no_dir.returncode == 2 and "--store NAME needs --stores DIR" in no_dir.stderr
    no_name = _cli(tmp_path, "recurate", "--since", "2026-01-01", "--stores", str(stores))
    assert no_name.returncode == 2 and "name the store with --store NAME" in no_name.stderr
    stray = _cli(tmp_path, "retry", "--stores", str(stores), "--store", "stray")
    assert stray.returncode == 1 and "is skipped: not a tempomem store" in stray.stderr, stray.stderr
    missing = _cli(tmp_path, "rebuild", "--stores", str(stores), "--store", "carol")
    assert missing.returncode == 1 and "no store 'carol' under" in missing.stderr, missing.stderr
    assert sorted(p.name for p in stores.iterdir()) == before  # nothing was created


async def test_backfill_into_a_selected_store_of_a_running_worker_and_its_figures(
    client: Client, tmp_path: Path
) -> None:
    """#16 item 4: `backfill FILE --stores DIR --store NAME` makes a new store that the running worker
    picks up and curates; the batch run carries the store id as a search attribute (the UI lists one
    store's workflows); the worker's status has per-store and total figures."""
    from tempomem.fleet import StatusReport

    stores = private_dir(tmp_path / "stores")
    config = fleet_config(stores)
    alice = agent_store(config, stores / "alice", client)
    first = await alice.persist_completed_turn(turn("a-run", "Alice keeps the blue kayak."))
    source = tmp_path / "turns.jsonl"
    texts = [f"Dave note {i}." for i in range(3)]
    source.write_text("".join(turn(f"d-{i}", t).model_dump_json() + "\n" for i, t in enumerate(texts)))
    config_file = cli_config(tmp_path, client)
    fleet = Fleet(client, config, stores, scan_seconds=0.2, schedule=False)
    report = StatusReport(fleet.status)
    async with serving(fleet):
        assert (await outcome_of(client, first)).state == "resolved"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tempomem.cli",
            "backfill",
            str(source),
            "--stores",
            str(stores),
            "--store",
            "dave",
            "--config",
            str(config_file),
            "--json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["admitted"] == 3
        dave = stores / "dave"
        await wait_until(lambda: len(list(iter_bullets(dave, "daily"))) == 3, timeout=60)
        await wait_until(lambda: fleet.status.totals()["curated"] == 4, timeout=30)
        sid = store_id(dave)
        query = f"TempomemStoreId = '{sid}' AND WorkflowType = 'BackfillWorkflow'"

        async def listed() -> list[str]:
            return [w.id async for w in client.list_workflows(query)]

        deadline = asyncio.get_running_loop().time() + 30
        while not await listed() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
        [backfill_id] = await listed()
        assert backfill_id.startswith(f"backfill-{sid}-")
    status = fleet.status.stores
    assert (status[dave].store_id, status[dave].curated, status[dave].pending) == (sid, 3, 0)
    assert (status[alice.root].curated, status[alice.root].dead) == (1, 0)
    lines = report.lines(10.0)
    assert f"store dave [{sid}]: stopped  pending=0 due=0 dead=0 curated=3 (+3)" in lines
    assert lines[-1] == "total: 0 running, 0 skipped  pending=0 due=0 dead=0 curated=4  (+4 in 10 s, 0.40/s)"
    assert report.lines(10.0) == [
        "total: 0 running, 0 skipped  pending=0 due=0 dead=0 curated=4  (+0 in 10 s, 0.00/s)"
    ]
    assert sorted(b.text for _, b in iter_bullets(dave, "daily")) == [f"Assistant: {t}" for t in texts]
    assert [b.text for _, b in iter_bullets(alice.root, "daily")] == [
        "Assistant: Alice keeps the blue kayak."
    ]


async def test_worker_command_prints_per_store_and_total_figures(client: Client, tmp_path: Path) -> None:
    """#16 item 4: `worker --stores DIR --status-seconds S` prints, content-free, the figures of each
    store that changed and the totals, and stops cleanly on SIGINT."""
    import signal

    stores = private_dir(tmp_path / "stores")
    config = fleet_config(stores)
    alice = agent_store(config, stores / "alice", client)
    secret = "Okapi-7781 keeps the blue kayak."
    done = await alice.persist_completed_turn(turn("a-run", secret))
    config_file = cli_config(tmp_path, client)
    proc = await worker_process(stores, config_file, "0.5", asyncio.subprocess.PIPE)
    try:
        assert (await outcome_of(client, done)).state == "resolved"
        seen: list[str] = []
        want = f"store alice [{alice.store_id}]: running  pending=0 due=0 dead=0 curated=1 (+1)"
        while want not in seen:
            assert len(seen) < 200, seen[:5]  # a line every 0.5 s: the store's must come soon
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)  # type: ignore[union-attr]
            assert line, "the worker stopped before reporting"
            seen.append(line.decode().rstrip("\n"))
        nxt = await asyncio.wait_for(proc.stdout.readline(), timeout=60)  # type: ignore[union-attr]
        assert nxt.decode().startswith(
            "total: 1 running, 0 skipped  pending=0 due=0 dead=0 curated=1  (+1 in "
        )
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().rstrip().endswith("stopped (1 path(s) seen, 0 skipped)")
    assert "Okapi" not in "\n".join(seen) + out.decode() + err.decode()


async def test_a_killed_worker_process_leaves_every_store_curated_exactly_once(
    client: Client, tmp_path: Path
) -> None:
    """#16 with the durability rule: the `worker --stores` process is SIGKILLed (no drain, no cleanup)
    while turns of three stores are being curated; a new worker process serving the same directory
    finishes them. Every admitted id is resolved exactly once, in its own store: one Markdown line per
    turn, nothing dead, nothing in another store, and each store's health is ok."""

    from tempomem.storage.health import audit
    from tempomem.storage.intake import Intake
    from tempomem.storage.intake_records import RecordState

    stores = private_dir(tmp_path / "stores")
    config = fleet_config(stores)
    admitted: dict[str, list[tuple[str, str]]] = {}
    for name in ("alice", "bob", "carol"):
        store = agent_store(config, stores / name, client)
        admitted[name] = []
        for i in range(40):
            text = f"{name} note {i}."
            result = await store.persist_completed_turn(turn(f"{name}-{i}", text))
            admitted[name].append((result.intake_id, text))
    config_file = cli_config(tmp_path, client)

    def pending() -> int:
        return sum(len(Intake(stores / n).list_ids(RecordState.PENDING)) for n in admitted)

    log = (tmp_path / "worker.log").open("wb")
    worker = await worker_process(stores, config_file, "0", log)
    total = sum(len(v) for v in admitted.values())
    try:
        await kill_when(worker, lambda: pending() <= total - 10, timeout=120, step=0.02)
    finally:
        log.close()
    left = pending()
    assert left > 0, "the worker finished before the kill; the test proves nothing"

    fleet = Fleet(client, config, stores, scan_seconds=0.2, schedule=False)
    async with serving(fleet):
        await wait_until(lambda: pending() == 0, timeout=180)
    for name, records in admitted.items():
        root = stores / name
        states = {Intake(root).view(i, now=datetime.now(UTC)).state for i, _ in records}
        assert states == {RecordState.RESOLVED}, name
        lines = sorted(b.text for _, b in iter_bullets(root, "daily"))
        assert lines == sorted(f"Assistant: {text}" for _, text in records), name  # once each, no stranger
        assert audit(root, now=datetime.now(UTC)).status == "ok", name
