"""The package layout (#18): no import cycle between tempomem's modules, counting the lazy imports inside
functions too (only ``if TYPE_CHECKING:`` blocks are left out: they never run), and no module imports
another module's private name. Read from the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "tempomem": "tempomem",
    "storage": "tempomem.storage",
    "recall": "tempomem.recall",
    "capture": "tempomem.capture",
    "activities": "tempomem.activities",
    "workflows": "tempomem.workflows",
}


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((package, *parts))] = path
    return out


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _runtime_imports(ast.Module([child], [])))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _runtime_imports(node)


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    private: list[str] = []
    for name, path in mods.items():
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tempomem"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    graph[name].add(target if target in mods else node.module)
                    if alias.name.startswith("_") and node.module != name:
                        private.append(f"{name} imports {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in mods}
        graph[name] &= set(mods)
        graph[name].discard(name)
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_the_modules_and_their_lazy_imports() -> None:
    graph, _ = import_graph()
    assert len(graph) > 60 and "tempomem.cli.app" in graph  # subpackages too
    assert "tempomem.worker" in graph["tempomem.cli.batch"]  # imported inside a function
    assert "tempomem.capture.model_client" not in graph["tempomem.capture.settings"]  # TYPE_CHECKING only


def test_layers_import_only_downwards() -> None:
    """storage knows nothing above it; the capture logic knows neither the activity layer nor the
    workflows (issue #18 item 2), so it runs and is tested without Temporal."""
    graph, _ = import_graph()
    above = {
        "tempomem.storage": (
            "tempomem.recall",
            "tempomem.capture",
            "tempomem.activities",
            "tempomem.workflows",
        ),
        "tempomem.capture": ("tempomem.activities", "tempomem.workflows"),
        "tempomem.recall": ("tempomem.capture", "tempomem.activities", "tempomem.workflows"),
        # What crosses Temporal: the activities, the workflows and the starters share it.
        "tempomem.messages": ("tempomem.",),
    }
    wrong = [
        f"{name} imports {target}"
        for name, targets in graph.items()
        for layer, banned in above.items()
        if name.startswith(layer + ".")
        for target in targets
        if target.startswith(banned)
    ]
    assert wrong == []
    assert any(t.startswith("tempomem.capture.") for t in graph["tempomem.activities.curation"])


def test_activities_take_their_types_from_the_messages_not_from_workflow_modules() -> None:
    """Issue #18 item 2: the shared inputs and results live in tempomem.messages; an activity module
    imports no workflow module."""
    graph, _ = import_graph()
    wrong = [
        f"{name} imports {target}"
        for name, targets in graph.items()
        if name.startswith("tempomem.activities.")
        for target in targets
        if target.startswith("tempomem.workflows")
    ]
    assert wrong == []
    assert "tempomem.messages.capture" in graph["tempomem.activities.intake_ops"]


def test_no_import_cycles() -> None:
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_name() -> None:
    _, private = import_graph()
    assert private == []


def test_every_package_on_disk_is_in_the_distribution() -> None:
    """setuptools lists the packages by name (pyproject ``packages``): a new subpackage left out of that
    list would be missing from the wheel while the editable install still found it."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join((package, *init.parent.relative_to(REPO / folder).parts))
        for folder, package in PACKAGES.items()
        for init in (REPO / folder).rglob("__init__.py")
    }
    assert on_disk == listed
