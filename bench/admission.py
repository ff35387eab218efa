"""Admission latency: p50/p99 of ``Intake.admit`` beside a bare write+fsync+rename+dir-fsync of its bytes.

Prints figures and ratios; asserts nothing (timings never belong in tests).
Usage: python bench/admission.py [--n 400] [--present 1 100 4000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tempomem.storage.fsio import atomic_write, ensure_private_dir
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import build_payload, canonical_json
from tempomem.storage.limits import MAX_ACTIVE_RECORDS
from tempomem.storage.turn import CompletedTurn

T0 = datetime(2026, 12, 3, tzinfo=UTC)
ANSWER = "Noted: your sister Ana is vegetarian and visits on the 14th; I suggested a dinner in Chiado. " * 4


def turn(i: int) -> CompletedTurn:
    return CompletedTurn(
        run_id=f"bench-{i}",
        conversation_id="bench:conv",
        speaker_kind="human-turn",
        user_text="hello",
        final_answer=ANSWER,
        admitted_at=T0 + timedelta(seconds=i),
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(present: int, n: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        intake = Intake(Path(tmp) / "mem")
        for i in range(present):  # records already there (pending)
            intake.admit(build_payload(turn(i), write_mode="append-host-summary", tier="journal"))
        admit_ms: list[float] = []
        bare_ms: list[float] = []
        bare_dir = ensure_private_dir(Path(tmp) / "bare")
        for j in range(n):
            payload = build_payload(turn(present + j), write_mode="append-host-summary", tier="journal")
            data = canonical_json(payload.model_dump())
            t = time.perf_counter()
            intake.admit(payload)
            admit_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            atomic_write(bare_dir / payload.id, data)
            bare_ms.append((time.perf_counter() - t) * 1000)
        return admit_ms, bare_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300, help="admissions measured per row")
    parser.add_argument("--present", type=int, nargs="+", default=[1, 100, 4000])
    args = parser.parse_args()
    print(
        f"{'present':>8} {'admit p50':>10} {'admit p99':>10} {'bare p50':>9} {'bare p99':>9} {'p50 ratio':>9}"
    )
    for present in args.present:
        # Capacity is 4,096 active records (LIM-05): the 4,000 row measures the admissions that still fit.
        admit, bare = measure(present, min(args.n, MAX_ACTIVE_RECORDS - present))
        ratio = statistics.median(admit) / statistics.median(bare)
        print(
            f"{present:>8} {pct(admit, 0.5):>8.3f}ms {pct(admit, 0.99):>8.3f}ms "
            f"{pct(bare, 0.5):>7.3f}ms {pct(bare, 0.99):>7.3f}ms {ratio:>8.2f}x"
        )


if __name__ == "__main__":
    main()
