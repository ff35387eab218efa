"""Draw (or resume) a random sample of the mutants a run has not checked yet (scripts/mutation.sh sample).

A complete run of a large scope can take longer than the machine it runs on lasts (recall/: about six
hours on 2 cores). Mutant sampling is the standard way out: a uniform random sample of the unchecked
mutants of each file, checked like any other, estimates the kill rate of the rest, and the report gives
that estimate with its 95% interval beside the exact figures (scripts/mutation_report.py).

The sample is written once to ``<work>/sample.txt`` (seed, percentage, then one mutant name per line) and
reused after that, so an interrupted sample run resumes. Prints the names still to check, one per line.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

SAMPLE_FILE = "sample.txt"


def unchecked_by_file(work: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        rel = str(meta.relative_to(work / "mutants"))[: -len(".meta")]
        for name, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
            if code is None:
                out[rel].append(name)
    return out


def read_sample(work: Path) -> set[str]:
    path = work / SAMPLE_FILE
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def draw(work: Path, percent: float, seed: int) -> list[str]:
    """Per file, ceil(percent% of its unchecked mutants), chosen by a generator seeded per file so one
    file's sample does not depend on another's."""
    if not 0 < percent <= 100:
        raise SystemExit(f"sample percentage must be in (0, 100], not {percent}")
    names: list[str] = []
    for rel, unchecked in sorted(unchecked_by_file(work).items()):
        k = math.ceil(len(unchecked) * percent / 100)
        names += sorted(random.Random(f"{seed}:{rel}").sample(sorted(unchecked), k))
    body = "".join(n + "\n" for n in names)
    (work / SAMPLE_FILE).write_text(f"# seed {seed}, {percent:g}% of the mutants unchecked per file\n{body}")
    return names


def main(work: Path, percent: float, seed: int) -> int:
    sample = read_sample(work) or set(draw(work, percent, seed))
    pending = {n for names in unchecked_by_file(work).values() for n in names} & sample
    for name in sorted(pending):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])))
