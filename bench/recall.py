"""Recall latency at 1k / 10k / 100k synthetic memories, beside a brute-force floor in the same run.

Usage::

    python bench/recall.py [--sizes 1000,10000,100000] [--vectors synthetic|minilm|e5] [--queries 60]

Memories are varied sentences generated deterministically (seeded), written as canonical Markdown with
``append_bullets`` and indexed by ``MemoryIndex`` (DuckDB FTS + LanceDB). ``--vectors synthetic``
(default) gives every text a deterministic pseudo-embedding (cheap: 100k in seconds, with real
neighbourhoods: sentences sharing words share vector components); ``minilm`` / ``e5`` embed with the
real models (100k takes many minutes on 2 cores). The mode that ran is printed with every table.

For each size it prints p50/p95 of ``MemoryIndex.search`` per profile with the query embedding
excluded (vectors precomputed) and included (the real query embedder of that profile, timed in
sequence with the search), the brute-force floor over the same vectors (numpy cosine top-50 + an
in-memory BM25 top-50, fused), and the ratios. At the largest size it also prints the time to append
and upsert one line, and the first vs second rebuild.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tempomem.recall import connections  # noqa: E402
from tempomem.recall import profiles as P  # noqa: E402
from tempomem.recall.embedding import EmbeddingIdentity, l2_normalise  # noqa: E402
from tempomem.recall.index import MemoryIndex  # noqa: E402
from tempomem.storage.markdown import Bullet, append_bullets  # noqa: E402

DIM = 384
NAMES = [
    "Ann",
    "Ben",
    "Carla",
    "Dev",
    "Elif",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemal",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
]
VERBS = [
    "adopted",
    "bought",
    "booked",
    "cancelled",
    "cooked",
    "fixed",
    "found",
    "lost",
    "painted",
    "planned",
    "repaired",
    "sold",
    "started",
    "visited",
    "borrowed",
    "finished",
    "moved",
    "organised",
    "recommended",
    "signed",
]
OBJECTS = [
    "a grey cat",
    "the blue bicycle",
    "a lemon cake",
    "the garden shed",
    "a flight to Lisbon",
    "the dentist appointment",
    "a pottery class",
    "the quarterly report",
    "a vintage camera",
    "the tax return",
    "a sourdough starter",
    "the kitchen sink",
    "a climbing course",
    "the rental car",
    "a birthday party",
    "the laptop battery",
    "a chess tournament",
    "the wedding playlist",
    "a jazz concert",
    "the insurance claim",
    "a hiking trip",
    "the piano lessons",
    "a charity run",
    "the book club",
    "a new passport",
]
PLACES = [
    "in Berlin",
    "at the office",
    "near the lake",
    "in the old town",
    "at home",
    "downtown",
    "at the market",
    "in Porto",
    "at the library",
    "by the station",
    "in the mountains",
    "at the gym",
]
WHEN = [
    "yesterday",
    "last week",
    "on Saturday",
    "this morning",
    "in March",
    "last summer",
    "on 2026-02-14",
    "two days ago",
]
EXTRA = [
    "because it was on sale",
    "with two friends",
    "after a long delay",
    "for the second time",
    "without telling anyone",
    "and it went well",
    "but it rained",
    "on a budget of 120 euros",
    "with ticket ID-4471",
    "before the deadline",
]
_WORD = re.compile(r"\w+")


def sentence(rng: np.random.Generator) -> str:
    parts = [
        str(rng.choice(NAMES)),
        str(rng.choice(VERBS)),
        str(rng.choice(OBJECTS)),
        str(rng.choice(PLACES)),
        str(rng.choice(WHEN)),
    ]
    if rng.random() < 0.6:
        parts.append(str(rng.choice(EXTRA)))
    return " ".join(parts) + "."


def make_texts(n: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    out: list[str] = []
    i = 0
    while len(out) < n:
        text = sentence(rng)
        if text in seen:  # keep texts distinct: suffix a running note number
            i += 1
            text = f"{text[:-1]} (note {i})."
        seen.add(text)
        out.append(text)
    return out


# ---------------------------------------------------------------------------------------------------
# embedders


class SyntheticEmbedder:
    """Deterministic bag-of-words pseudo-embedding: each word owns a seeded random direction; a text is
    the normalised sum (+ a small text-specific component). Cheap and has real neighbourhoods."""

    def __init__(self) -> None:
        self.identity = EmbeddingIdentity("bench-synthetic", "bag-of-words-hash", DIM)
        self._words: dict[str, np.ndarray] = {}

    def _word(self, w: str) -> np.ndarray:
        v = self._words.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "big")
            v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            self._words[w] = v
        return v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            for w in _WORD.findall(t.lower()):
                out[i] += self._word(w)
        return l2_normalise(out)


class Memo:
    """Precomputed query vectors (embedding excluded); documents pass through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.queries: dict[str, np.ndarray] = {}
        if hasattr(inner, "embed_query"):
            self.embed_query = lambda q: self.queries[q]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 1 and texts[0] in self.queries:
            return self.queries[texts[0]][None, :]
        return self.inner.embed(texts)

    def prefetch(self, queries: Sequence[str]) -> None:
        for q in queries:
            if hasattr(self.inner, "embed_query"):
                self.queries[q] = self.inner.embed_query(q)
            else:
                self.queries[q] = self.inner.embed([q])[0]


def real_embedder(name: str) -> Any:
    if name == "minilm":
        from tempomem.recall.embedding import LocalMiniLMEmbedder

        return LocalMiniLMEmbedder()
    from tempomem.recall.e5_embedder import LocalE5Embedder

    return LocalE5Embedder()


# ---------------------------------------------------------------------------------------------------
# brute-force floor


class BruteForce:
    """numpy cosine top-k over the same vectors + in-memory Okapi BM25 (k1=1.2, b=0.75) top-k, fused."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lengths = np.zeros(len(texts), np.float32)
        for i, t in enumerate(texts):
            words = _WORD.findall(t.lower())
            lengths[i] = len(words)
            for w, tf in Counter(words).items():
                postings[w].append((i, tf))
        avg = float(lengths.mean()) if len(texts) else 1.0
        self.n = len(texts)
        self.norm = 1.2 * (1 - 0.75 + 0.75 * lengths / avg)
        self.postings = {
            w: (np.array([d for d, _ in p], np.int64), np.array([tf for _, tf in p], np.float32))
            for w, p in postings.items()
        }

    def bm25(self, query: str, k: int) -> np.ndarray:
        scores = np.zeros(self.n, np.float32)
        for w in set(_WORD.findall(query.lower())):
            hit = self.postings.get(w)
            if hit is None:
                continue
            docs, tf = hit
            idf = math.log(1 + (self.n - len(docs) + 0.5) / (len(docs) + 0.5))
            scores[docs] += idf * tf * 2.2 / (tf + self.norm[docs])
        k = min(k, self.n)
        top = np.argpartition(-scores, k - 1)[:k]
        return top[scores[top] > 0]

    def search(self, query: str, qvec: np.ndarray, k: int = 50, limit: int = 8) -> list[int]:
        cos = self.vectors @ qvec
        kk = min(k, self.n)
        vec_top = np.argpartition(-cos, kk - 1)[:kk]
        pool = np.union1d(vec_top, self.bm25(query, k))
        return [int(i) for i in pool[np.argsort(-cos[pool])][:limit]]


# ---------------------------------------------------------------------------------------------------


def pct(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def write_markdown(root: Path, texts: Sequence[str]) -> list[tuple[str, Bullet]]:
    by_day: dict[str, list[Bullet]] = defaultdict(list)
    items = []
    for i, text in enumerate(texts):
        day = f"2025-{1 + (i // 28) % 12:02d}-{1 + i % 28:02d}"
        b = Bullet(
            signifier="–", text=text, id=f"m{i:06d}", type="note", status="open", recorded=f"{day}T09:00:00Z"
        )
        by_day[day].append(b)
        items.append((day, b))
    for day, bullets in by_day.items():
        append_bullets(root / "daily" / f"{day}.md", day, bullets)
    return items


def make_queries(texts: Sequence[str], n_queries: int, seed: int = 11) -> list[str]:
    """Fragments of stored sentences (real targets), some with a name or a date."""
    rng = np.random.default_rng(seed)
    queries = []
    for i in rng.choice(len(texts), size=n_queries, replace=False):
        words = texts[int(i)].rstrip(".").split()
        start = int(rng.integers(0, max(1, len(words) - 4)))
        queries.append(" ".join(words[start : start + 4 + int(rng.integers(0, 3))]))
    return queries


def run_size(n: int, mode: str, n_queries: int, profiles: list[P.RecallProfile], last: bool) -> None:
    texts = make_texts(n)
    queries = make_queries(texts, n_queries)
    inner = SyntheticEmbedder() if mode == "synthetic" else real_embedder(mode)
    memo = Memo(inner)
    # For the "included" figures: the shipped default embedder (MiniLM) unless a real one indexed.
    q_embedder = inner if mode != "synthetic" else real_embedder("minilm")
    with tempfile.TemporaryDirectory(prefix=f"recall-{n}-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        items = write_markdown(root, texts)
        write_s = time.perf_counter() - t0
        idx = MemoryIndex(root, memo)  # type: ignore[arg-type]
        first = idx.rebuild()
        vectors = memo.inner.embed(texts) if mode == "synthetic" else None
        memo.prefetch(queries)
        if vectors is None:  # real model: reuse what the index stored rather than embedding twice
            gen = idx.generation_dir(first.generation)
            table = idx._lance_table(gen)
            data = table.to_arrow().select(["id", "vector"])
            order = {rid: i for i, rid in enumerate(data.column("id").to_pylist())}
            from tempomem.recall.index.vectors import vectors_of

            stored = vectors_of(data, DIM)
            vectors = np.stack([stored[order[f"m{i:06d}"]] for i in range(n)])
        floor = BruteForce(texts, vectors)
        print(
            f"\n## {n} memories, vectors: {mode}  (markdown write {write_s:.1f} s, first rebuild "
            f"{first.seconds:.1f} s, {first.embedded} embedded)"
        )
        floor_ms = []
        for q in queries:
            t = time.perf_counter()
            floor.search(q, memo.queries[q])
            floor_ms.append((time.perf_counter() - t) * 1000)
        fp50, fp95 = pct(floor_ms, 50), pct(floor_ms, 95)
        print("| path | p50 ms | p95 ms | p50 / floor | p95 / floor |")
        print("|---|---|---|---|---|")
        print(f"| brute-force floor (numpy cosine + in-memory BM25) | {fp50:.1f} | {fp95:.1f} | 1.0 | 1.0 |")
        for prof in profiles:
            idx.search(queries[0], profile=prof)  # warm
            excl, incl = [], []
            for q in queries:
                t = time.perf_counter()
                idx.search(q, limit=8, profile=prof)
                excl.append((time.perf_counter() - t) * 1000)
            for q in queries:
                t = time.perf_counter()
                if hasattr(q_embedder, "embed_query"):
                    q_embedder.embed_query(q)
                else:
                    q_embedder.embed([q])
                idx.search(q, limit=8, profile=prof)
                incl.append((time.perf_counter() - t) * 1000)
            for label, xs in (("query embedding excluded", excl), ("query embedding included", incl)):
                p50, p95 = pct(xs, 50), pct(xs, 95)
                print(
                    f"| search, profile {prof.name}, {label} | {p50:.1f} | {p95:.1f} | "
                    f"{p50 / fp50:.1f} | {p95 / fp95:.1f} |"
                )
        if mode == "synthetic":
            print(
                f"(included = real {q_embedder.identity.model} query embedding + search, synthetic vectors)"
            )
        if last:
            day = "2025-12-31"

            def append_ferry(n: int) -> tuple[Bullet, float]:
                """Append line ``n`` to the day file; (the line, seconds the append took)."""
                new = Bullet(
                    signifier="–",
                    text=f"Zoe booked ferry number {n} to Tangier on 2026-03-03.",
                    id=f"upsert-{n}",
                    type="note",
                    status="open",
                    recorded=f"{day}T09:00:00Z",
                )
                t = time.perf_counter()
                append_bullets(root / "daily" / f"{day}.md", day, [new])
                return new, time.perf_counter() - t

            t_md, ups, after = 0.0, [], []
            for n in range(6):
                new, t_md = append_ferry(n)
                t = time.perf_counter()
                idx.upsert([(day, new)])
                ups.append(time.perf_counter() - t)
                t = time.perf_counter()
                idx.search(f"ferry number {n} Tangier", limit=8)
                after.append(time.perf_counter() - t)
            t_up = ups[0]
            idle = []
            for n in range(6, 9):
                # As after the 10 s idle: the kept connections are closed, the process's snapshots stay.
                connections.drop(idx.index_dir)
                new, _ = append_ferry(n)
                t = time.perf_counter()
                idx.upsert([(day, new)])
                idle.append(time.perf_counter() - t)
            second = idx.rebuild()
            print(
                f"\nincremental: append one line {t_md * 1000:.1f} ms, upsert it {t_up * 1000:.0f} ms cold "
                f"(first write of the process), {pct(ups[1:], 50) * 1000:.0f} ms warm (median of the next "
                f"{len(ups) - 1}), {pct(idle, 50) * 1000:.0f} ms once the connection closed (idle, median of "
                f"{len(idle)}); a search right after each upsert {pct(after, 50) * 1000:.0f} ms median "
                f"(FTS postings updated incrementally in the same transaction, AMB-32)"
            )
            print(
                f"rebuild: first {first.seconds:.1f} s ({first.embedded} embedded), second "
                f"{second.seconds:.1f} s ({second.cached} vectors from cache, {second.embedded} embedded)"
            )
        del items


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--vectors", choices=("synthetic", "minilm", "e5"), default="synthetic")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--profiles", default="reference,tuned-minilm")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    profiles = [P.PROFILES[name] for name in args.profiles.split(",")]
    print(f"# recall latency bench: vectors = {args.vectors}; sizes {sizes}; {args.queries} queries per size")
    print(f"# DEFAULT_PROFILE = {P.DEFAULT_PROFILE.name}")
    for i, n in enumerate(sizes):
        run_size(n, args.vectors, args.queries, profiles, last=i == len(sizes) - 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
