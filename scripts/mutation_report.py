"""Kill rate of a mutmut run (scripts/mutation.sh): per file and in total, with the recorded equivalent
mutants (tests/mutation_equivalent.txt: ``name  reason``) taken out of the denominator.

The goal (issue #13) covers storage/ and the commit path: the reconciliation activity
(activities/curation.py), the semantic commit (capture/commit.py) and replay adoption; the model-facing
stages (extraction, review, the reconciliation decision in capture/reconcile.py) are mutated too but
counted apart, as "model stages": their tests need the
dev server and the scripted model (tests/test_capture_pipeline.py), which a mutant run does not start."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {
    1: "killed",
    3: "killed",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    -11: "segfault",
    -9: "segfault",
    37: "type check",
}


MODEL_STAGES = {
    "tempomem.activities.curation": {
        "extract",
        "review",
        "_complete",
        "_model",
        "settings",
        "_failure",
        "_save",  # called only by extract and review, after their model call
        "__init__",
    },
    "tempomem.capture.reconcile": {"decide", "close_lines"},
}


def _function(name: str) -> tuple[str, str]:
    """(module, function) of a mutant name such as ``pkg.mod.xǁClassǁmethod__mutmut_3``."""
    head = name.partition("__mutmut_")[0]
    module, _, mangled = head.rpartition(".")
    return module, mangled.rsplit("ǁ", 1)[-1].removeprefix("x_")


def _rate(killed: int, checked: int) -> str:
    return f"{killed / checked:6.1%}" if checked else "     -"


def _sample(work: Path) -> set[str]:
    path = work / "sample.txt"  # scripts/mutation_sample.py
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def _estimate(per_file: dict[str, Counter], sampled: dict[str, Counter], drawn: int) -> None:
    """The kill rate over every mutant, the unchecked ones estimated file by file from the random sample
    (stratified estimate; 95% interval from the normal approximation, each file's sampling variance
    ``U² q(1-q)/n`` with ``q = (k+1)/(n+2)``, so a small all-killed sample is not certain). A file whose
    sample has no checked member yet takes the pooled sample rate."""
    pooled_n = sum(c["checked"] for c in sampled.values())
    if not pooled_n:
        print(f"sample: {drawn} mutants drawn, none checked yet")
        return
    pooled = sum(c["killed"] for c in sampled.values()) / pooled_n
    killed = mutants = 0.0
    variance = 0.0
    print(f"sample: {drawn} drawn, {pooled_n} checked ({pooled:.1%} killed); per file, the unchecked rest:")
    for rel, c in sorted(per_file.items()):
        if rel.endswith("(model stages)"):
            continue
        exact = sum(c.values()) - c["equivalent"] - c["skipped"] - c["not checked"]
        s = sampled.get(rel, Counter())
        p = s["killed"] / s["checked"] if s["checked"] else pooled
        n = s["checked"] or pooled_n
        unchecked = c["not checked"]
        killed += c["killed"] + unchecked * p
        mutants += exact + unchecked
        q = (s["killed"] + 1) / (n + 2) if s["checked"] else pooled  # no zero variance from 5/5
        variance += unchecked**2 * q * (1 - q) / n
        if unchecked:
            print(f"  {rel:56} {unchecked:5} unchecked, est. {p:6.1%} (sample {s['killed']}/{s['checked']})")
    half = 1.96 * math.sqrt(variance) / mutants
    rate = killed / mutants
    print(
        f"estimated kill rate over all {int(mutants)} mutants: {rate:.1%} "
        f"(95% interval {max(0.0, rate - half):.1%} to {min(1.0, rate + half):.1%})"
    )


def main(root: Path, work: Path, scope: str = "core") -> int:
    equivalent_file = root / "tests" / "mutation_equivalent.txt"
    equivalent = {}
    if equivalent_file.exists():
        for line in equivalent_file.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                equivalent[name] = reason.strip()
    per_file: dict[str, Counter] = defaultdict(Counter)
    sample = _sample(work)
    sampled: dict[str, Counter] = defaultdict(Counter)  # per file: the sample's checked members
    survivors: list[str] = []
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        rel = str(meta.relative_to(work / "mutants"))[: -len(".meta")]
        for name, code in data.get("exit_code_by_key", {}).items():
            module, function = _function(name)
            if function in MODEL_STAGES.get(module, ()):
                per_file[rel + " (model stages)"]["killed" if code in KILLED else "outside"] += 1
                continue
            if name in sample and code is not None and name not in equivalent and code != 34:
                sampled[rel]["checked"] += 1
                sampled[rel]["killed"] += code in KILLED
            if name in equivalent:
                per_file[rel]["equivalent"] += 1
            elif code in KILLED:
                per_file[rel]["killed"] += 1
            elif code is None:
                per_file[rel]["not checked"] += 1
            elif code in (5, 33):
                per_file[rel]["no tests"] += 1
                survivors.append(name)
            elif code == 34:
                per_file[rel]["skipped"] += 1
            else:
                per_file[rel]["survived"] += 1
                survivors.append(name)
    total: Counter = Counter()
    if scope == "recall":
        print("scope recall (#13 reports its kill rate; the 90% goal is storage/ and the commit path)")
    print(f"{'file':58} {'mutants':>7} {'killed':>6} {'surv':>5} {'equiv':>5} {'rate':>6}")
    for rel, c in sorted(per_file.items()):
        if rel.endswith("(model stages)"):
            print(
                f"{rel:58} {sum(c.values()):7} {c['killed']:6}   (not under the goal: needs the dev server)"
            )
            continue
        total.update(c)
        n = sum(c.values()) - c["equivalent"] - c["skipped"] - c["not checked"]
        print(
            f"{rel:58} {sum(c.values()):7} {c['killed']:6} {c['survived'] + c['no tests']:5} "
            f"{c['equivalent']:5} {_rate(c['killed'], n)}"
        )
    n = sum(total.values()) - total["equivalent"] - total["skipped"] - total["not checked"]
    print(
        f"{'total':58} {sum(total.values()):7} {total['killed']:6} {total['survived'] + total['no tests']:5} "
        f"{total['equivalent']:5} {_rate(total['killed'], n)}"
    )
    if total["not checked"]:
        print(f"not checked yet: {total['not checked']}")
    if sample and total["not checked"]:
        _estimate(per_file, sampled, len(sample))
    print(f"survivors ({len(survivors)}), see `bash scripts/mutation.sh show NAME`:")
    for name in survivors:
        print("  " + name)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:4]))
