"""Requirement traceability: requirement id → code that cites it → tests that cite it → status (#14).

    python scripts/traceability.py            # check; exit 1 on a problem (CI runs this through a test)
    python scripts/traceability.py --write    # regenerate docs/traceability.md from the spec

The ids come from the requirements checklist (``$TEMPOMEM_SPEC``, else ``../shared/spec/REQUIREMENTS.md``
beside the repository). Without that file the committed table is the registry of ids, so a fresh clone
still checks its citations. A citation is an id (``CAP-38``) or a range (``JRN-01..JRN-22``,
``LIM-01..04``) anywhere in a source, script or doc file; ``tests/`` counts as the test side.

Fails when:
- code, docs or tests cite an id that the spec does not define;
- a requirement (every id except the [INFO] observations) has no test citation and no recorded decision
  in ``docs/traceability-decisions.toml`` (out of scope with the reason, or open with what is missing);
- a requirement recorded as open is now cited by a test (take the entry out: the table says tested);
- with the spec present, the committed table differs from the one generated (run ``--write``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = "docs/traceability.md"
DECISIONS = "docs/traceability-decisions.toml"
GROUP_TITLES = {
    "CFG": "Configuration and validation",
    "WM": "Write modes and skip rules",
    "INTAKE": "Durable intake",
    "STORE": "Store contract and speaker provenance",
    "TIER": "Tier projections",
    "CAP": "Capture pipeline",
    "RPL": "Replay sidecar and crash idempotence",
    "REM": "Remember tool",
    "POL": "Read-tool policy",
    "REC": "MemoryRecall",
    "AUTO": "Automatic recall block",
    "GUIDE": "Labelled guidance and person cards",
    "GRAPH": "Entity graph",
    "JRN": "MemoryJournal",
    "PROFILE": "Owner profile",
    "INTENT": "Intentions and recency",
    "PROV": "Conversation provenance",
    "HOST": "Host input and injection",
    "CLI": "Operator CLI",
    "LIM": "Bounds and limits",
}
GROUPS = (*GROUP_TITLES, "AMB")  # AMB-… are the spec's recorded decisions
_G = "|".join(GROUPS)
# An id, optionally followed by a range end: "JRN-01..JRN-22", "LIM-01..04", "CAP-10–CAP-12".
# Test names cite without the hyphen: test_REC03_REC04_tool_description.
CITATION = re.compile(
    rf"(?<![A-Za-z0-9])({_G})-?(\d{{2,3}})(?:\s*(?:\.\.|–|…)\s*(?:(?:{_G})-?)?(\d{{2,3}}))?(?![0-9])"
)
# Lower-case citations count only inside test names: def test_wm05_no_op_sentinel.
TEST_NAME = re.compile(r"def (test_\w+)")
NAME_CITATION = re.compile(rf"(?<![a-z])({_G.lower()})(\d{{2,3}})(?![0-9])")
SCANNED_SUFFIXES = {".py", ".md", ".txt", ".sh", ".toml", ".yml", ".yaml"}
SKIPPED_PARTS = {".git", ".venv", ".mutation", "__pycache__", "tempomem.egg-info", "histories"}
# Files that cite ids because they are about the table, not because they implement or test a requirement.
NOT_EVIDENCE = {
    "docs/traceability.md",
    "docs/traceability-decisions.toml",
    "scripts/traceability.py",
    "tests/test_traceability.py",
}


@dataclass
class Requirement:
    id: str
    tags: list[str]
    code: set[str] = field(default_factory=set)
    tests: set[str] = field(default_factory=set)
    named_by_test: bool = False  # a test names the id itself, not only a range around it

    @property
    def is_requirement(self) -> bool:
        return "INFO" not in self.tags


def spec_path(root: Path = ROOT) -> Path:
    env = os.environ.get("TEMPOMEM_SPEC")
    return Path(env) if env else root.parent / "shared" / "spec" / "REQUIREMENTS.md"


def parse_spec(text: str) -> tuple[dict[str, Requirement], set[str]]:
    reqs: dict[str, Requirement] = {}
    for m in re.finditer(r"^- \[ \] \*\*([A-Z]+-\d+)\*\*(.*)$", text, re.M):
        reqs[m.group(1)] = Requirement(m.group(1), sorted(set(re.findall(r"\[([A-Z]+)\]", m.group(2)))))
    for m in re.finditer(r"^\| (LIM-\d+) \|(.*)$", text, re.M):
        reqs[m.group(1)] = Requirement(m.group(1), ["INFO"] if "[INFO]" in m.group(2) else [])
    decisions = set(re.findall(r"\*\*(AMB-\d+)\b", text))
    return reqs, decisions


def parse_table(text: str) -> tuple[dict[str, Requirement], set[str]]:
    """The registry of ids from a committed table (no spec here)."""
    reqs: dict[str, Requirement] = {}
    for m in re.finditer(r"^\| ([A-Z]+-\d+) \| ([A-Z, ]*) \|", text, re.M):
        reqs[m.group(1)] = Requirement(m.group(1), [t for t in m.group(2).split(", ") if t])
    amb = re.search(r"^Decision ids \(AMB\): (.*)$", text, re.M)
    decisions = set(amb.group(1).split(", ")) if amb else set()
    return reqs, decisions


def expand(group: str, first: str, last: str | None) -> list[str]:
    width = len(first)
    if last is None or int(last) < int(first) or int(last) - int(first) > 60:
        return [f"{group}-{first}"]
    return [f"{group}-{n:0{width}d}" for n in range(int(first), int(last) + 1)]


def scanned_files(root: Path) -> list[Path]:
    """The repository's files as a clean checkout has them: tracked and untracked-but-not-ignored files
    in a git checkout (build output, caches and scratch trees never count), every file otherwise."""
    import subprocess

    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
        candidates = sorted({root / name for name in listed.decode().split("\0") if name})
    except (OSError, subprocess.CalledProcessError):
        candidates = sorted(root.rglob("*"))
    out = []
    for p in candidates:
        rel = p.relative_to(root)
        if SKIPPED_PARTS & set(rel.parts) or p.suffix not in SCANNED_SUFFIXES or not p.is_file():
            continue
        if rel.as_posix() in NOT_EVIDENCE:
            continue
        out.append(p)
    return out


def citations(root: Path) -> dict[str, dict[str, set[str]]]:
    """id → {"code": files, "tests": files, "named": test files that name the id itself}. A range cites
    its two ends by name and the ids between them only as part of the range."""
    cited: dict[str, dict[str, set[str]]] = {}
    for p in scanned_files(root):
        rel = p.relative_to(root).as_posix()
        side = "tests" if rel.startswith("tests/") else "code"
        text = p.read_text(encoding="utf-8", errors="replace")
        found: list[tuple[str, bool]] = []
        for m in CITATION.finditer(text):
            ids = expand(*m.groups())
            found += [(rid, i in (0, len(ids) - 1)) for i, rid in enumerate(ids)]
        for name in TEST_NAME.findall(text):
            found += [(f"{g.upper()}-{n}", True) for g, n in NAME_CITATION.findall(name)]
        for rid, named in found:
            entry = cited.setdefault(rid, {"code": set(), "tests": set(), "named": set()})
            entry[side].add(rel)
            if named and side == "tests":
                entry["named"].add(rel)
    return cited


def load_decisions(root: Path) -> dict[str, dict[str, str]]:
    path = root / DECISIONS
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return {kind: dict(data.get(kind, {})) for kind in ("out_of_scope", "open")}


def status(req: Requirement, decisions: dict[str, dict[str, str]]) -> str:
    if not req.is_requirement:
        return "observation"
    if req.id in decisions["out_of_scope"]:
        return "out of scope"
    if req.tests:
        return "tested" if req.named_by_test else "tested (range)"
    if req.id in decisions["open"]:
        return "open"
    return "untraced"


def files_cell(files: set[str], limit: int = 3) -> str:
    shown = sorted(files, key=lambda f: (f.startswith("docs/") or f == "README.md", len(f), f))[:limit]
    more = len(files) - len(shown)
    return ", ".join(f"`{f}`" for f in shown) + (f" +{more}" if more > 0 else "")


def render(reqs: dict[str, Requirement], amb: set[str], decisions: dict[str, dict[str, str]]) -> str:
    counts: dict[str, int] = {}
    for r in reqs.values():
        counts[status(r, decisions)] = counts.get(status(r, decisions), 0) + 1
    lines = [
        "# Requirement traceability",
        "",
        "Generated by `python scripts/traceability.py --write` from the requirements checklist;",
        "checked in CI by `tests/test_traceability.py`. Each row: the id, its tags, the code and docs",
        "that cite it, the tests that cite it, and its status. *tested*: a test names the id.",
        "*tested (range)*: only a range in a test (``REC-18..REC-31``) covers it, the test's own claim.",
        "*open*: not done yet, the reason is in",
        "`docs/traceability-decisions.toml`. *out of scope*: cannot apply to this design, with the reason.",
        "*observation*: a calibration note ([INFO]), not a requirement.",
        "",
        "Totals: " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)),
        "",
        "Decision ids (AMB): " + ", ".join(sorted(amb, key=_key)),
    ]
    by_group: dict[str, list[Requirement]] = {}
    for r in sorted(reqs.values(), key=lambda r: _key(r.id)):
        by_group.setdefault(r.id.split("-")[0], []).append(r)
    for group in GROUPS:
        if group not in by_group:
            continue
        lines += [
            "",
            f"## {group}: {GROUP_TITLES.get(group, group)}",
            "",
            "| Id | Tags | Code and docs | Tests | Status |",
            "|---|---|---|---|---|",
        ]
        for r in by_group[group]:
            st = status(r, decisions)
            why = decisions["out_of_scope"].get(r.id) or (
                decisions["open"].get(r.id) if st == "open" else None
            )
            cell = f"{st}: {why}" if why else st
            lines.append(
                f"| {r.id} | {', '.join(r.tags)} | {files_cell(r.code)} | {files_cell(r.tests)} | {cell} |"
            )
    return "\n".join(lines) + "\n"


def _key(rid: str) -> tuple[int, int]:
    group, n = rid.split("-")
    return (GROUPS.index(group) if group in GROUPS else len(GROUPS), int(n))


def check(root: Path = ROOT, *, spec: Path | None = None, write: bool = False) -> list[str]:
    """Problems found (empty: all traced). ``write`` regenerates the table instead of comparing it."""
    spec = spec or spec_path(root)
    table_path = root / TABLE
    if spec.exists():
        reqs, amb = parse_spec(spec.read_text(encoding="utf-8"))
    elif table_path.exists():
        reqs, amb = parse_table(table_path.read_text(encoding="utf-8"))
    else:
        return [f"no requirements: neither {spec} (set TEMPOMEM_SPEC) nor {TABLE}"]
    decisions = load_decisions(root)
    problems = []
    for rid, sides in sorted(citations(root).items(), key=lambda kv: _key(kv[0])):
        if rid in reqs:
            reqs[rid].code, reqs[rid].tests = sides["code"], sides["tests"]
            reqs[rid].named_by_test = bool(sides["named"])
        elif rid not in amb:
            where = sorted(sides["code"] | sides["tests"])
            problems.append(f"{rid}: cited but not defined by the spec ({', '.join(where[:3])})")
    for kind, entries in decisions.items():
        for rid in entries:
            if rid not in reqs:
                problems.append(f"{rid}: recorded as {kind} in {DECISIONS} but not defined by the spec")
    for r in sorted(reqs.values(), key=lambda r: _key(r.id)):
        st = status(r, decisions)
        if st == "untraced":
            problems.append(f"{r.id}: no test cites it and no decision is recorded")
        if r.tests and r.id in decisions["open"]:
            problems.append(f"{r.id}: recorded as open but tests cite it ({files_cell(r.tests, 2)})")
    table = render(reqs, amb, decisions)
    if write:
        table_path.parent.mkdir(exist_ok=True)
        table_path.write_text(table, encoding="utf-8")
    elif not table_path.exists() or table_path.read_text(encoding="utf-8") != table:
        problems.append(f"{TABLE} is stale: run python scripts/traceability.py --write")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="regenerate docs/traceability.md")
    args = parser.parse_args(argv)
    problems = check(write=args.write)
    for p in problems:
        print(p)
    if not problems:
        totals = (ROOT / TABLE).read_text(encoding="utf-8").splitlines()
        print(next(x for x in totals if x.startswith("Totals:")))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
