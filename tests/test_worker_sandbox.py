"""The worker's workflow sandbox passes the ``tempomem`` package through (issue #15 item 2,
``tempomem.worker.workflow_runner``): tempomem's workflow modules are imported once instead of once per
run, and the sandbox no longer intercepts their calls. So their determinism is checked here statically:
they import only ``temporalio``, ``datetime.timedelta``, a few pure standard-library modules and
tempomem's own workflow, message and constant modules, and they name no clock, randomness, file, process or
network API. Workflows of other packages on the same runner stay sandboxed (checked on a real dev
server)."""

from __future__ import annotations

import ast
import concurrent.futures
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from tempomem.worker import workflow_runner
from tests.helpers.sandbox_probe import SandboxProbe

REPO = Path(__file__).resolve().parents[1]
# The workflow modules and the messages they share with activities (passed through the sandbox too).
WORKFLOW_MODULES = sorted((REPO / "workflows").glob("*.py")) + sorted(
    (REPO / "tempomem" / "messages").glob("*.py")
)
STDLIB = {"__future__", "asyncio", "builtins", "collections", "contextlib", "dataclasses", "typing"}
OWN = ("tempomem.workflows", "tempomem.messages", "tempomem.storage.limits")
# Names whose use in workflow code would be non-deterministic (the sandbox would have refused them).
FORBIDDEN = {
    *("now", "utcnow", "today", "time", "monotonic", "perf_counter", "sleep", "random", "uuid4"),
    *("urandom", "open", "Path", "getenv", "environ", "system", "Thread", "socket", "run_in_executor"),
}


def imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in ("datetime", "tempomem.storage"):  # judged by what is taken from them
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                names.add(node.module)
    return names


@pytest.mark.parametrize(
    "path", WORKFLOW_MODULES, ids=[f"{p.parent.name}/{p.name}" for p in WORKFLOW_MODULES]
)
def test_a_workflow_module_imports_only_what_keeps_it_deterministic(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    strays = {
        name
        for name in imports(tree)
        if name.split(".")[0] not in STDLIB
        and name not in ("datetime", "datetime.timedelta")
        and name != "temporalio"
        and not name.startswith("temporalio.")
        and not name.startswith(OWN)
    }
    assert strays == set()
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    # workflow.now / workflow.sleep are Temporal's deterministic versions: allowed through ``workflow.``
    calls_through_workflow = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "workflow"
    }
    assert (used & FORBIDDEN) - calls_through_workflow == set()


def test_the_constants_the_workflows_share_import_nothing_that_acts() -> None:
    tree = ast.parse((REPO / "storage" / "limits.py").read_text(encoding="utf-8"))
    assert {n.split(".")[0] for n in imports(tree)} <= STDLIB


def test_the_static_check_finds_a_clock_call() -> None:
    tree = ast.parse("from datetime import datetime\nx = datetime.now()\n")
    assert "datetime.datetime" in imports(tree) and "now" in {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }


async def test_workflows_of_other_packages_stay_sandboxed(client: Client) -> None:
    queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[SandboxProbe],
            activity_executor=executor,
            workflow_runner=workflow_runner(),
        ):
            outcomes = await client.execute_workflow(
                SandboxProbe.run, id=f"probe-{queue}", task_queue=queue, result_type=list[str]
            )
    assert outcomes == ["RestrictedWorkflowAccessError"] * 3
