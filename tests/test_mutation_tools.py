"""scripts/mutation_sample.py and scripts/mutation_report.py over a hand-made mutmut scratch directory
(the ``.meta`` files mutmut writes: mutant name → exit code, None = not checked yet)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _work(tmp_path: Path, files: dict[str, dict[str, int | None]]) -> Path:
    for rel, codes in files.items():
        meta = tmp_path / "mutants" / "src" / "pkg" / f"{rel}.meta"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({"exit_code_by_key": codes}))
    return tmp_path


def _run(script: str, *args: object) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout


def _names(prefix: str, n: int) -> list[str]:
    return [f"pkg.{prefix}.x_f__mutmut_{i}" for i in range(1, n + 1)]


def test_the_sample_is_drawn_per_file_from_the_unchecked_once_and_then_resumed(tmp_path: Path) -> None:
    a, b = _names("a", 40), _names("b", 8)
    work = _work(
        tmp_path,
        {"a.py": {**dict.fromkeys(a[:20], 1), **dict.fromkeys(a[20:])}, "b.py": dict.fromkeys(b)},
    )
    drawn = _run("mutation_sample.py", work, 25, 7).split()
    assert len([n for n in drawn if ".a." in n]) == 5 and len([n for n in drawn if ".b." in n]) == 2
    assert set(drawn) <= set(a[20:]) | set(b)  # only what was unchecked
    assert _run("mutation_sample.py", work, 25, 7).split() == drawn  # deterministic
    assert _run("mutation_sample.py", work, 90, 1).split() == drawn  # the first draw stands
    other = _run("mutation_sample.py", _work(tmp_path / "other", {"a.py": dict.fromkeys(a)}), 25, 8).split()
    assert other != [n for n in drawn if ".a." in n]  # another seed, another sample
    # a checked sample member is no longer pending
    _work(tmp_path, {"b.py": {**dict.fromkeys(b), drawn[-1]: 1}})
    assert _run("mutation_sample.py", work, 25, 7).split() == drawn[:-1]


def test_the_report_estimates_the_unchecked_rest_from_the_sample(tmp_path: Path) -> None:
    a = _names("a", 100)
    work = _work(tmp_path, {"a.py": {**dict.fromkeys(a[:50], 1), **dict.fromkeys(a[50:])}})
    sample = sorted(_run("mutation_sample.py", work, 20, 3).split())
    assert len(sample) == 10
    codes: dict[str, int | None] = {**dict.fromkeys(a[:50], 1), **dict.fromkeys(a[50:])}
    codes.update({n: (1 if i < 8 else 0) for i, n in enumerate(sample)})  # 8 of 10 killed
    _work(tmp_path, {"a.py": codes})
    report = _run("mutation_report.py", ROOT, work, "recall")
    # exact: 58 killed of 60 checked; the 40 unchecked at the sample's 80%: (58 + 32) / 100
    assert "sample: 10 drawn, 10 checked (80.0% killed)" in report
    assert "40 unchecked, est.  80.0% (sample 8/10)" in report
    assert "estimated kill rate over all 100 mutants: 90.0% (95% interval" in report
    low, high = report.split("95% interval ")[1].split(")")[0].split(" to ")
    # q = 9/12 = 0.75: half-width 1.96 * 40 * sqrt(0.75 * 0.25 / 10) / 100 = 10.7 points
    assert (low, high) == ("79.3%", "100.0%")


def test_the_report_has_no_estimate_without_a_sample(tmp_path: Path) -> None:
    a = _names("a", 4)
    report = _run("mutation_report.py", ROOT, _work(tmp_path, {"a.py": {a[0]: 1, a[1]: 0, a[2]: None}}))
    assert "not checked yet: 1" in report and "estimated" not in report and "sample" not in report
