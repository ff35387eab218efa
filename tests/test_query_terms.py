"""The local query-term derivation (PyStemmer + the tokenize macro in Python) equals DuckDB's
``stem(unnest(tokenize(q)), 'porter')`` exactly, so BM25 over the in-memory snapshot scores as
``match_bm25`` does (REC-24 lexical evidence, AMB-32)."""

from __future__ import annotations

import json
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempomem.recall.fts as fts
from tempomem.recall import scoring
from tempomem.recall.index import MemoryIndex
from tests.helpers.locomo import require_locomo
from tests.test_recall_index import HashEmbedder, write_store


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("terms") / "mem"
    write_store(root)
    idx = MemoryIndex(root, HashEmbedder())
    idx.rebuild()
    db = idx.generation_dir(idx.active_generation() or 0) / "fts.duckdb"
    with idx._connect(db, read_only=True) as c:
        yield c


def _duckdb_terms(con, query: str) -> list[str]:
    rows = con.execute(
        f"SELECT DISTINCT stem(unnest({fts.SCHEMA}.tokenize(?)), 'porter') AS t ORDER BY t", [query]
    ).fetchall()
    return [t for (t,) in rows if t is not None]


def _locomo_words() -> list[str]:
    data = json.loads(require_locomo().read_text(encoding="utf-8"))
    words: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            words.update(w for w in re.split(r"\s+", node) if w)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return sorted(words)


def _duckdb_terms_many(con, queries: list[str]) -> dict[str, list[str]]:
    rows = con.execute(
        f"SELECT q, list_sort(list_distinct(list_transform({fts.SCHEMA}.tokenize(q), "
        "x -> stem(x, 'porter')))) FROM unnest(?::VARCHAR[]) AS t(q)",
        [queries],
    ).fetchall()
    return {q: list(terms) for q, terms in rows}


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_every_locomo_word_stems_as_duckdb_does(con) -> None:
    words = [w for w in _locomo_words() if fts.local_query_terms(w) is not None]
    assert len(words) > 5000  # non-ASCII words are derived by the database and not compared here
    want = _duckdb_terms_many(con, words)
    assert len(want) == len(words)
    for w in words:
        assert fts.local_query_terms(w) == want[w], w
    # Whole questions, with punctuation and digits, as recall receives them.
    sentence = " ".join(w for w in words[::7] if w.isascii())
    assert fts.local_query_terms(sentence) == _duckdb_terms(con, sentence)


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=string.printable, max_size=60))
def test_generated_ascii_queries_match_duckdb(con, query: str) -> None:
    local = fts.local_query_terms(query)
    if "\x0b" in query:
        assert local is None  # RE2's \s and Python's disagree on \v: leave it to the database
    else:
        assert local == _duckdb_terms(con, query)


@pytest.mark.parametrize(
    "query", ["café au lait", "naïve", "Straße", "İstanbul", "emoji 🙂", "tab\tand\vvertical"]
)
def test_non_ascii_queries_go_to_the_database(con, query: str) -> None:
    assert fts.local_query_terms(query) is None
    assert fts.query_terms(con, query) == _duckdb_terms(con, query)


def test_cached_terms_cannot_be_mutated_by_a_caller() -> None:
    first = fts.local_query_terms("lighthouse keepers")
    assert first == ["keeper", "lighthous"]
    first.append("x")
    assert fts.local_query_terms("lighthouse keepers") == ["keeper", "lighthous"]


@pytest.mark.parametrize(
    ("anchor", "day", "matches"),
    [
        ("2023", "2023-05-08", True),
        ("2023-05", "2023-05-08", True),
        ("2023-05-08", "2023-05-08", True),
        ("2023-05-09", "2023-05-08", False),
        ("2023-06", "2023-05-08", False),
        ("2022", "2023-05-08", False),
        ("2023", "", False),  # a record without a day
        ("twenty", "2023-05-08", False),  # not a date anchor
        ("2023", "not a day", False),
    ],
)
def test_session_date_anchor_matches_the_records_own_day(anchor: str, day: str, matches: bool) -> None:
    assert scoring.session_date_matches(anchor, day) is matches


def _tuned(
    numeric: tuple[str, ...], months: tuple[str, ...], text: str, day: str | None, dates: bool
) -> float:
    anchors = scoring.QueryAnchors(numeric=numeric, names=())
    terms = scoring.record_terms(text)
    return scoring.tuned_anchor_bonus(
        anchors, months, terms, day, numeric_bonus=0.1, name_bonus=0.2, session_dates=dates
    )


@pytest.mark.parametrize(
    ("numeric", "months", "text", "day", "dates", "share"),
    [
        # the session day stands in for a date written in the text, only with session dates on
        (("2023",), ("05",), "nothing here", "2023-05-08", True, 1.0),
        (("2023",), ("05",), "nothing here", "2023-05-08", False, 0.0),  # months do not count then
        (("2023",), ("05",), "in 2023", "2023-05-08", False, 1.0),  # nor share the bonus
        (("2023",), ("05",), "nothing here", None, True, 0.0),
        (("2023",), (), "in 2023 we moved", "2021-01-01", True, 1.0),  # the text alone is enough
        (("2023", "42"), (), "42 apples in 2023", "2021-01-01", False, 1.0),  # each anchor counts once
        (("2023", "42"), (), "42 apples", "2021-01-01", False, 0.5),
        # a query month matches the day's month, the month's name in the text, or a date in the text
        ((), ("05",), "we met in May", "2021-01-01", True, 1.0),
        ((), ("05",), "we met in June", "2021-01-01", True, 0.0),
        ((), ("05",), "on 2022-05", "2021-01-01", True, 1.0),
        ((), ("05",), "on 2022-05-03", "2021-01-01", True, 1.0),
        ((), ("05",), "on 2022-07", "2021-01-01", True, 0.0),
        ((), ("05", "06"), "in May", "2021-06-02", True, 1.0),
        ((), ("05", "06"), "in July", "2021-06-02", True, 0.5),
    ],
)
def test_REC27_tuned_anchor_bonus_counts_session_dates_and_months(
    numeric: tuple[str, ...], months: tuple[str, ...], text: str, day: str | None, dates: bool, share: float
) -> None:
    assert _tuned(numeric, months, text, day, dates) == pytest.approx(0.1 * share)
