"""Requirement traceability (#14): scripts/traceability.py over this repository, and what it catches on a
small made-up repository. Without the spec beside the repository the committed table is the registry."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("traceability", REPO / "scripts" / "traceability.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["traceability"] = module
    spec.loader.exec_module(module)
    return module


tr = load_script()

SPEC = """# checklist
- [ ] **CFG-01** one thing.
- [ ] **CFG-02** another thing. [LLM]
- [ ] **CFG-03** a third thing.
- [ ] **CAP-61** an observation. [INFO]

| ID | Limit |
|---|---|
| LIM-01 | a bound |
| LIM-02 | a note [INFO] |

- **AMB-01 Something.** a decision.
"""


def make_repo(tmp_path: Path, files: dict[str, str], decisions: str = "") -> tuple[Path, Path]:
    root = tmp_path / "repo"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "traceability-decisions.toml").write_text(decisions)
    spec = tmp_path / "REQUIREMENTS.md"
    spec.write_text(SPEC)
    return root, spec


GOOD = {
    "storage/a.py": "# CFG-01..CFG-03, AMB-01\n",
    "tests/test_a.py": "def test_cfg01_thing():\n    pass  # LIM-01\n",
    "tests/test_b.py": '"""CFG-02..03"""\n',
}


def test_this_repository_is_traced() -> None:
    assert tr.check() == []


def test_a_traced_repository_passes_and_the_table_says_why(tmp_path: Path) -> None:
    root, spec = make_repo(tmp_path, GOOD)
    assert tr.check(root, spec=spec, write=True) == []
    assert tr.check(root, spec=spec) == []
    table = (root / "docs" / "traceability.md").read_text()
    assert "| CFG-01 |  | `storage/a.py` | `tests/test_a.py` | tested |" in table  # lower-case test name
    assert "| CFG-02 | LLM | `storage/a.py` | `tests/test_b.py` | tested |" in table  # ranges, both forms
    assert "| CAP-61 | INFO |  |  | observation |" in table and "| LIM-02 | INFO |" in table
    assert "Totals: observation 2, tested 4" in table
    # Without the spec, the committed table is the registry and gives the same verdict.
    assert tr.check(root, spec=tmp_path / "absent.md") == []


@pytest.mark.parametrize(
    ("change", "decisions", "problem"),
    [
        ({"storage/b.py": "# CFG-09\n"}, "", "CFG-09: cited but not defined by the spec (storage/b.py)"),
        ({"tests/test_a.py": "# LIM-99 and AMB-77\n"}, "", "LIM-99: cited but not defined by the spec"),
        ({"tests/test_b.py": ""}, "", "CFG-02: no test cites it and no decision is recorded"),
        ({}, '[open]\n"CFG-01" = "x"\n', "CFG-01: recorded as open but tests cite it (`tests/test_a.py`)"),
        ({}, '[open]\n"CFG-77" = "x"\n', "CFG-77: recorded as open in docs/traceability-decisions.toml"),
    ],
)
def test_what_fails_the_check(tmp_path: Path, change: dict[str, str], decisions: str, problem: str) -> None:
    root, spec = make_repo(tmp_path, {**GOOD, **change}, decisions)
    problems = tr.check(root, spec=spec, write=True)
    assert any(p.startswith(problem) for p in problems), problems


def test_a_recorded_decision_traces_an_untested_requirement(tmp_path: Path) -> None:
    decisions = '[out_of_scope]\n"CFG-02" = "the host does this"\n"CFG-03" = "also"\n'
    root, spec = make_repo(tmp_path, {**GOOD, "tests/test_b.py": ""}, decisions)
    assert tr.check(root, spec=spec, write=True) == []
    assert "| out of scope: the host does this |" in (root / "docs" / "traceability.md").read_text()


def test_a_stale_table_fails(tmp_path: Path) -> None:
    root, spec = make_repo(tmp_path, GOOD)
    assert tr.check(root, spec=spec, write=True) == []
    (root / "tests" / "test_c.py").write_text("# CFG-03\n")  # a new citation changes the table
    assert tr.check(root, spec=spec) == [
        "docs/traceability.md is stale: run python scripts/traceability.py --write"
    ]


def test_ignored_files_are_not_read_in_a_git_checkout(tmp_path: Path) -> None:
    """Build output and caches a clean clone does not have never count (git's own ignore rules)."""
    import subprocess

    root, spec = make_repo(tmp_path, {**GOOD, ".gitignore": "build/\n", "build/lib/copy.py": "# CFG-99\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert tr.check(root, spec=spec, write=True) == []
    (root / ".gitignore").write_text("")
    assert any(p.startswith("CFG-99: cited but not defined") for p in tr.check(root, spec=spec, write=True))


def test_an_id_only_inside_a_test_range_is_marked_as_such(tmp_path: Path) -> None:
    root, spec = make_repo(tmp_path, {**GOOD, "tests/test_b.py": '"""CFG-01..CFG-03"""\n'})
    assert tr.check(root, spec=spec, write=True) == []
    table = (root / "docs" / "traceability.md").read_text()
    assert "| CFG-02 | LLM | `storage/a.py` | `tests/test_b.py` | tested (range) |" in table
    assert "| CFG-03 |  | `storage/a.py` | `tests/test_b.py` | tested |" in table  # a range's end is named
