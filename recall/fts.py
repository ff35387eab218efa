"""Incremental maintenance and fast querying of DuckDB's FTS index over ``memories`` (AMB-32).

``PRAGMA create_fts_index`` rebuilds every posting (seconds at 100k rows), and the generated
``match_bm25`` macro is evaluated once per row of ``memories``. Both are replaced here by SQL over the
index's own tables (``docs``, ``terms``, ``dict``, ``stats``) that reproduces what the extension builds
and scores:

* a document's terms are ``stem(w, 'porter')`` of the tokens ``w`` of ``tokenize(text)`` that are not
  empty and not stopwords; ``docs.len`` is their count; ``dict.df`` the number of documents holding a
  term; ``stats`` is ``(count(docs), sum(len) / count(len))``;
* a score is ``match_bm25``'s Okapi BM25 (k = 1.2, b = 0.75, disjunctive), computed only for documents
  that contain a query term.

So after ``apply_changes`` the index scores exactly as a full rebuild would (tests compare both), and
the watermark ``meta.fts_seq`` can move in the same transaction as the rows: no unindexed tail is left.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import Stemmer

from tempomem.recall.state_cache import StateCache

SCHEMA = "fts_main_memories"


def in_list(values: Sequence[object]) -> str:
    """``(?, ?, …)`` for an IN list whose values go as parameters (never inlined: text may hold any
    character, NUL included, #13 item 5); a constant-length list keeps the plan a filtered scan."""
    return "(" + ", ".join("?" * len(values)) + ")" if values else "(NULL)"


# How many FTS stats tables exist (0 or 1): a caller may fold it into a query of its own.
INDEX_COUNT_SQL = (
    f"SELECT count(*) FROM duckdb_tables() WHERE schema_name = '{SCHEMA}' AND table_name = 'stats'"
)


def has_index(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute(INDEX_COUNT_SQL).fetchone()[0])  # type: ignore[index]


@dataclass
class FtsDelta:
    """What ``apply_changes`` did to the FTS tables, so a process can patch its in-memory snapshot
    (``Bm25Snapshot.patched``) instead of reloading every posting after its own write."""

    gone_docids: list[int] = field(default_factory=list)
    docs: list[tuple[int, str, int]] = field(default_factory=list)  # (docid, name, len)
    postings: list[dict[int, int]] = field(default_factory=list)  # per new doc: termid -> tf
    new_terms: dict[str, int] = field(default_factory=dict)  # term -> termid
    df_delta: dict[int, int] = field(default_factory=dict)  # termid -> change of df


def apply_changes(con: duckdb.DuckDBPyConnection, gone: Sequence[str], added: Sequence[str]) -> FtsDelta:
    """Remove the documents named ``gone`` (deleted or about to be re-added) and index the rows of
    ``memories`` whose id is in ``added``. Run inside the caller's transaction, after the rows changed.

    Why the small reads into Python and literal lists back: each statement that joins the 1M-row
    ``terms`` table costs 10-35 ms at 100k memories; point lists keep every statement a filtered scan."""
    s = SCHEMA
    delta = FtsDelta()
    df_delta = delta.df_delta
    if gone:
        docids = [
            d
            for (d,) in con.execute(
                f"SELECT docid FROM {s}.docs WHERE name IN {in_list(gone)}", list(gone)
            ).fetchall()
        ]
        delta.gone_docids = [int(d) for d in docids]
        if docids:
            ids = "(" + ", ".join(str(int(d)) for d in docids) + ")"
            for termid, n in con.execute(
                f"SELECT termid, count(DISTINCT docid) FROM {s}.terms WHERE docid IN {ids} GROUP BY termid"
            ).fetchall():
                df_delta[int(termid)] = df_delta.get(int(termid), 0) - int(n)
            con.execute(f"DELETE FROM {s}.terms WHERE docid IN {ids}")
            con.execute(f"DELETE FROM {s}.docs WHERE docid IN {ids}")
    if added:
        # One statement for the present rows (term NULL) and their stemmed tokens, one for the known
        # terms and the next free ids: DuckDB statements cost about a millisecond each.
        rows = con.execute(
            f"SELECT id, NULL FROM memories WHERE id IN {in_list(added)} UNION ALL "
            f"SELECT t.id, stem(t.w, 'porter') FROM (SELECT id, unnest({s}.tokenize(text)) AS w "
            f"FROM memories WHERE id IN {in_list(added)}) AS t "
            f"WHERE t.w IS NOT NULL AND len(t.w) > 0 AND t.w NOT IN (SELECT sw FROM {s}.stopwords)",
            [*added, *added],
        ).fetchall()
        present = sorted(rid for rid, term in rows if term is None)
        tokens = [(rid, term) for rid, term in rows if term is not None]
        terms_of: dict[str, list[str]] = {rid: [] for rid in present}
        for rid, term in tokens:
            terms_of[rid].append(term)
        wanted = sorted({t for _, t in tokens})
        termid_of: dict[str, int] = {}
        base_doc = base_term = 0
        for kind, term, termid in con.execute(
            f"SELECT 'doc', NULL, coalesce(max(docid), -1) + 1 FROM {s}.docs UNION ALL "
            f"SELECT 'term', NULL, coalesce(max(termid), -1) + 1 FROM {s}.dict UNION ALL "
            f"SELECT 'known', term, termid FROM {s}.dict WHERE term IN {in_list(wanted)}",
            wanted,
        ).fetchall():
            if kind == "doc":
                base_doc = termid
            elif kind == "term":
                base_term = termid
            else:
                termid_of[term] = termid
        new_terms = [t for t in wanted if t not in termid_of]
        for offset, term in enumerate(new_terms):
            termid_of[term] = int(base_term) + offset
            delta.new_terms[term] = int(base_term) + offset
        if new_terms:
            con.execute(
                f"INSERT INTO {s}.dict VALUES " + ", ".join(f"({termid_of[t]}, ?, 0)" for t in new_terms),
                new_terms,
            )
        doc_rows, doc_names, term_rows = [], [], []
        for offset, rid in enumerate(present):
            docid = int(base_doc) + offset
            doc_rows.append(f"({docid}, ?, {len(terms_of[rid])})")
            doc_names.append(rid)
            term_rows.extend(f"({docid}, 0, {termid_of[t]})" for t in terms_of[rid])
            delta.docs.append((docid, rid, len(terms_of[rid])))
            tf: dict[int, int] = {}
            for t in terms_of[rid]:
                tf[termid_of[t]] = tf.get(termid_of[t], 0) + 1
            delta.postings.append(tf)
            for termid in {termid_of[t] for t in terms_of[rid]}:
                df_delta[termid] = df_delta.get(termid, 0) + 1
        if doc_rows:
            con.execute(f"INSERT INTO {s}.docs VALUES {', '.join(doc_rows)}", doc_names)
        if term_rows:
            con.execute(f"INSERT INTO {s}.terms VALUES {', '.join(term_rows)}")
    changes = [(t, n) for t, n in df_delta.items() if n]
    if changes:
        con.execute(
            f"UPDATE {s}.dict SET df = dict.df + c.n FROM (VALUES "
            + ", ".join(f"({t}, {n})" for t, n in changes)
            + ") AS c(termid, n) WHERE dict.termid = c.termid"
        )
        con.execute(
            f"DELETE FROM {s}.dict WHERE df <= 0 AND termid IN ({', '.join(str(t) for t, _ in changes)})"
        )
    if gone or added:
        con.execute(f"DELETE FROM {s}.stats")
        con.execute(
            f"INSERT INTO {s}.stats SELECT count(docs.docid), sum(docs.len) / count(docs.len) "
            f"FROM {s}.docs AS docs"
        )
    return delta


def bm25_sql(pool: int) -> str:
    """Top-``pool`` (id, score) of ``memories`` by ``match_bm25`` (same formula and constants), scoring
    only documents that hold a query term. The query is its one parameter."""
    s = SCHEMA
    return (
        f"WITH tokens AS (SELECT DISTINCT stem(unnest({s}.tokenize(?)), 'porter') AS t), "
        f"qterms AS (SELECT dict.termid, dict.df FROM {s}.dict AS dict, tokens WHERE dict.term = tokens.t), "
        f"term_tf AS (SELECT termid, docid, count_star() AS tf FROM {s}.terms "
        "WHERE termid IN (SELECT termid FROM qterms) GROUP BY docid, termid), "
        "subscores AS (SELECT docs.name, (log((((((SELECT num_docs FROM "
        f"{s}.stats) - df) + 0.5) / (df + 0.5)) + 1)) * ((tf * (1.2 + 1)) / (tf + (1.2 * ((1 - 0.75) + "
        f"(0.75 * (len / (SELECT avgdl FROM {s}.stats)))))))) AS subscore "
        f"FROM term_tf, {s}.docs AS docs, qterms WHERE term_tf.docid = docs.docid "
        "AND term_tf.termid = qterms.termid), "
        "scores AS (SELECT name, sum(subscore) AS score FROM subscores GROUP BY name) "
        "SELECT m.id, scores.score FROM scores JOIN memories AS m ON m.id = scores.name "
        f"WHERE scores.score IS NOT NULL ORDER BY scores.score DESC, m.id LIMIT {int(pool)}"
    )


def query_terms(con: duckdb.DuckDBPyConnection, query: str) -> list[str]:
    """The distinct stemmed tokens of ``query``, as ``match_bm25`` derives them."""
    terms = local_query_terms(query)
    if terms is not None:
        return terms
    rows = con.execute(
        f"SELECT DISTINCT stem(unnest({SCHEMA}.tokenize(?)), 'porter') AS t ORDER BY t", [query]
    ).fetchall()
    return [t for (t,) in rows if t is not None]


# The extension's ``tokenize`` macro: lower(strip_accents(s)), then every run of digits or ASCII
# punctuation becomes a space, then split on RE2's ``\s`` ([\t\n\f\r ]).
_PLAIN = re.compile(r"[\t\n\f\r\x20-\x7e]*")
_SEPARATORS = re.compile(r"[0-9!@#$%^&*()_+={}\[\]:;<>,.?~\\/|'\"`-]+")
_SPACE = re.compile(r"[\t\n\f\r ]+")
_STEMMERS = threading.local()  # a PyStemmer object is not safe to share between threads


def local_query_terms(query: str) -> list[str] | None:
    """``query_terms`` without a database round trip (~1-2 ms each), for printable-ASCII queries, where
    lower() and strip_accents() are the identity and both regex dialects agree; None otherwise.

    Why it is exact: PyStemmer wraps the same Snowball ``porter`` C stemmer as DuckDB's ``stem``; a test
    compares both on every word of the LoCoMo conversations and on generated strings."""
    terms = _local_terms(query)
    return list(terms) if terms is not None else None


@functools.lru_cache(maxsize=8192)
def _local_terms(query: str) -> tuple[str, ...] | None:
    if not _PLAIN.fullmatch(query):
        return None
    stemmer = getattr(_STEMMERS, "porter", None)
    if stemmer is None:
        stemmer = _STEMMERS.porter = Stemmer.Stemmer("porter")
    tokens = _SPACE.split(_SEPARATORS.sub(" ", query.lower()))
    return tuple(sorted(set(stemmer.stemWords(tokens))))


class Bm25Snapshot:
    """The FTS index tables of one database state, in memory, scored like ``match_bm25``.

    Why: the index's postings are scanned and joined by DuckDB on every query (60-130 ms at 100k rows);
    over arrays held per process a query costs a few ms. Per-term constants are computed with the same
    operations in the same order as the macro (``log`` is base 10; ``tf * 2.2`` is exact decimal
    arithmetic there, hence ``tf * 22 / 10``); only the summation order over query terms may differ,
    which moves a score by at most a few ulps."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        s = SCHEMA
        num_docs, avgdl = con.execute(f"SELECT num_docs, avgdl FROM {s}.stats").fetchone()  # type: ignore[misc]
        self.num_docs = int(num_docs)
        self.avgdl = float(avgdl) if avgdl is not None else 0.0
        docs = con.execute(f"SELECT docid, name, len FROM {s}.docs ORDER BY docid").fetchnumpy()
        self.docids = np.asarray(docs["docid"], dtype=np.int64)
        self.names: list[str] = [str(n) for n in docs["name"]]
        self.lens = np.asarray(docs["len"], dtype=np.float64)
        post = con.execute(
            f"SELECT termid, docid, count(*) AS tf FROM {s}.terms "
            "GROUP BY termid, docid ORDER BY termid, docid"
        ).fetchnumpy()
        termids = np.asarray(post["termid"], dtype=np.int64)
        self.post_pos = np.searchsorted(self.docids, np.asarray(post["docid"], dtype=np.int64))
        self.post_tf = np.asarray(post["tf"], dtype=np.float64)
        if len(termids):
            starts = np.flatnonzero(np.r_[True, termids[1:] != termids[:-1]])
            ends = np.r_[starts[1:], len(termids)]
        else:  # an empty index (no memories, or only stop words): no postings, no ranges
            starts = ends = np.zeros(0, np.int64)
        self.ranges = {int(termids[a]): (int(a), int(b)) for a, b in zip(starts, ends, strict=True)}
        self.dict = {
            str(term): (int(termid), int(df))
            for term, termid, df in con.execute(f"SELECT term, termid, df FROM {s}.dict").fetchall()
        }
        # Set only by ``patched``: rows removed since the load, and postings of documents added since.
        self.alive: np.ndarray | None = None
        self.extra: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.total_len = int(self.lens.sum())
        self._positions: dict[str, int] | None = None  # name -> position, built on first ``scores_of``

    def patched(self, delta: FtsDelta) -> Bm25Snapshot | None:
        """This snapshot moved past ``delta`` (one committed ``apply_changes``), sharing the unchanged
        arrays; None when the delta does not fit (then the caller reloads). Scores equal a fresh load:
        a document's terms are summed in the same order, with the same df, lens and avgdl."""
        new = object.__new__(Bm25Snapshot)
        n_old = len(self.docids)
        alive = self.alive.copy() if self.alive is not None else np.ones(n_old, bool)
        total_len = self.total_len
        if delta.gone_docids:
            pos = np.searchsorted(self.docids, np.asarray(delta.gone_docids, dtype=np.int64))
            if np.any(pos >= n_old) or np.any(self.docids[np.minimum(pos, n_old - 1)] != delta.gone_docids):
                return None
            if not np.all(alive[pos]):
                return None
            alive[pos] = False
            total_len -= int(self.lens[pos].sum())
        if delta.docs and n_old and delta.docs[0][0] <= int(self.docids[-1]):
            return None  # docids must keep ascending for searchsorted
        new.docids = np.concatenate([self.docids, np.asarray([d for d, _, _ in delta.docs], np.int64)])
        new.names = self.names + [name for _, name, _ in delta.docs]
        # Positions only grow and a re-added name comes later: extend the map instead of rebuilding it.
        new._positions = None
        if self._positions is not None:
            new._positions = self._positions | {name: n_old + i for i, (_, name, _) in enumerate(delta.docs)}
        new.lens = np.concatenate([self.lens, np.asarray([n for _, _, n in delta.docs], np.float64)])
        new.alive = np.concatenate([alive, np.ones(len(delta.docs), bool)])
        total_len += sum(n for _, _, n in delta.docs)
        grow: dict[int, tuple[list[int], list[float]]] = {}
        for offset, tf in enumerate(delta.postings):
            for termid, count in tf.items():
                ps, ts = grow.setdefault(termid, ([], []))
                ps.append(n_old + offset)
                ts.append(float(count))
        new.extra = dict(self.extra)
        for termid, (ps, ts) in grow.items():
            old = new.extra.get(termid)
            p, t = np.asarray(ps, np.int64), np.asarray(ts, np.float64)
            new.extra[termid] = (np.concatenate([old[0], p]), np.concatenate([old[1], t])) if old else (p, t)
        terms = dict(self.dict)
        for term, termid in delta.new_terms.items():
            terms[term] = (termid, 0)
        if delta.df_delta:
            term_of = {termid: term for term, (termid, _) in terms.items() if termid in delta.df_delta}
            for termid, change in delta.df_delta.items():
                term = term_of.get(termid)
                if term is None:
                    return None
                df = terms[term][1] + change
                if df <= 0:
                    del terms[term]  # as the DELETE ... WHERE df <= 0 of apply_changes
                else:
                    terms[term] = (termid, df)
        new.dict = terms
        new.post_pos, new.post_tf, new.ranges = self.post_pos, self.post_tf, self.ranges
        new.num_docs = int(new.alive.sum())
        new.total_len = total_len
        # As the stats table: sum(len) / count(len), a double division of exact integers.
        new.avgdl = total_len / new.num_docs if new.num_docs else 0.0
        return new

    def _postings(self, terms: Sequence[str]) -> Iterator[tuple[float, np.ndarray, np.ndarray]]:
        """``(idf, positions, tfs)`` of each known query term's postings, in term order: the loaded ones,
        then those of documents added since the load (disjoint positions, each part ascending)."""
        for term in terms:
            hit = self.dict.get(term)
            if hit is None:
                continue
            termid, df = hit
            idf = math.log10((((self.num_docs - df) + 0.5) / (df + 0.5)) + 1)
            if termid in self.ranges:
                a, b = self.ranges[termid]
                yield idf, self.post_pos[a:b], self.post_tf[a:b]
            if termid in self.extra:
                yield idf, *self.extra[termid]

    def _subscore(self, idf: float, tf: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return idf * (((tf * 22) / 10.0) / (tf + (1.2 * (0.25 + (0.75 * (self.lens[pos] / self.avgdl))))))

    def top(self, terms: Sequence[str], pool: int) -> list[tuple[str, float]]:
        scores: np.ndarray | None = None
        for idf, pos, tf in self._postings(terms):
            if scores is None:
                scores = np.zeros(len(self.docids), np.float64)
            scores[pos] += self._subscore(idf, tf, pos)
        if scores is None or pool <= 0:
            return []
        if self.alive is not None:
            scores[~self.alive] = 0.0  # removed since the load
        hit_pos = np.flatnonzero(scores)
        if len(hit_pos) > pool:
            kth = np.partition(scores[hit_pos], len(hit_pos) - pool)[len(hit_pos) - pool]
            hit_pos = hit_pos[scores[hit_pos] >= kth]
        ranked = sorted((-float(scores[p]), self.names[p]) for p in hit_pos)
        return [(name, -neg) for neg, name in ranked[:pool]]

    def scores_of(self, terms: Sequence[str], names: Sequence[str]) -> dict[str, float]:
        """The BM25 score of each named live document that holds a query term, exactly as ``top`` scores
        it (same operations, terms summed in the same order); documents without one are left out."""
        if self._positions is None:
            self._positions = {name: i for i, name in enumerate(self.names)}  # a later position wins
        found = [(name, p) for name in names if (p := self._positions.get(name)) is not None]
        if self.alive is not None:
            found = [(name, p) for name, p in found if self.alive[p]]
        if not found:
            return {}
        want = np.asarray([p for _, p in found], np.int64)
        scores = np.zeros(len(want), np.float64)
        for idf, pos, tf in self._postings(terms):
            at = np.minimum(np.searchsorted(pos, want), len(pos) - 1)
            held = pos[at] == want
            scores[held] += self._subscore(idf, tf[at[held]], want[held])
        return {name: float(v) for (name, _), v in zip(found, scores, strict=True) if v != 0.0}


_SNAPSHOTS: StateCache[Bm25Snapshot] = StateCache()


def snapshot(db: str, key: tuple[object, ...], con: duckdb.DuckDBPyConnection) -> Bm25Snapshot:
    """The cached snapshot of ``db`` for state ``key`` (build it from ``con`` when the state moved)."""
    return _SNAPSHOTS.get(db, key, lambda: Bm25Snapshot(con))


def cached_snapshot(db: str, key: tuple[object, ...]) -> Bm25Snapshot | None:
    """The snapshot of ``db`` for state ``key`` if this process holds it (no database needed)."""
    return _SNAPSHOTS.peek(db, key)


def patch_snapshot(db: str, before: tuple[object, ...], after: tuple[object, ...], delta: FtsDelta) -> None:
    """After this process's own committed write of ``db``: move a cached snapshot of state ``before`` to
    state ``after`` in memory (or forget it), so the next search does not reload every posting."""
    _SNAPSHOTS.patch(db, before, after, lambda snap: snap.patched(delta))
