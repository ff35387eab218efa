"""What a team adopting tempomem meets first (#12): one import package, a light import, the host API,
the examples, a connection that follows Temporal's environment configuration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, Interceptor, OutboundInterceptor, StartWorkflowInput
from temporalio.converter import PayloadCodec

import tempomem
from tempomem import CompletedTurn, MemoryStore, StoreClosedError, load_config
from tempomem.config import load_config_data
from tempomem.connect import TemporalConnectError, connect_options

REPO = Path(__file__).resolve().parents[1]
MAPPED = ("storage", "recall", "capture", "activities", "workflows")


# -- one namespace ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [found] = out.glob("tempomem-*.whl")
    return found


@pytest.mark.slow  # builds the wheel
def test_the_wheel_holds_exactly_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert top == {"tempomem"}
    for sub in MAPPED:
        assert f"tempomem/{sub}/__init__.py" in names
    assert "tempomem/recall/assets/minilm/tokenizer.json" in names  # package data moved along
    assert "tempomem/data/demo_conversation.json" in names


@pytest.mark.slow  # builds and installs the wheel
def test_the_wheel_installs_beside_a_project_with_its_own_workflows_and_activities(
    wheel: Path, tmp_path: Path
) -> None:
    """A Temporal project names its own packages workflows/ and activities/; both import side by side."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    installed = subprocess.run(  # pip installs the wheel itself (its dependencies come from below)
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert (site / "tempomem" / "workflows" / "capture.py").is_file() and not (site / "workflows").exists()
    # tempomem's dependencies come from the test environment (appended after the scratch site-packages,
    # so the editable tempomem there is not seen: .pth files of an appended folder are not run).
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    project = tmp_path / "team"
    for pkg in ("workflows", "activities"):
        (project / pkg).mkdir(parents=True)
        (project / pkg / "__init__.py").write_text(f"OWNER = 'team-{pkg}'\n")
    probe = (
        "import workflows, activities, tempomem.workflows.capture as c, tempomem.activities.curation as a\n"
        "import tempomem.storage.intake, tempomem.recall.search\n"
        f"print(workflows.OWNER, activities.OWNER, c.__file__.startswith({str(site)!r}), a.__name__)\n"
    )
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], cwd=project, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["team-workflows", "team-activities", "True", "tempomem.activities.curation"]


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_the_editable_install_exposes_no_generic_top_level_name(tmp_path: Path) -> None:
    probe = f"import importlib.util as u; print([n for n in {MAPPED!r} if u.find_spec(n)])"
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert ran.stdout.strip() == "[]", ran.stderr
    ran = subprocess.run(
        [sys.executable, "-c", "import tempomem.workflows.capture, tempomem.recall.index"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr


def test_no_module_imports_a_bare_top_level_name() -> None:
    offenders = []
    for path in REPO.rglob("*.py"):
        if ".venv" in path.parts or "build" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            words = line.strip().split()
            if len(words) >= 2 and words[0] in ("import", "from") and words[1].split(".")[0] in MAPPED:
                offenders.append(f"{path.relative_to(REPO)}:{n}")
    assert offenders == []


# -- light imports ---------------------------------------------------------------------------------------
def imported_by(statement: str) -> set[str]:
    ran = subprocess.run(
        [sys.executable, "-c", f"{statement}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(ran.stdout))


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_the_search_path_imports_neither_temporal_nor_cryptography() -> None:
    statements = (
        "import tempomem",
        "import tempomem.recall.search",
        "import tempomem.recall.index",
        "import tempomem.store",
    )
    for statement in statements:
        loaded = imported_by(statement)
        assert not {m for m in loaded if m.split(".")[0] in ("temporalio", "cryptography")}, statement


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_REC02_recall_runs_no_chat_model() -> None:
    """MemoryRecall is embeddings plus full-text search: no recall module loads a chat-model client."""
    recall_modules = sorted(
        f"tempomem.recall.{p.stem}" for p in (REPO / "recall").glob("*.py") if p.stem != "__init__"
    )
    loaded = imported_by("; ".join(f"import {m}" for m in recall_modules))
    assert set(recall_modules) <= loaded  # the probe saw them load
    chat = {
        m for m in loaded if m.startswith(("tempomem.activities", "tempomem.workflows", "openai", "ollama"))
    }
    assert not chat


def test_STORE12_removed_capture_apis_are_not_provided() -> None:
    """No legacy capture queue, no direct capture() method, no loose capture exports (the MCP listing of
    exactly three read/remember tools is checked in tests/test_mcp.py)."""
    assert not [
        n for n in dir(MemoryStore) if n in ("capture", "capture_queue", "memory_capture", "memory_note")
    ]
    assert not [
        n for n in tempomem.__all__ if n.lower().startswith(("capture", "memory_capture", "memory_note"))
    ]


def test_the_public_names_resolve_and_match_all() -> None:
    assert sorted(tempomem.__all__) == sorted(tempomem._EXPORTS)
    for name in tempomem.__all__:
        assert getattr(tempomem, name).__name__ == name
    with pytest.raises(AttributeError):
        tempomem.nothing_here  # noqa: B018


# -- bad input at the host boundary ----------------------------------------------------------------------
def test_wrong_types_and_a_closed_store_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="TempomemConfig"):
        MemoryStore({"memory": {}})  # type: ignore[arg-type]
    store = MemoryStore(load_config_data({"memory": {"mode": "lite", "path": str(tmp_path / "m")}}))
    import asyncio

    with pytest.raises(TypeError, match="CompletedTurn"):
        asyncio.run(store.persist_completed_turn({"run_id": "x"}))  # type: ignore[arg-type]
    assert not (tmp_path / "m").exists()  # nothing admitted, nothing created
    store.close()
    with pytest.raises(StoreClosedError):
        store.search("anything")


def test_a_config_with_unknown_keys_names_them(tmp_path: Path) -> None:
    from tempomem import ConfigError

    path = tmp_path / "c.json"
    path.write_text('{"memory": {"mode": "lite", "colour": "blue"}, "temporal": {"adress": "x:1"}}')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    paths = {v.path for v in caught.value.violations}
    assert {"memory.colour", "temporal.adress"} <= paths


def test_relative_store_path_resolves_against_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "tempomem.json").write_text('{"memory": {"mode": "lite", "path": "./memory"}}')
    monkeypatch.chdir(tmp_path)
    assert MemoryStore(load_config(folder / "tempomem.json")).root == folder.resolve() / "memory"


# -- Temporal's environment configuration ----------------------------------------------------------------
def test_connect_options_follow_envconfig_unless_the_file_says_otherwise(tmp_path: Path) -> None:
    env = {
        "TEMPORAL_ADDRESS": "cluster.example:7233",
        "TEMPORAL_NAMESPACE": "team-ns",
        "TEMPORAL_API_KEY": "k1",
    }
    plain = load_config_data({"memory": {"mode": "lite"}})
    options = connect_options(plain, environ=env)
    assert (options["target_host"], options["namespace"], options["api_key"]) == (
        "cluster.example:7233",
        "team-ns",
        "k1",
    )
    assert options["tls"] is not False  # an API key implies TLS, as in Temporal's own tools
    explicit = load_config_data(
        {"memory": {"mode": "lite"}, "temporal": {"address": "mine:7233", "tls": False}}
    )
    options = connect_options(explicit, environ=env)
    assert (options["target_host"], options["namespace"], options["tls"]) == ("mine:7233", "team-ns", False)
    assert connect_options(plain, environ={})["target_host"] == "localhost:7233"


def test_mtls_files_and_api_key_env_from_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(b"CA")
    (tmp_path / "client.pem").write_bytes(b"CERT")
    (tmp_path / "client.key").write_bytes(b"KEY")
    (tmp_path / "tempomem.json").write_text(
        json.dumps(
            {
                "memory": {"mode": "lite"},
                "temporal": {
                    "address": "ns.acct.tmprl.cloud:7233",
                    "apiKeyEnv": "MY_TEMPORAL_KEY",
                    "tls": {"serverCaCert": "ca.pem", "clientCert": "client.pem", "clientKey": "client.key"},
                },
            }
        )
    )
    config = load_config(tmp_path / "tempomem.json")
    options = connect_options(config, environ={"MY_TEMPORAL_KEY": "secret-k"})
    tls = options["tls"]
    assert (tls.server_root_ca_cert, tls.client_cert, tls.client_private_key) == (b"CA", b"CERT", b"KEY")
    assert options["api_key"] == "secret-k"
    with pytest.raises(TemporalConnectError, match="MY_TEMPORAL_KEY is unset"):
        connect_options(config, environ={})
    with pytest.raises(Exception, match="clientKey"):
        load_config_data({"memory": {"mode": "lite"}, "temporal": {"tls": {"clientCert": "c.pem"}}})


# -- the examples, run against the dev server ------------------------------------------------------------
async def test_the_host_and_worker_example_runs(client: Client, tmp_path: Path) -> None:
    """STORE-13: a store built from the config plus its embedder serves recall, as the example host does;
    STORE-01: its writes are the built-in durable admission."""
    example = tmp_path / "example"
    shutil.copytree(REPO / "examples" / "host_and_worker", example)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
    }
    worker = subprocess.Popen(
        [sys.executable, str(example / "worker.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().startswith("worker: store ")
        host = subprocess.run(
            [sys.executable, str(example / "host.py")], env=env, capture_output=True, text=True, timeout=180
        )
        assert host.returncode == 0, host.stderr[-3000:]
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err[-3000:]
    lines = host.stdout.splitlines()
    assert lines[0] == "admitted: admitted (workflow started: True)"
    assert lines[1] == "curated: resolved"
    assert lines[2] == "recall: 1 hit(s)" and "4500 euro budget" in host.stdout
    assert "journal: 1 entr(y/ies) on 2026-12-02" in lines
    assert any(line.startswith("automatic context: ") and not line.endswith(" 0 line(s)") for line in lines)
    assert (example / "memory" / "daily" / "2026-12-02.md").exists()  # beside the config, not the cwd
    again = subprocess.run(
        [sys.executable, str(example / "host.py")], env=env, capture_output=True, text=True, timeout=180
    )
    assert again.stdout.startswith("admitted: duplicate")


class TeamCodec(PayloadCodec):
    """A team's own payload codec (here: a marker prefix), to prove tempomem runs on their converter."""

    PREFIX = b"team:"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": b"team/v1"}, data=self.PREFIX + p.SerializeToString())
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            assert p.metadata.get("encoding") == b"team/v1" and p.data.startswith(self.PREFIX)
            decoded = Payload()
            decoded.ParseFromString(p.data[len(self.PREFIX) :])
            out.append(decoded)
        return out


class CountingInterceptor(Interceptor):
    """A team's client interceptor: counts the workflows started through its client."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        outer = self

        class Counting(OutboundInterceptor):
            async def start_workflow(self, input: StartWorkflowInput):  # type: ignore[no-untyped-def]
                outer.started.append(input.id)
                return await super().start_workflow(input)

        return Counting(next)


async def test_a_teams_own_worker_registers_tempomem_on_its_client(client: Client, tmp_path: Path) -> None:
    """store_worker_parts: tempomem's workflows and activities on a client the test creates, with its own
    interceptor and data converter (codec included), and a Worker the team builds."""
    import concurrent.futures
    import dataclasses

    from temporalio.converter import DataConverter
    from temporalio.worker import Worker

    from tempomem.worker import store_worker_parts

    counting = CountingInterceptor()
    team_client = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        interceptors=[counting],
        data_converter=dataclasses.replace(DataConverter.default, payload_codec=TeamCodec()),
    )
    store = MemoryStore(
        load_config_data(
            {"memory": {"mode": "lite", "writeMode": "append-host-summary", "path": str(tmp_path / "m")}}
        ),
        client=team_client,
        first_delay_seconds=1,
    )
    parts = store_worker_parts(store, team_client)
    assert {w.__name__ for w in parts.workflows} >= {"CaptureWorkflow", "IntakeSweepWorkflow"}
    result = await store.persist_completed_turn(
        CompletedTurn(
            run_id="team-worker-1",
            conversation_id="web:x",
            speaker_kind="human-turn",
            user_text="The office plant is a fern.",
            final_answer="Noted: the office plant is a fern.",
            admitted_at=datetime(2026, 12, 1, tzinfo=UTC),
        )
    )
    assert counting.started == [result.workflow_id]  # the start went through the team's interceptor
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        async with Worker(
            team_client,
            task_queue=parts.task_queue,
            workflows=parts.workflows,
            activities=parts.activities,
            activity_executor=pool,
            max_concurrent_activities=1,
        ):
            assert str(await store.wait_until_curated(result.intake_id, timeout=60)) == "resolved"
    assert "fern" in store.search("office plant")[0].text
    history = await client.get_workflow_handle(result.workflow_id).fetch_history()
    encodings = {
        p.metadata.get("encoding")
        for e in history.events
        if e.HasField("workflow_execution_started_event_attributes")
        for p in e.workflow_execution_started_event_attributes.input.payloads
    }
    assert encodings == {b"team/v1"}  # the input was encoded by the team's codec


async def test_REC51_recall_with_outcome_on_lite_and_on_a_degraded_store(tmp_path: Path) -> None:
    store = MemoryStore(load_config_data({"memory": {"mode": "lite", "path": str(tmp_path / "m")}}))
    store.remember("The spare key is under the blue flowerpot.", conversation_id="web:t")
    found = await store.recall_with_outcome("where is the spare key")
    assert not found.degraded and "blue flowerpot" in found.hits[0].text
    import shutil

    shutil.rmtree(tmp_path / "m" / "index")
    (tmp_path / "m" / "index").write_text("not a folder")  # an index that cannot be opened
    broken = MemoryStore(load_config_data({"memory": {"mode": "lite", "path": str(tmp_path / "m")}}))
    degraded = await broken.recall_with_outcome("where is the spare key")
    assert degraded.degraded and degraded.hits == [] and "degraded" in degraded.text
    store.close()
    broken.close()


async def test_REC01_recall_is_read_only(tmp_path: Path) -> None:
    """Recall reads the index and writes no memory: canonical files and the intake are byte-identical."""
    store = MemoryStore(load_config_data({"memory": {"mode": "lite", "path": str(tmp_path / "m")}}))
    store.remember("The spare key is under the blue flowerpot.", conversation_id="web:t")

    def memory_files() -> dict[str, bytes]:
        root = tmp_path / "m"
        return {
            str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] != "index"
        }

    before = memory_files()
    assert (await store.recall_with_outcome("where is the spare key")).hits
    store.search("spare key")
    assert memory_files() == before
    store.close()


def test_the_async_forms_take_the_blocking_methods_arguments_and_run_off_the_loop() -> None:
    """``recall``, ``journal``, ``automatic_context`` and ``remember_async`` are their blocking methods
    run in a worker thread (``tempomem.store.in_worker_thread``): same signature, awaitable, own name."""
    import asyncio
    import inspect
    import threading

    from tempomem.store import in_worker_thread

    class Probe:
        def work_sync(self, a: int, *, b: int = 1) -> tuple[int, int, int]:
            return threading.get_ident(), a, b

        def save(self) -> str:
            return "saved"

        work = in_worker_thread(work_sync)
        save_async = in_worker_thread(save)

    ident, a, b = asyncio.run(Probe().work(2, b=3))
    assert ident != threading.get_ident() and (a, b) == (2, 3)
    assert asyncio.run(Probe().save_async()) == "saved"
    assert (Probe.work.__name__, Probe.save_async.__name__) == ("work", "save_async")
    for async_form, blocking in (
        (MemoryStore.recall, MemoryStore.recall_sync),
        (MemoryStore.journal, MemoryStore.journal_sync),
        (MemoryStore.automatic_context, MemoryStore.automatic_context_sync),
        (MemoryStore.remember_async, MemoryStore.remember),
    ):
        assert inspect.iscoroutinefunction(async_form)
        assert inspect.signature(async_form) == inspect.signature(blocking)
