"""Recall index and scoring: real DuckDB FTS + LanceDB files under tmp_path, real MiniLM embedder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

import tempomem.recall.index.schema as index_schema
from tempomem.recall import scoring
from tempomem.recall.embedding import EmbeddingError, EmbeddingIdentity, LocalMiniLMEmbedder
from tempomem.recall.index import IndexBusyError, MemoryIndex, fts_extension_path
from tempomem.recall.index.vectors import VectorSnapshot
from tempomem.storage.markdown import Bullet, append_bullets

# ---------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


class CountingEmbedder:
    """Wraps a provider and counts the texts it embeds (to prove the cache is used)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.texts: list[str] = []
        self.fail = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise EmbeddingError("provider down")
        self.texts.extend(texts)
        return self.inner.embed(texts)


class HashEmbedder:
    """A different identity (another dimension): deterministic pseudo-random unit vectors."""

    def __init__(self, dim: int = 16) -> None:
        self.identity = EmbeddingIdentity("fake", "hash", dim)
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += len(texts)
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "big")
            rows.append(np.random.default_rng(seed).normal(size=self.identity.dim))
        v = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.identity.dim)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


_N = 0


def bullet(text: str, *, id: str | None = None, status: str = "open", **kw: Any) -> Bullet:
    global _N
    _N += 1
    return Bullet(
        signifier="–",
        text=text,
        id=id or f"t{_N:05d}",
        type=kw.pop("type", "note"),
        status=status,
        recorded=kw.pop("recorded", "2026-03-01T10:00:00.000Z"),
        **kw,
    )


DAYS: dict[str, list[tuple[str, str]]] = {
    "2026-03-01": [
        ("tea", "Morgan prefers green tea in the morning."),
        ("tax", "The quarterly tax filing deadline is 2026-04-15."),
        ("zoe", "Zoë was born on 1988-11-02 in Lyon."),
    ],
    "2026-03-02": [
        ("cat", "The cat sleeps on the warm mat all afternoon."),
        ("club", "Morgan joined the Maple book club."),
        ("car", "The blue car needs new winter tyres before December."),
    ],
    "2026-03-03": [
        ("sam", "Sam was born on 1988-12-02 in Porto."),
        ("job", "Alex works as a nurse at Riverside Hospital."),
        ("room", "The project kickoff meeting is in room 4471."),
    ],
}


def write_store(root: Path) -> None:
    for day, lines in DAYS.items():
        append_bullets(root / "daily" / f"{day}.md", day, [bullet(t, id=i) for i, t in lines])
    append_bullets(
        root / "daily" / "2026-03-03.md",
        "2026-03-03",
        [bullet("Old plan xylophone", id="gone", status="dropped")],
    )
    # Raw audit observation with a unique word: must never be indexed (REC-52).
    append_bullets(
        root / "audit" / "2026-03-02.md", "2026-03-02", [bullet("Audit secret zanzibar line", id="aud")]
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "mem"
    write_store(root)
    return root


QUERIES = {
    "What does Morgan like to drink?": "tea",
    "When is the tax deadline?": "tax",
    "When was Zoe born?": "zoe",
    "Where does the cat sleep?": "cat",
    "Where does Alex work?": "job",
    "Which room is the kickoff in?": "room",
}


def gens(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "index").iterdir() if p.name.startswith("gen-"))


# ---------------------------------------------------------------------------------------------------
# scoring (pure)


def test_normalise_ignores_case_and_accents() -> None:
    assert scoring.normalise("Zoë") == scoring.normalise("ZOE") == "zoe"
    assert scoring.normalise("Ångström café") == "angstrom cafe"
    assert scoring.normalise("Straße") == "strasse"  # casefold, not lower


def test_semantic_threshold() -> None:
    assert scoring.semantic_evidence(0.49999) == 0.0
    assert scoring.semantic_evidence(0.5) == 0.5
    assert scoring.semantic_evidence(0.83) == 0.83
    assert scoring.semantic_evidence(-0.7) == 0.0


def test_numeric_anchors_dates_match_exactly() -> None:
    anchors = scoring.query_anchors("What happened on 1988-11-02 in room 4471?")
    assert anchors.numeric == ("1988-11-02", "4471")
    same = scoring.record_terms("Zoë was born on 1988-11-02.")
    other = scoring.record_terms("Sam was born on 1988-12-02 in room 4471.")
    assert scoring.numeric_anchor_matches("1988-11-02", same)
    assert not scoring.numeric_anchor_matches("1988-11-02", other)
    assert scoring.anchor_bonus(anchors, same) == pytest.approx(0.075)
    assert scoring.anchor_bonus(anchors, other) == pytest.approx(0.075)  # the room number only
    # A year or month anchor matches dates inside it; a day never matches its month alone.
    assert scoring.numeric_anchor_matches("1988", other)
    assert scoring.numeric_anchor_matches("1988-12", other)
    assert not scoring.numeric_anchor_matches("12", other)
    # Identifiers inside compounds and ISO instants.
    assert scoring.numeric_anchor_matches("4471", scoring.record_terms("ticket ID-4471 closed"))
    assert scoring.numeric_anchor_matches("2026-03-01", scoring.record_terms("at 2026-03-01T10:00:00Z"))


def test_name_anchors_accent_insensitive_and_bounded() -> None:
    anchors = scoring.query_anchors("Where was Zoe born and does Al know Morgan?")
    assert anchors.names == ("zoe", "morgan")  # "Al" is too short; "Where" is sentence-initial
    terms = scoring.record_terms("Zoë was born in Lyon.")
    assert scoring.anchor_bonus(anchors, terms) == pytest.approx(0.04)
    both = scoring.record_terms("Zoë met Morgan.")
    assert scoring.anchor_bonus(anchors, both) == pytest.approx(0.08)
    # Lowercase or sentence-initial query names count when the records use them as names.
    vocab = scoring.name_vocabulary(["Yesterday Morgan met Zoë."], ["person:riverside hospital"])
    assert {"morgan", "zoe", "riverside", "hospital"} <= vocab and "yesterday" not in vocab
    assert scoring.query_anchors("morgan?", vocab).names == ("morgan",)
    assert scoring.query_anchors("What is it", vocab).names == ()


def test_no_stop_word_list_in_lexical_overlap() -> None:
    words = scoring.word_tokens("Where does Morgan work?")
    assert words == {"where", "does", "morgan", "work"}
    assert scoring.lexical_overlap(words, scoring.record_terms("Morgan works at Acme").words) == 0.25
    assert scoring.lexical_overlap(set(), {"x"}) == 0.0


def test_hybrid_score_composition() -> None:
    anchors = scoring.query_anchors("Did Morgan pay 120 on 2026-05-01?")
    terms = scoring.record_terms("Morgan paid 120 euros.")
    s = scoring.hybrid_score(
        cosine=0.7, anchors=anchors, terms=terms, query_words=set(), bm25_rank=1, vector_rank=2
    )
    expected = 0.7 + 0.15 * 1 / 2 + 0.08 * 1 / 1 + 1e-4 * (1 / 61 + 1 / 62)
    assert s == pytest.approx(expected, abs=1e-12)
    # Below the cosine floor only anchors and tie-breakers remain.
    s_low = scoring.hybrid_score(
        cosine=0.3, anchors=anchors, terms=terms, query_words=set(), bm25_rank=None, vector_rank=1
    )
    assert s_low == pytest.approx(0.075 + 0.08 + 1e-4 / 61)
    # A record waiting for its vector is scored on lexical overlap instead (REC-32).
    qw = scoring.word_tokens("morgan paid")
    s_lex = scoring.hybrid_score(
        cosine=None,
        anchors=scoring.QueryAnchors((), ()),
        terms=terms,
        query_words=qw,
        bm25_rank=None,
        vector_rank=None,
    )
    assert s_lex == 1.0


# ---------------------------------------------------------------------------------------------------
# index


def test_hybrid_search_ranks_right_line_first(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(store, minilm)
    report = idx.rebuild()
    assert report.rows == 9 and report.embedded == 9 and report.cached == 0
    for query, expected in QUERIES.items():
        hits = idx.search(query, limit=3)
        assert hits[0].id == expected, (query, [(h.id, h.score) for h in hits])
        assert hits[0].mode == "hybrid" and hits[0].cosine is not None and hits[0].cosine >= 0.5
    # Date anchors: the exact date wins, the other month does not get the bonus.
    # The reference contract's anchor constants (the MiniLM default profile is tuned-minilm).
    hits = {h.id: h for h in idx.search("Who was born on 1988-11-02?", limit=8, profile="reference")}
    assert next(iter(hits)) == "zoe"
    bonus = {i: h.score - scoring.semantic_evidence(h.cosine or 0.0) for i, h in hits.items()}
    assert bonus["zoe"] == pytest.approx(0.15, abs=1e-3) and bonus["sam"] == pytest.approx(0.0, abs=1e-3)
    top = idx.search("Zoë", limit=1)[0]
    assert top.id == "zoe" and top.day == "2026-03-01" and top.type == "note" and top.status == "open"


def test_lexical_mode_never_embeds(store: Path) -> None:
    idx = MemoryIndex(store, None)
    idx.rebuild()
    manifest = idx.manifest()
    assert manifest is not None and manifest["embedding"] is None
    assert not (idx.generation_dir(manifest["generation"]) / "vectors").exists()
    assert not (store / "index" / "vector-cache").exists()
    hits = idx.search("Morgan green tea", limit=3)
    assert hits[0].id == "tea" and hits[0].mode == "lexical" and hits[0].score == 1.0
    assert hits[0].cosine is None and hits[0].bm25_rank == 1
    assert [h.id for h in idx.search("zoe lyon")][:1] == ["zoe"]  # accents folded by FTS and scoring
    assert idx.search("spaceship") == []


def test_audit_and_dropped_never_indexed(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    for idx in (MemoryIndex(store, None), MemoryIndex(store, minilm)):
        idx.rebuild()
        for hit in idx.search("Audit secret zanzibar line", limit=50) + idx.search("xylophone", limit=50):
            assert hit.id not in {"aud", "gone"}
        assert idx.manifest()["rows"] == 9  # type: ignore[index]


def test_rebuild_equivalence(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(store, minilm)
    idx.rebuild()
    queries = [*QUERIES, "1988", "book club Maple", "winter tyres"]
    before = {q: [(h.id, h.score) for h in idx.search(q)] for q in queries}
    digest = idx.manifest()["source_digest"]  # type: ignore[index]
    shutil.rmtree(store / "index")
    report = MemoryIndex(store, minilm).rebuild()
    assert report.embedded == 9  # cache went with the index
    after = {q: [(h.id, h.score) for h in idx.search(q)] for q in queries}
    for q in queries:
        assert [i for i, _ in after[q]] == [i for i, _ in before[q]], q
        assert [s for _, s in after[q]] == pytest.approx([s for _, s in before[q]], abs=1e-6), q
    assert idx.manifest()["source_digest"] == digest == idx.source_digest()  # type: ignore[index]


def test_second_rebuild_uses_vector_cache(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    counting = CountingEmbedder(minilm)
    idx = MemoryIndex(store, counting)
    first = idx.rebuild()
    assert first.embedded == first.rows == 9
    counting.texts.clear()
    second = idx.rebuild()
    assert (second.embedded, second.cached, second.rows) == (0, 9, 9)
    assert counting.texts == [] and second.generation == first.generation + 1
    # One changed line: only it is embedded.
    append_bullets(store / "daily" / "2026-03-04.md", "2026-03-04", [bullet("Brand new line about kites")])
    third = idx.rebuild()
    assert (third.embedded, third.cached, third.rows) == (1, 9, 10)
    assert counting.texts == ["Brand new line about kites"]


def test_changed_identity_reembeds_everything(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    """RPL-16: the new generation is embedded with the configured provider before it is activated."""
    MemoryIndex(store, minilm).rebuild()
    fake = HashEmbedder(dim=16)
    idx = MemoryIndex(store, fake)
    report = idx.rebuild()
    assert (report.embedded, report.cached) == (9, 0) and fake.calls == 9
    assert idx.manifest()["embedding"] == {"provider": "fake", "model": "hash", "dim": 16}  # type: ignore[index]
    hits = idx.search("Morgan", limit=3)  # works with 16-dim vectors; names still anchor
    assert hits and hits[0].mode == "hybrid"
    # Searching with the other identity rebuilds for it instead of mixing vectors; its cache survives.
    counting = CountingEmbedder(minilm)
    assert MemoryIndex(store, counting).search("What does Morgan like to drink?")[0].id == "tea"
    assert counting.texts == ["What does Morgan like to drink?"]  # only the query was embedded


def test_upsert_is_immediate_and_idempotent(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(store, minilm)
    gen = idx.rebuild().generation
    new = bullet("Priya adopted a golden retriever puppy named Biscuit.", id="dog")
    append_bullets(store / "daily" / "2026-03-05.md", "2026-03-05", [new])
    assert idx.upsert([("2026-03-05", new)]) == 1
    assert idx.active_generation() == gen  # in place, no rebuild
    hits = idx.search("What is the name of Priya's dog?", limit=3)
    assert hits[0].id == "dog" and hits[0].cosine is not None and hits[0].bm25_rank is not None
    lex = MemoryIndex(store, None).search("golden retriever Biscuit")
    assert lex[0].id == "dog"
    assert idx.upsert([("2026-03-05", new)]) == 0  # replay
    assert idx.manifest()["rows"] == 10  # type: ignore[index]
    assert idx.manifest()["source_digest"] == idx.source_digest()  # type: ignore[index]
    # A status change is an update; dropped removes the line from recall.
    done = Bullet(**{**new.__dict__, "status": "done"})
    assert idx.upsert([("2026-03-05", done)]) == 1
    assert idx.search("Biscuit the puppy", limit=1)[0].status == "done"
    dropped = Bullet(**{**new.__dict__, "status": "dropped"})
    assert idx.upsert([("2026-03-05", dropped)]) == 1
    assert "dog" not in {h.id for h in idx.search("Biscuit the puppy", limit=50)}
    assert idx.manifest()["rows"] == 9  # type: ignore[index]


def test_upsert_text_change_reembeds(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    counting = CountingEmbedder(minilm)
    idx = MemoryIndex(store, counting)
    idx.rebuild()
    counting.texts.clear()
    changed = bullet("The quarterly tax filing deadline moved to 2026-05-01.", id="tax")
    assert idx.upsert([("2026-03-01", changed)]) == 1
    assert counting.texts == [changed.text]
    hits = idx.search("tax deadline 2026-05-01", limit=2)
    assert hits[0].id == "tax" and hits[0].text == changed.text
    assert len([h for h in idx.search("tax deadline", limit=50) if h.id == "tax"]) == 1


def test_upsert_without_index_builds_one(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(store, minilm)
    extra = bullet("Kite festival on the beach in July.", id="kite")
    assert idx.upsert([("2026-03-06", extra)]) == 1
    assert idx.manifest()["rows"] == 10  # type: ignore[index]
    assert idx.search("kite festival", limit=1)[0].id == "kite"


def test_upsert_during_embedding_outage_stays_searchable(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    counting = CountingEmbedder(minilm)
    idx = MemoryIndex(store, counting)
    idx.rebuild()
    counting.fail = True
    line = bullet("Saturday climbing session at the boulder gym.", id="climb")
    append_bullets(store / "daily" / "2026-03-07.md", "2026-03-07", [line])  # Markdown first, then index
    with pytest.raises(EmbeddingError):
        idx.upsert([("2026-03-07", line)])
    hits = idx.search("climbing boulder gym", limit=3)  # query embedding fails too: lexical mode
    assert hits[0].id == "climb" and hits[0].mode == "lexical"
    counting.fail = False
    hits = idx.search("Saturday climbing session at the boulder gym", limit=3, profile="reference")
    assert hits[0].id == "climb" and hits[0].mode == "hybrid" and hits[0].cosine is None  # waits for vector
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)  # lexical evidence (REC-32)
    assert idx.upsert([("2026-03-07", line)]) == 1  # a replayed upsert heals the missing vector
    assert idx.upsert([("2026-03-07", line)]) == 0
    assert idx.search("Saturday climbing session at the boulder gym", limit=1)[0].cosine is not None
    report = idx.rebuild()  # …and the rebuild reuses it from the active generation
    assert (report.embedded, report.cached, report.rows) == (0, 10, 10)


def test_lite_upsert_keeps_generation_identity(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    hybrid = MemoryIndex(store, minilm)
    hybrid.rebuild()
    line = bullet("Lite wrote this line about origami cranes.", id="origami")
    append_bullets(store / "daily" / "2026-03-08.md", "2026-03-08", [line])
    assert MemoryIndex(store, None).upsert([("2026-03-08", line)]) == 1
    manifest = hybrid.manifest()
    assert manifest is not None and manifest["embedding"] == minilm.identity.as_dict()
    hit = hybrid.search("origami cranes", limit=1)[0]
    assert hit.id == "origami" and hit.cosine is None  # no vector yet: lexical evidence
    assert hybrid.upsert([("2026-03-08", line)]) == 1  # the embedding tier fills it in
    assert hybrid.search("origami cranes", limit=1)[0].cosine is not None


def test_current_switch_leaves_one_generation_private(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(store, minilm)
    for expected in (1, 2, 3):
        assert idx.rebuild().generation == expected
        assert gens(store) == [f"gen-{expected}"]
        assert (store / "index" / "CURRENT").read_text().strip() == f"gen-{expected}"
    manifest = json.loads((store / "index" / "gen-3" / "manifest.json").read_text())
    assert manifest["generation"] == 3 and manifest["rows"] == 9
    assert manifest["embedding"] == {"provider": "local", "model": "all-MiniLM-L6-v2-int8", "dim": 384}
    assert len(manifest["source_digest"]) == 64
    for dirpath, _dirnames, filenames in os.walk(store / "index"):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
        for name in filenames:
            assert stat.S_IMODE(os.stat(os.path.join(dirpath, name)).st_mode) == 0o600, name
    # A stale partial generation (crash mid-build) is not activated and is cleaned by the next rebuild.
    (store / "index" / "gen-9").mkdir()
    assert idx.active_generation() == 3
    assert idx.rebuild().generation == 10 and gens(store) == ["gen-10"]


def test_empty_store_and_missing_index(tmp_path: Path, minilm: LocalMiniLMEmbedder) -> None:
    empty = tmp_path / "empty"
    assert MemoryIndex(empty, minilm).search("anything") == []
    assert not (empty / "index").exists()
    root = tmp_path / "mem"
    write_store(root)
    idx = MemoryIndex(root, minilm)
    assert idx.active_generation() is None
    assert idx.search("What does Morgan like to drink?")[0].id == "tea"  # built on demand
    assert idx.active_generation() == 1
    assert idx.search("   ") == []


class _RecordingConnection:
    def __init__(self, con: duckdb.DuckDBPyConnection, log: list[str]) -> None:
        self._con = con
        self._log = log

    def execute(self, sql: str, *args: Any) -> Any:
        self._log.append(sql)
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def test_fts_extension_loaded_from_package_file(
    store: Path, minilm: LocalMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import duckdb_extension_fts

    path = fts_extension_path()
    assert path.is_file() and Path(duckdb_extension_fts.__file__).parent in path.parents
    log: list[str] = []
    configs: list[dict[str, Any]] = []
    real_connect = duckdb.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        configs.append(kwargs.get("config") or {})
        return _RecordingConnection(real_connect(*args, **kwargs), log)

    monkeypatch.setattr(duckdb, "connect", connect)
    monkeypatch.setattr(index_schema, "_VERIFIED_EXTENSION", None)  # as in a fresh process
    idx = MemoryIndex(store, minilm)
    idx.rebuild()
    idx.search("Morgan")
    idx.upsert([("2026-03-08", bullet("one more line"))])
    assert "allow_unsigned_extensions" not in configs[0]  # the first LOAD is signature-checked
    assert configs and all(
        c.get("autoinstall_known_extensions") is False and c.get("autoload_known_extensions") is False
        for c in configs
    )
    assert not any("INSTALL" in s.upper() for s in log)
    loads = [s for s in log if s.strip().upper().startswith("LOAD")]
    assert loads and all(str(path) in s for s in loads)
    # Signature checked by DuckDB on the first LOAD of the process; later loads reuse that verdict only
    # for the very same file.
    assert index_schema._VERIFIED_EXTENSION is not None and index_schema._VERIFIED_EXTENSION[0] == str(path)


_HOLDER = """
import duckdb, sys
con = duckdb.connect(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
con.close()
"""


def test_busy_index_raises_typed_error(
    store: Path, minilm: LocalMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = MemoryIndex(store, minilm)
    gen = idx.rebuild().generation
    db = idx.generation_dir(gen) / "fts.duckdb"
    monkeypatch.setattr(index_schema, "BUSY_TIMEOUT_SECONDS", 0.3)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(IndexBusyError):
            idx.search("Morgan")
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=10)
    assert idx.search("What does Morgan like to drink?")[0].id == "tea"  # lock released: works again


_UPSERTER = """
import sys
from pathlib import Path
from tempomem.recall.index import MemoryIndex
from tempomem.storage.markdown import Bullet
idx = MemoryIndex(Path(sys.argv[1]), None)
for i in range(int(sys.argv[2])):
    b = Bullet(signifier="–", text=f"worker line {i} about lighthouses", id=f"w{i}", type="note",
               status="open", recorded="2026-03-09T10:00:00.000Z")
    idx.upsert([("2026-03-09", b)])
print("done", flush=True)
"""


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_search_while_another_process_upserts(store: Path) -> None:
    # Lite keeps the worker process cheap; the point is the DuckDB lock discipline across processes.
    idx = MemoryIndex(store, None)
    idx.rebuild()
    n = 15
    worker = subprocess.Popen(
        [sys.executable, "-c", _UPSERTER, str(store), str(n)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    seen = 0
    while worker.poll() is None:
        seen = max(seen, len(idx.search("lighthouses", limit=50)))  # never raises mid-write
    assert worker.wait(timeout=60) == 0
    assert len(idx.search("lighthouses", limit=50)) == n
    assert seen <= n


def test_a_patched_vector_snapshot_reads_new_rows_and_never_dead_ones() -> None:
    """Upserts of this process: replaced and removed rows are dead, new rows are read from the tail
    (grown as needed), ids map to their rows, and the snapshot patched from stays as it was."""

    def unit(i: int) -> np.ndarray:
        v = np.zeros(4, np.float32)
        v[i] = 1.0
        return v

    base = VectorSnapshot.load((1,), ["a", "b", "c"], np.stack([unit(0), unit(1), unit(2)]))
    one = base.patched((2,), {"b", "gone"}, ["b", "d"], np.stack([unit(3), unit(1)]))
    assert one.version == (2,) and one.ids == ["a", "b", "c", "b", "d"] and one.n == 5
    assert one.row_of == {"a": 0, "c": 2, "b": 3, "d": 4} and one.dead == frozenset({1})
    assert np.array_equal(one.vectors(np.array([3, 4])), np.stack([unit(3), unit(1)]))
    assert one.top(unit(1), 1).tolist() == [4]  # the old "b" row matches as well, but it is dead
    assert sorted(one.top(unit(3), 4).tolist()) == [0, 2, 3, 4]
    many = [f"n{i}" for i in range(100)]
    two = one.patched((3,), set(), many, np.stack([unit(i % 4) for i in range(100)]))
    assert two.n == 105 and two.row_of["n99"] == 104 and two.row_of["d"] == 4
    assert np.array_equal(two.vectors(np.array([3, 4, 104])), np.stack([unit(3), unit(1), unit(3)]))
    assert base.n == 3 and base.row_of == {"a": 0, "b": 1, "c": 2} and base.dead == frozenset()
    assert one.n == 5 and np.array_equal(one.vectors(np.array([4])), unit(1)[None])


def test_state_cache_holds_one_copy_per_index_folder_at_one_state() -> None:
    """``StateCache``: a copy is served only for the state it was loaded at; loading another generation of
    a folder replaces the folder's copy (other folders keep theirs); ``patch`` moves the copy of the state
    before a write to the state after it, forgets it when the write started from another state or the
    move gives up, and never replaces a copy loaded meanwhile."""
    from tempomem.recall.state_cache import StateCache

    cache: StateCache[str] = StateCache()
    loads: list[str] = []

    def load(value: str) -> Any:
        return lambda: loads.append(value) or value

    gen1, gen2, elsewhere = "/a/index/gen-1/x.duckdb", "/a/index/gen-2/x.duckdb", "/b/index/gen-1/x.duckdb"
    assert cache.peek(gen1, (1,)) is None
    assert cache.get(gen1, (1,), load("g1")) == "g1" and cache.get(gen1, (1,), load("again")) == "g1"
    assert loads == ["g1"] and cache.peek(gen1, (1,)) == "g1"
    assert cache.peek(gen1, (2,)) is None and cache.peek(gen2, (1,)) is None
    assert cache.get(gen1, (2,), load("g1 at 2")) == "g1 at 2"  # the state moved: loaded again
    cache.get(elsewhere, (1,), load("b"))
    assert cache.get(gen2, (1,), load("g2")) == "g2"
    assert cache.peek(gen1, (2,)) is None and cache.peek(elsewhere, (1,)) == "b"  # one generation per folder
    cache.patch(gen2, (1,), (2,), lambda v: v + " moved")
    assert cache.peek(gen2, (2,)) == "g2 moved" and cache.peek(gen2, (1,)) is None
    cache.patch(gen2, (1,), (3,), lambda v: v + " wrong")  # the write started from a state not held
    assert cache.peek(gen2, (2,)) is None and cache.peek(gen2, (3,)) is None
    cache.get(gen2, (5,), load("g5"))
    cache.patch(gen2, (5,), (6,), lambda v: None)  # the move gave up
    assert cache.peek(gen2, (5,)) is None and cache.peek(gen2, (6,)) is None
    cache.get(gen2, (7,), load("g7"))

    def move_while_another_loads(value: str) -> str:
        cache.get(gen2, (9,), load("g9"))
        return value + " moved"

    cache.patch(gen2, (7,), (8,), move_while_another_loads)
    assert cache.peek(gen2, (9,)) == "g9" and cache.peek(gen2, (8,)) is None
    assert cache.peek(elsewhere, (1,)) == "b" and loads == ["g1", "g1 at 2", "b", "g2", "g5", "g7", "g9"]


def test_a_vector_snapshot_top_is_the_exact_top_k_of_its_live_rows() -> None:
    """``top`` returns integer row positions: the k best live rows by dot product (any k, 0 included),
    never a dead row, at most as many as are alive."""
    rng = np.random.default_rng(5)

    def units(n: int) -> np.ndarray:
        v = rng.normal(size=(n, 8)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    ids = [f"r{i}" for i in range(1000)]  # large enough that a partition around the wrong k shows
    snap = VectorSnapshot.load((1,), ids, units(1000)).patched(
        (2,), {"r3", "r7", "r999"}, ["r7", "n1"], units(2)
    )
    everything = snap.vectors(np.arange(snap.n))
    live = snap.n - len(snap.dead)
    for query in units(6):
        scores = everything @ query
        scores[list(snap.dead)] = -np.inf
        for k in (0, 1, 2, 3, 17, 100, live - 1, live, live + 2):
            got = snap.top(query, k)
            assert got.dtype == np.int64 and len(got) == min(k, live)
            assert set(got.tolist()) == set(np.argsort(-scores)[: min(k, live)].tolist()), k


def test_AMB32_every_own_write_patches_the_bm25_snapshot_to_exactly_a_fresh_load(store: Path) -> None:
    """Each of this process's upserts moves the cached BM25 snapshot in memory (never a reload), and after
    each one it holds what a fresh load of the database holds: the same terms with the same ids and
    document frequencies, the same document count, lengths and average, the same score for every term.
    The writes cover a batch of two, a change (gone and added in one delta), repeated terms, postings added
    on top of added postings, and a term whose last document goes and that comes back under a new id."""
    import tempomem.recall.fts as fts
    import tempomem.recall.index as index_mod
    import tempomem.recall.row_snapshot as row_snapshot

    idx = MemoryIndex(store, None)
    idx.rebuild()
    idx.search("green tea")  # caches the snapshot of the state before the writes
    writes = [
        [("2026-03-04", bullet("Quokka quokka quokka tea on Sark.", id="q1"))],
        [
            ("2026-03-04", bullet("The lighthouse keeper drinks tea.", id="k1")),
            ("2026-03-04", bullet("Ferries to Sark run twice a day.", id="f1")),
        ],
        [("2026-03-05", bullet("A quokka swam to Sark.", id="q1"))],
        [("2026-03-05", bullet("Ferries to Sark run twice a day.", id="f1", status="dropped"))],
        [("2026-03-06", bullet("The ferries are back.", id="f2"))],
        [("2026-03-06", bullet("The keeper drinks coffee and tea tea.", id="k1"))],
        [("2026-03-07", bullet("The cat sleeps on the warm mat all afternoon.", id="cat", status="dropped"))],
        [
            ("2026-03-07", bullet("Morgan prefers green tea in the morning.", id="tea", status="dropped")),
            (
                "2026-03-07",
                bullet("The quarterly tax filing deadline is 2026-04-15.", id="tax", status="dropped"),
            ),
        ],
        [
            ("2026-03-08", bullet("The keeper drinks coffee and tea tea.", id="k1", status="dropped"))
        ],  # the last doc
    ]
    db = str(idx.generation_dir(idx.active_generation() or 0) / index_mod.DB_NAME)
    ferries_gone = False
    cols = index_schema.COLUMNS
    terms = fts.local_query_terms("quokka tea ferries keeper sark coffee")
    assert terms is not None
    for i, batch in enumerate(writes):
        for day, b in batch:
            append_bullets(store / "daily" / f"{day}.md", day, [b])
        if i % 2:  # build the name map before the write, so the patch extends it (else built after)
            fts._SNAPSHOTS.items[db][1].scores_of(terms, [])
        idx.upsert(batch)
        key, patched = fts._SNAPSHOTS.items[db]  # still cached: patched, not forgotten
        # Context lines' BM25 (issue #17): each named live document's score exactly as top() scores it;
        # removed and unknown names left out.
        named = patched.scores_of(terms, [*patched.names, "nobody"])
        assert named == dict(patched.top(terms, 1000))
        held = row_snapshot._SNAPSHOTS.items[db][1]
        with idx._connect(Path(db), read_only=True) as con:
            by_seq = con.execute(f"SELECT {', '.join(cols)} FROM memories ORDER BY seq").fetchall()
        seqs = [int(r[cols.index("seq")]) for r in by_seq]  # type: ignore[call-overload]
        got = held.at_seqs([*seqs[::2], 10**6])
        assert len(got) == len(seqs[::2]) and {r[0]: r for r in got} == {r[0]: r for r in by_seq[::2]}
        # every seq ever used, the stale ones of rewritten and removed rows included: only live rows
        got = held.at_seqs(list(range(max(seqs) + 2)))
        assert len(got) == len(by_seq) and {r[0]: r for r in got} == {r[0]: r for r in by_seq}
        assert patched.alive is not None  # moved along with the write, never reloaded
        assert row_snapshot._SNAPSHOTS.items[db][0] == key  # the row copy moved to the same state
        with idx._connect(Path(db), read_only=True) as con:
            fresh = fts.Bm25Snapshot(con)
        assert patched.dict == fresh.dict
        assert (patched.num_docs, patched.avgdl, patched.total_len) == (
            fresh.num_docs, fresh.avgdl, fresh.total_len,
        )  # fmt: skip
        live = [n for n, alive in zip(patched.names, patched.alive, strict=True) if alive]
        assert sorted(live) == sorted(fresh.names)
        for term in fresh.dict:
            assert patched.top([term], 100) == fresh.top([term], 100), term
        assert named == pytest.approx(dict(fresh.top(terms, 1000)), abs=1e-12)
        ferries_gone = ferries_gone or fts.local_query_terms("ferries")[0] not in fresh.dict  # type: ignore[index]
    assert ferries_gone and fts.local_query_terms("ferries")[0] in fresh.dict  # type: ignore[index]
    # and the database those writes left scores as a full rebuild of the same Markdown
    rebuilt_root = store.parent / "rebuilt"
    shutil.copytree(store / "daily", rebuilt_root / "daily")
    rebuilt = MemoryIndex(rebuilt_root, None)
    rebuilt.rebuild()
    other_db = rebuilt.generation_dir(rebuilt.active_generation() or 0) / index_mod.DB_NAME
    with rebuilt._connect(other_db, read_only=True) as con:
        full = fts.Bm25Snapshot(con)
    assert {t: df for t, (_, df) in fresh.dict.items()} == {t: df for t, (_, df) in full.dict.items()}
    assert (fresh.num_docs, fresh.avgdl) == (full.num_docs, full.avgdl)
    for term in full.dict:
        assert patched.top([term], 100) == full.top([term], 100), term


def test_context_lines_come_by_position_with_their_stored_vector_and_bm25(
    store: Path, minilm: LocalMiniLMEmbedder
) -> None:
    """``gather``'s context fetcher (issue #17) answers the lines at the asked (day, seq) positions that
    the pool does not hold, each with the cosine and BM25 score a wide pool gives the same line, from the
    in-memory copies and, once they are gone, from DuckDB."""
    import tempomem.recall.fts as fts
    import tempomem.recall.row_snapshot as row_snapshot

    day = "2026-03-02"
    append_bullets(store / "daily" / f"{day}.md", day, [bullet("Morgan met Sam there.", id="met",
                   entities=("person:morgan", "person:sam"))])  # fmt: skip
    idx = MemoryIndex(store, minilm)
    idx.rebuild()
    query = "Does Morgan drink tea in the morning or at the club?"
    found = idx.gather(query, pool=1)
    wide = {c.id: c for c in idx.gather(query, pool=50).candidates}
    assert found.hybrid and found.context is not None and len(wide) == 10
    assert wide["met"].entities == ("person:morgan", "person:sam")
    held = {c.id for c in found.candidates}
    at = {c.id: (str(c.row["day"]), int(c.row["seq"])) for c in wide.values()}  # type: ignore[call-overload]
    asked = [at[i] for i in sorted(at)] + [("2026-03-01", 999), ("1999-01-01", at["tea"][1])]
    for _source in ("memory", "duckdb"):
        got = found.context(asked)
        assert {c.id for c in got} == set(wide) - held
        for c in got:
            w = wide[c.id]
            assert c.row == w.row and c.text == w.text and c.entities == w.entities
            assert c.cosine == pytest.approx(w.cosine, abs=1e-6)
            assert c.bm25_score == w.bm25_score  # None where the line holds no query term
            assert c.bm25_rank is None and c.vector_rank is None  # no retriever returned it
        assert any(c.bm25_score for c in got) and any(c.bm25_score is None for c in got)
        fts._SNAPSHOTS.items.clear()  # next round: no in-memory copy, the rows come from DuckDB
        row_snapshot._SNAPSHOTS.items.clear()
    assert found.context([]) == []
    # Lite and an empty query have no context fetcher.
    assert MemoryIndex(store, None).gather(query).context is None
    assert idx.gather("   ").context is None


def test_a_search_ranks_a_line_no_retriever_returned_next_to_its_best_match(
    store: Path, minilm: LocalMiniLMEmbedder
) -> None:
    """With a pool of two (BM25 top-2 ∪ vector top-2 = tax, room), the line after tax on its day (zoe)
    joins as a context line and takes second place; without context lines room does (issue #17)."""
    from tempomem.recall.profiles import TUNED_MINILM

    idx = MemoryIndex(store, minilm)
    idx.rebuild()
    query = "What is the quarterly tax filing deadline?"
    narrow = TUNED_MINILM.model_copy(update={"pool": 2})
    assert {c.id for c in idx.gather(query, pool=2).candidates} == {"tax", "room"}
    hits = idx.search(query, limit=2, profile=narrow)
    assert [h.id for h in hits] == ["tax", "zoe"]
    assert (hits[1].bm25_rank, hits[1].vector_rank) == (None, None)
    alone = idx.search(query, limit=2, profile=narrow.model_copy(update={"context_seeds": 0}))
    assert [h.id for h in alone] == ["tax", "room"]


def test_the_bm25_copy_scores_as_duckdb_match_bm25_before_and_after_own_writes(store: Path) -> None:
    """The in-memory BM25 snapshot, its per-name lookup (context lines, issue #17) and the SQL fallback
    give DuckDB's own ``match_bm25`` scores, on the rebuilt index and after incremental writes."""
    import tempomem.recall.fts as fts
    import tempomem.recall.index as index_mod

    idx = MemoryIndex(store, None)
    idx.rebuild()
    queries = ["green tea in the morning", "Morgan club", "born in Porto 1988", "tyres tyres winter car"]
    for round_ in range(2):
        db = idx.generation_dir(idx.active_generation() or 0) / index_mod.DB_NAME
        with idx._connect(db, read_only=True) as con:
            snap = fts.Bm25Snapshot(con)
            for query in queries:
                terms = fts.query_terms(con, query)
                macro = con.execute(
                    f"SELECT id, s FROM (SELECT id, {fts.SCHEMA}.match_bm25(id, ?) AS s FROM memories) "
                    "WHERE s IS NOT NULL ORDER BY s DESC, id",
                    [query],
                ).fetchall()
                assert macro, query
                want = dict(macro)
                assert dict(snap.top(terms, 100)) == pytest.approx(want, rel=1e-12), query
                assert dict(con.execute(fts.bm25_sql(100), [query]).fetchall()) == pytest.approx(
                    want, rel=1e-12
                )
                assert snap.scores_of(terms, list(want)) == pytest.approx(want, rel=1e-12)
        if round_ == 0:  # own writes: a new line, a changed line, a removed line
            writes = [
                ("2026-03-04", bullet("Morgan drinks green tea at the club.", id="new")),
                ("2026-03-04", bullet("The red car needs winter tyres.", id="car")),
                ("2026-03-04", bullet("Sam was born in Porto.", id="sam", status="dropped")),
            ]
            for day, b in writes:
                append_bullets(store / "daily" / f"{day}.md", day, [b])
            idx.upsert(writes)


def test_privatise_tightens_what_is_not_private_and_leaves_symlinks_and_their_targets(tmp_path: Path) -> None:
    """Index files come with the process umask; privatise makes them 0600/0700 (only those that are not
    yet: a Lance table keeps every file it ever wrote). A symlink and what it points at are untouched."""
    from tempomem.recall.index.schema import privatise

    root, outside = tmp_path / "gen", tmp_path / "outside.txt"
    (root / "vectors.lance" / "data").mkdir(parents=True)
    os.chmod(root / "vectors.lance", 0o755)
    (root / "vectors.lance" / "data" / "a.lance").write_bytes(b"x")
    os.chmod(root / "vectors.lance" / "data" / "a.lance", 0o644)
    (root / "kept").write_bytes(b"y")
    os.chmod(root / "kept", 0o600)
    outside.write_bytes(b"z")
    os.chmod(outside, 0o644)
    (root / "link").symlink_to(outside)
    os.chmod(root, 0o755)
    privatise(root)
    modes = {
        os.path.relpath(os.path.join(d, n), root): stat.S_IMODE(os.lstat(os.path.join(d, n)).st_mode)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
        if n != "link"
    }
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert modes == {
        "vectors.lance": 0o700,
        "vectors.lance/data": 0o700,
        "vectors.lance/data/a.lance": 0o600,
        "kept": 0o600,
    }
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o644


def test_files_an_upsert_adds_to_the_index_are_private(store: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(store, minilm)
    idx.rebuild()
    old = os.umask(0o022)  # the host's usual umask: new files would be 0644
    try:
        line = bullet("Upserted under a loose umask", id="loose")
        append_bullets(store / "daily" / "2026-03-09.md", "2026-03-09", [line])
        assert idx.upsert([("2026-03-09", line)]) == 1
    finally:
        os.umask(old)
    for dirpath, _dirnames, filenames in os.walk(store / "index"):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
        for name in filenames:
            assert stat.S_IMODE(os.stat(os.path.join(dirpath, name)).st_mode) == 0o600, name
