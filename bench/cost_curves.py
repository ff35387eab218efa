"""Cost curves: how recall latency, rebuild time, disk and process memory grow with the store.

Usage: python bench/cost_curves.py [--sizes 1000,10000,100000,1000000] [--queries 60] [--png PATH]

Each size runs in a fresh child process (so its memory figures are its own): generated memories
(``bench/recall.py``'s sentence generator and deterministic synthetic 384-dim vectors, so 1M builds
without hours of embedding) are written as canonical daily Markdown, indexed by ``MemoryIndex.rebuild``
(DuckDB FTS + LanceDB), then searched with the default profile (query embedding excluded; the shipped
embedder's one-query cost is ``bench/embedding.py``'s). Per size it prints the Markdown write time, the
rebuild time, the bytes on disk (index and Markdown), recall p50/p95 beside the brute-force floor of
``bench/recall.py`` measured in the same child, and the child's resident memory: after imports, after
the rebuild (peak) and while serving recall. Real embedding adds what ``bench/embedding.py`` prints
(~107 sentences/s here) to the rebuild, and ~100 MB for the loaded model to the memory.

With matplotlib installed (``pip install -e '.[bench]'``) it also draws the four curves to ``--png``
(default ``docs/cost-curves.png``, which the README shows). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_PNG = ROOT / "docs" / "cost-curves.png"


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def one_size(n: int, n_queries: int) -> dict[str, float]:
    """Runs in the child: build, measure, return the figures."""

    from bench.recall import (
        BruteForce,
        Memo,
        SyntheticEmbedder,
        make_queries,
        make_texts,
        pct,
        write_markdown,
    )
    from tempomem.recall import profiles as P
    from tempomem.recall.index import MemoryIndex

    base_rss = rss_mb()
    texts = make_texts(n)
    queries = make_queries(texts, n_queries)
    memo = Memo(SyntheticEmbedder())
    with tempfile.TemporaryDirectory(prefix=f"cost-{n}-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        write_markdown(root, texts)
        write_s = time.perf_counter() - started
        idx = MemoryIndex(root, memo)  # type: ignore[arg-type]
        report = idx.rebuild()
        rebuild_peak = rss_mb("VmHWM")
        memo.prefetch(queries)
        profile = P.TUNED_MINILM
        idx.search(queries[0], profile=profile)  # warm: connections, snapshots
        times = []
        for q in queries:
            t = time.perf_counter()
            idx.search(q, limit=8, profile=profile)
            times.append((time.perf_counter() - t) * 1000)
        serving = rss_mb()
        index_bytes = disk_bytes(idx.index_dir)
        markdown_bytes = disk_bytes(root / "daily")
        floor = BruteForce(texts, memo.inner.embed(texts))
        floor_ms = []
        for q in queries:
            t = time.perf_counter()
            floor.search(q, memo.queries[q])
            floor_ms.append((time.perf_counter() - t) * 1000)
    return {
        "memories": n,
        "write_s": write_s,
        "rebuild_s": report.seconds,
        "index_mb": index_bytes / 2**20,
        "markdown_mb": markdown_bytes / 2**20,
        "p50_ms": pct(times, 50),
        "p95_ms": pct(times, 95),
        "floor_p50_ms": pct(floor_ms, 50),
        "floor_p95_ms": pct(floor_ms, 95),
        "rss_imports_mb": base_rss,
        "rss_rebuild_peak_mb": rebuild_peak,
        "rss_serving_mb": serving,
    }


def run_child(n: int, n_queries: int) -> dict[str, float] | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(n), "--queries", str(n_queries)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        print(f"# {n} memories: child failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def draw(rows: list[dict[str, float]], png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# matplotlib not installed (pip install -e '.[bench]'): no chart drawn")
        return False
    xs = [r["memories"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    panels = [
        (
            "recall latency (ms, embedding excluded)",
            [("p50", "p50_ms"), ("p95", "p95_ms"), ("floor p50", "floor_p50_ms")],
        ),
        ("rebuild time (s, synthetic vectors)", [("rebuild", "rebuild_s"), ("Markdown write", "write_s")]),
        ("on disk (MB)", [("index", "index_mb"), ("Markdown", "markdown_mb")]),
        (
            "process memory (MB RSS)",
            [
                ("serving recall", "rss_serving_mb"),
                ("rebuild peak", "rss_rebuild_peak_mb"),
                ("after imports", "rss_imports_mb"),
            ],
        ),
    ]
    for ax, (title, series) in zip(axes.flat, panels, strict=True):
        for label, key in series:
            ax.plot(xs, [r[key] for r in rows], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("memories")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"tempomem cost curves ({os.cpu_count()} cores; bench/cost_curves.py)", fontsize=11)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--png", type=Path, default=DEFAULT_PNG)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child's own size
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one_size(args.one, args.queries)))
        return 0
    rows = []
    print(
        "| memories | Markdown write s | rebuild s | index MB | Markdown MB | recall p50 / p95 ms "
        "| floor p50 / p95 ms | RSS after imports / rebuild peak / serving MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",") if s):
        r = run_child(n, args.queries)
        if r is None:
            continue
        rows.append(r)
        print(
            f"| {n:,} | {r['write_s']:.1f} | {r['rebuild_s']:.1f} | {r['index_mb']:.1f} "
            f"| {r['markdown_mb']:.1f} | {r['p50_ms']:.1f} / {r['p95_ms']:.1f} "
            f"| {r['floor_p50_ms']:.1f} / {r['floor_p95_ms']:.1f} "
            f"| {r['rss_imports_mb']:.0f} / {r['rss_rebuild_peak_mb']:.0f} / {r['rss_serving_mb']:.0f} |",
            flush=True,
        )
    if len(rows) >= 2 and draw(rows, args.png):
        print(f"# chart: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
