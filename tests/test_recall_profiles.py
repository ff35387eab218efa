"""Recall profiles: the reference contract's exact constants, the tuned profile, default resolution."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tempomem.recall import profiles, scoring
from tempomem.recall.embedding import EmbeddingIdentity, LocalMiniLMEmbedder, make_embedder
from tempomem.recall.index import MemoryIndex
from tempomem.recall.profiles import (
    DEFAULT_PROFILE,
    REFERENCE,
    TUNED,
    TUNED_MINILM,
    RecallProfile,
    default_profile,
    resolve_profile,
)
from tempomem.recall.search import Candidate, rank
from tempomem.storage.markdown import Bullet, append_bullets


def cand(
    id: str,
    text: str,
    *,
    cosine: float | None,
    bm25_rank: int | None = None,
    bm25_score: float | None = None,
    vector_rank: int | None = None,
    day: str = "2026-03-01",
    seq: int | None = None,
) -> Candidate:
    row: dict[str, object] = {
        "day": day,
        "recorded": f"{day}T10:00:00.000Z",
        "type": "note",
        "status": "open",
    }
    if seq is not None:
        row["seq"] = seq
    return Candidate(
        id=id,
        text=text,
        row=row,
        bm25_rank=bm25_rank,
        bm25_score=bm25_score,
        vector_rank=vector_rank,
        cosine=cosine,
    )


def test_reference_profile_exact_constants() -> None:
    assert REFERENCE.ranker == "reference"
    assert REFERENCE.semantic_floor == 0.5
    assert REFERENCE.numeric_anchor_bonus == 0.15
    assert REFERENCE.name_anchor_bonus == 0.08
    assert REFERENCE.rrf_weight == 1e-4 and REFERENCE.rrf_k == 60
    assert REFERENCE.salience_weight == 1e-5
    assert REFERENCE.lexical_weight == 0.0 and REFERENCE.temporal_bonus == 0.0
    assert not REFERENCE.session_date_anchors
    assert REFERENCE.pool == 50


def test_reference_cosine_below_floor_is_no_semantic_evidence() -> None:
    # 0.49 contributes nothing; only the RRF tie-break remains.
    hits = rank(
        "plain words",
        [cand("a", "nothing shared", cosine=0.49, vector_rank=1)],
        limit=1,
        profile=REFERENCE,
        hybrid=True,
    )
    assert hits[0].score == pytest.approx(1e-4 / 61, abs=1e-12)
    hits = rank(
        "plain words",
        [cand("a", "nothing shared", cosine=0.5, vector_rank=1)],
        limit=1,
        profile=REFERENCE,
        hybrid=True,
    )
    assert hits[0].score == pytest.approx(0.5 + 1e-4 / 61, abs=1e-12)


def test_reference_date_anchor_exact_match_only() -> None:
    pool = [
        cand("right", "Zoe was born on 1988-11-02.", cosine=0.6, vector_rank=2),
        cand("wrong", "Sam was born on 1988-12-02.", cosine=0.6, vector_rank=1),
    ]
    hits = {h.id: h for h in rank("born 1988-11-02", pool, limit=2, profile=REFERENCE, hybrid=True)}
    assert hits["right"].score == pytest.approx(0.6 + 0.15 + 1e-4 / 62, abs=1e-12)
    assert hits["wrong"].score == pytest.approx(0.6 + 1e-4 / 61, abs=1e-12)
    assert next(iter(hits)) == "right"


def test_reference_name_anchor_bonus_is_shared() -> None:
    # Two name anchors (Morgan, Priya: both used as names by the records): one matched = half of 0.08.
    pool = [
        cand("m", "Lunch with Morgan at noon.", cosine=0.7),
        cand("p", "Dinner with Priya and Morgan.", cosine=0.7),
    ]
    hits = {h.id: h for h in rank("Did Morgan meet Priya?", pool, limit=2, profile=REFERENCE, hybrid=True)}
    assert hits["m"].score == pytest.approx(0.7 + 0.04, abs=1e-12)
    assert hits["p"].score == pytest.approx(0.7 + 0.08, abs=1e-12)
    # And the reference ranking is exactly scoring.hybrid_score (AMB-31).
    anchors = scoring.query_anchors("Did Morgan meet Priya?", scoring.name_vocabulary(c.text for c in pool))
    expected = scoring.hybrid_score(
        cosine=0.7,
        anchors=anchors,
        terms=scoring.record_terms(pool[0].text),
        query_words=set(),
        bm25_rank=None,
        vector_rank=None,
    )
    assert hits["m"].score == expected


def test_tuned_lexical_term_is_bounded_and_session_dates_anchor() -> None:
    pool = [
        cand(
            "a",
            "[8 May 2023] Ann: we adopted a cat",
            cosine=0.80,
            bm25_rank=1,
            bm25_score=9.0,
            day="2023-05-08",
        ),
        cand(
            "b", "[9 June 2023] Ann: a dog maybe", cosine=0.81, bm25_rank=2, bm25_score=3.0, day="2023-06-09"
        ),
    ]
    prof = RecallProfile(
        name="t",
        semantic_floor=0.0,
        lexical_weight=0.1,
        numeric_anchor_bonus=0.0,
        name_anchor_bonus=0.0,
        rrf_weight=0.0,
    )
    hits = {h.id: h.score for h in rank("adopted cat", pool, limit=2, profile=prof, hybrid=True)}
    assert hits["a"] == pytest.approx(0.80 + 0.1) and hits["b"] == pytest.approx(0.81 + 0.1 * 3 / 9)
    dated = prof.model_copy(
        update={"lexical_weight": 0.0, "numeric_anchor_bonus": 0.05, "session_date_anchors": True}
    )
    hits = {
        h.id: h.score for h in rank("What happened in May 2023?", pool, limit=2, profile=dated, hybrid=True)
    }
    assert hits["a"] == pytest.approx(0.80 + 0.05)  # year and month both match the record's day
    assert hits["b"] == pytest.approx(0.81 + 0.025)  # only the year does


def test_tuned_temporal_questions_prefer_time_evidence() -> None:
    pool = [
        cand("plain", "Ann: the support group was so powerful", cosine=0.80),
        cand("timed", "Ann: I went to the support group yesterday", cosine=0.79),
    ]
    prof = RecallProfile(name="t", semantic_floor=0.0, temporal_bonus=0.02, rrf_weight=0.0)
    assert (
        rank("When did Ann go to the support group?", pool, limit=1, profile=prof, hybrid=True)[0].id
        == "timed"
    )
    assert rank("Did Ann like the support group?", pool, limit=1, profile=prof, hybrid=True)[0].id == "plain"
    assert scoring.is_temporal_query("What year did she move?") and not scoring.is_temporal_query(
        "What is it?"
    )


def test_resolve_profile() -> None:
    assert resolve_profile("reference", None) is REFERENCE
    assert resolve_profile(TUNED, None) is TUNED
    with pytest.raises(ValueError):
        resolve_profile("nope", None)
    calibrated = (
        EmbeddingIdentity(*DEFAULT_PROFILE.embedder.split("/"), 384) if DEFAULT_PROFILE.embedder else None
    )
    assert resolve_profile(None, calibrated) is DEFAULT_PROFILE
    # A configured provider the default was not calibrated for keeps the reference contract.
    assert resolve_profile(None, EmbeddingIdentity("ollama", "nomic-embed-text", 768)) is (
        DEFAULT_PROFILE if DEFAULT_PROFILE.embedder is None else REFERENCE
    )


def test_default_profile_by_embedder() -> None:
    # The shipped default embedder (embeddings.provider "local", MiniLM) ranks with TUNED_MINILM…
    assert default_profile(make_embedder("local").identity) is TUNED_MINILM
    assert default_profile(make_embedder("local", "all-MiniLM-L6-v2", 384).identity) is TUNED_MINILM
    assert DEFAULT_PROFILE is TUNED_MINILM and DEFAULT_PROFILE.ranker == "tuned"
    # …the embedded e5-small with TUNED…
    assert default_profile(make_embedder("local-e5").identity) is TUNED
    # …and every configured HTTP provider, an unknown embedder and Lite keep the reference contract.
    for identity in (
        make_embedder("ollama", "nomic-embed-text", 768).identity,
        make_embedder("lmstudio", "text-embedding-nomic-embed-text-v1.5", 768).identity,
        make_embedder("openai", "text-embedding-3-small", 1536).identity,
        EmbeddingIdentity("local", "some-other-model", 384),  # same provider, another model
        EmbeddingIdentity("ollama", "all-MiniLM-L6-v2-int8", 384),  # same model name, another provider
        None,
    ):
        assert default_profile(identity) is REFERENCE, identity
        assert resolve_profile(None, identity) is REFERENCE
    # An explicit profile always wins, by object or by name.
    assert resolve_profile("reference", make_embedder("local").identity) is REFERENCE
    assert resolve_profile("tuned-minilm", None) is TUNED_MINILM


def test_tuned_minilm_levers() -> None:
    # Guard the measured constants (README table): changing them needs a new bench run.
    assert TUNED_MINILM.embedder == profiles.MINILM_EMBEDDER and TUNED.embedder == profiles.E5_EMBEDDER
    assert (TUNED_MINILM.lexical_weight, TUNED_MINILM.neighbour_weights()) == (0.5, (0.5, 0.3))
    assert (TUNED_MINILM.question_penalty, TUNED_MINILM.speaker_bonus) == (0.1, 0.4)
    assert (TUNED_MINILM.context_seeds, TUNED.context_seeds, REFERENCE.context_seeds) == (20, 0, 0)
    assert (TUNED_MINILM.temporal_bonus, TUNED.temporal_bonus) == (0.04, 0.02)
    assert TUNED.neighbour_weights() == (0.4, 0.2) and REFERENCE.neighbour_weights() == ()
    assert TUNED_MINILM.semantic_floor == 0.0 and TUNED_MINILM.session_date_anchors


def test_neighbour_context_by_distance() -> None:
    # a (seq 1) matches the question; c (seq 3) is two lines later; z is on another day.
    pool = [
        cand("a", "Ann: did you ever go camping?", cosine=0.9, seq=1),
        cand("b", "Ben: oh yes, many times", cosine=0.5, seq=2),
        cand("c", "Ann: we saw the meteor shower last year", cosine=0.5, seq=3),
        cand("z", "Ann: unrelated", cosine=0.5, seq=3, day="2026-03-02"),
    ]
    scored = [(float(c.cosine or 0.0), c) for c in pool]
    one = {c.id: s for s, c in scoring.with_neighbours(scored, (0.4,))}
    assert one == pytest.approx({"a": 0.9, "b": 0.5 + 0.4 * 0.4, "c": 0.5, "z": 0.5})
    two = {c.id: s for s, c in scoring.with_neighbours(scored, (0.4, 0.2))}
    assert two == pytest.approx({"a": 0.9, "b": 0.5 + 0.4 * 0.4, "c": 0.5 + 0.2 * 0.4, "z": 0.5})
    assert scoring.with_neighbours(scored, ()) == scored == scoring.with_neighbours(scored, (0.0, 0.0))
    # And through rank(): the distance-2 weight of a profile is applied (recall.search uses it).
    prof = RecallProfile(name="t", semantic_floor=0.0, rrf_weight=0.0, neighbour_weight=0.4)
    ranked = {h.id: h.score for h in rank("camping", pool, limit=4, profile=prof, hybrid=True)}
    assert ranked["c"] == pytest.approx(0.5)
    prof2 = prof.model_copy(update={"neighbour2_weight": 0.2})
    ranked = {h.id: h.score for h in rank("camping", pool, limit=4, profile=prof2, hybrid=True)}
    assert ranked["c"] == pytest.approx(0.5 + 0.2 * 0.4) and ranked["z"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------------
# through a real index


class KeyedEmbedder:
    """Wraps MiniLM under the identity DEFAULT_PROFILE was calibrated for, counting profile use."""

    def __init__(self, inner: Any, identity: EmbeddingIdentity) -> None:
        self.inner = inner
        self.identity = identity

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)


def _store(tmp_path: Path) -> Path:
    lines = {
        "cat": "[8 May 2023] Ann: we adopted a grey cat called Pixel last week",
        "bike": "[8 May 2023] Ben: my bike got a flat tyre on the way to work",
        "cake": "[9 June 2023] Ann: I baked a lemon cake for Ben's birthday",
        "move": "[9 June 2023] Ben: we are moving to Lisbon in September",
        "gym": "[9 June 2023] Ann: the climbing gym opened a new bouldering wall",
    }
    for i, (rid, text) in enumerate(lines.items()):
        day = "2023-05-08" if i < 2 else "2023-06-09"
        bullet = Bullet(
            signifier="–", text=text, id=rid, type="note", status="open", recorded=f"{day}T10:00:00.000Z"
        )
        append_bullets(tmp_path / "daily" / f"{day}.md", day, [bullet])
    return tmp_path


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


def test_tuned_ranks_obvious_line_first_and_default_is_used(
    tmp_path: Path, minilm: LocalMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    ident = (
        EmbeddingIdentity(*DEFAULT_PROFILE.embedder.split("/"), 384)
        if DEFAULT_PROFILE.embedder
        else minilm.identity
    )
    idx = MemoryIndex(store, KeyedEmbedder(minilm, ident))  # type: ignore[arg-type]
    idx.rebuild()
    for query, expected in {
        "What is the name of Ann's cat?": "cat",
        "When is Ben moving to Lisbon?": "move",
        "What did Ann bake for the birthday?": "cake",
    }.items():
        assert idx.search(query, limit=3, profile=TUNED)[0].id == expected
    # No profile = DEFAULT_PROFILE: the same ranking and scores as passing it explicitly.
    query = "What did Ann bake for the birthday?"
    plain = [(h.id, h.score) for h in idx.search(query, limit=5)]
    assert plain == [(h.id, h.score) for h in idx.search(query, limit=5, profile=DEFAULT_PROFILE)]
    # …and the default really is consulted at call time.
    marker = RecallProfile(name="marker", ranker="bm25", embedder=DEFAULT_PROFILE.embedder)
    monkeypatch.setitem(profiles.DEFAULT_PROFILES, profiles.MINILM_EMBEDDER, marker)
    assert all(h.mode == "bm25" for h in idx.search(query, limit=5))


def test_minilm_index_defaults_to_tuned_minilm(tmp_path: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(_store(tmp_path), minilm)
    idx.rebuild()
    query = "When did Ben get a flat tyre on his bike?"
    plain = [(h.id, h.score) for h in idx.search(query, limit=5)]
    assert plain == [(h.id, h.score) for h in idx.search(query, limit=5, profile=TUNED_MINILM)]
    assert plain != [(h.id, h.score) for h in idx.search(query, limit=5, profile=REFERENCE)]
    assert plain[0][0] == "bike"
    # Hits name the profile that scored them, so shaping applies its floors (test_profile_floors.py).
    assert {h.profile for h in idx.search(query, limit=5)} == {TUNED_MINILM}
    assert {h.profile for h in idx.search(query, limit=5, profile="reference")} == {REFERENCE}


def test_profile_choice_never_changes_which_rows_exist(tmp_path: Path, minilm: LocalMiniLMEmbedder) -> None:
    idx = MemoryIndex(_store(tmp_path), minilm)
    idx.rebuild()
    for query in ("Ann cat", "What happened in June 2023?", "When did Ben get a flat tyre?", "zzz"):
        pools = {
            name: {h.id for h in idx.search(query, limit=50, profile=prof)}
            for name, prof in (("reference", REFERENCE), ("tuned", TUNED), ("default", None))
        }
        assert pools["reference"] == pools["tuned"] == pools["default"], (query, pools)
        for hits in (idx.search(query, limit=50, profile=p) for p in (REFERENCE, TUNED)):
            assert len({h.id for h in hits}) == len(hits)
    # Lite ignores the profile's hybrid levers: lexical mode for every profile.
    lite = MemoryIndex(tmp_path, None)
    assert {h.mode for p in (REFERENCE, TUNED) for h in lite.search("Ann cat", profile=p)} == {"lexical"}


def test_embedder_keys_are_stable() -> None:
    # Guard the calibration key format the default resolution relies on.
    assert (
        profiles.embedder_key(EmbeddingIdentity("local", "all-MiniLM-L6-v2-int8", 384))
        == profiles.MINILM_EMBEDDER
    )
    assert profiles.embedder_key(EmbeddingIdentity("local-e5", "multilingual-e5-small-q4", 384)) == (
        profiles.E5_EMBEDDER
    )


def test_single_retriever_profiles_rank_by_their_own_score_alone() -> None:
    """bm25-only and vector-only (bench baselines): their retriever's order, ties by id, what it did not
    return left out, the score its own, the mode its name; Lite (no vectors) makes bm25-only lexical."""
    pool = [
        cand("c", "third", cosine=0.9, bm25_score=None),
        cand("b", "tie", cosine=0.2, bm25_score=2.0, bm25_rank=2),
        cand("a", "tie", cosine=None, bm25_score=2.0, bm25_rank=1),
        cand("d", "top", cosine=0.2, bm25_score=5.5, bm25_rank=3),
    ]
    bm25 = rank("q", pool, limit=3, profile=profiles.BM25_ONLY, hybrid=True)
    assert [(h.id, h.score, h.mode) for h in bm25] == [
        ("d", 5.5, "bm25"),
        ("a", 2.0, "bm25"),
        ("b", 2.0, "bm25"),
    ]
    assert [h.id for h in rank("q", pool, limit=2, profile=profiles.BM25_ONLY, hybrid=False)] == ["d", "a"]
    vector = rank("q", pool, limit=5, profile=profiles.VECTOR_ONLY, hybrid=True)
    assert [(h.id, h.score, h.mode) for h in vector] == [
        ("c", 0.9, "vector"),
        ("b", 0.2, "vector"),
        ("d", 0.2, "vector"),
    ]
    assert vector[0].day == "2026-03-01" and vector[0].cosine == 0.9


def test_every_profile_describes_its_constants() -> None:
    """``describe`` (the bench and `tempomem recall --explain` header) names the profile, its ranker and
    the constants that ranker uses."""
    for profile in profiles.PROFILES.values():
        text = profile.describe()
        assert text.startswith(f"{profile.name} ({profile.ranker}")
    assert profiles.BM25_ONLY.describe() == "bm25-only (bm25)"
    custom = RecallProfile(
        name="x",
        embedder="local/e",
        semantic_floor=0.4,
        lexical_weight=0.2,
        numeric_anchor_bonus=0.1,
        name_anchor_bonus=0.05,
        session_date_anchors=True,
        temporal_bonus=0.3,
        neighbour_weight=0.25,
        neighbour2_weight=0.125,
    )
    assert custom.describe() == (
        "x (tuned, embedder local/e, floor 0.4, lexical 0.2, anchors 0.1/0.05, session dates on, "
        "temporal 0.3, neighbours 0.25/0.125)"
    )
    assert custom.model_copy(update={"context_seeds": 7}).describe() == (
        "x (tuned, embedder local/e, floor 0.4, lexical 0.2, anchors 0.1/0.05, session dates on, "
        "temporal 0.3, neighbours 0.25/0.125, context lines of the top 7)"
    )
    plain = RecallProfile(name="y", semantic_floor=0.5, numeric_anchor_bonus=0.15, name_anchor_bonus=0.08)
    assert plain.describe() == (
        "y (tuned, floor 0.5, lexical 0.0, anchors 0.15/0.08, session dates off, temporal 0.0, neighbours 0)"
    )


# --------------------------------------------------------------------------------------------------
# The tuned ranker's score, lever by lever, on a profile where every lever is on (recall.profiles).

ALL_LEVERS = profiles.RecallProfile(
    name="all-levers", ranker="tuned", semantic_floor=0.30, numeric_anchor_bonus=0.10,
    name_anchor_bonus=0.07, rrf_weight=0.01, rrf_k=7, salience_weight=0.02, lexical_weight=0.20,
    session_date_anchors=True, temporal_bonus=0.05,
)  # fmt: skip


def _candidate(cid: str, text: str, day: str, **kw: Any) -> Candidate:
    return Candidate(id=cid, text=text, row={"day": day, "recorded": f"{day}T10:00:00.000Z"}, **kw)


def _expected_tuned(query: str, pool: Sequence[Candidate], p: profiles.RecallProfile) -> dict[str, float]:
    """The docstring's formula, term by term, from the scoring helpers."""
    vocabulary = scoring.name_vocabulary([c.text for c in pool], [e for c in pool for e in c.entities])
    anchors = scoring.query_anchors(query, vocabulary)
    months = scoring.month_anchors(query)
    best = max((c.bm25_score for c in pool if c.bm25_score is not None), default=0.0)
    out = {}
    for c in pool:
        terms = scoring.record_terms(c.text, c.entities)
        if c.cosine is None:
            semantic = scoring.lexical_overlap(scoring.word_tokens(query), terms.words)
        else:
            semantic = c.cosine if c.cosine >= p.semantic_floor else 0.0
        lexical = (
            p.lexical_weight * max(0.0, c.bm25_score) / best if c.bm25_score is not None and best else 0.0
        )
        anchor = scoring.tuned_anchor_bonus(
            anchors, months, terms, str(c.row["day"]), numeric_bonus=p.numeric_anchor_bonus,
            name_bonus=p.name_anchor_bonus, session_dates=True,
        )  # fmt: skip
        timing = (
            p.temporal_bonus
            if scoring.is_temporal_query(query) and scoring.has_time_evidence(c.text, terms)
            else 0
        )
        ties = p.rrf_weight * scoring.rrf(c.bm25_rank, c.vector_rank, k=p.rrf_k)
        out[c.id] = semantic + lexical + anchor + timing + ties + p.salience_weight * c.salience
    return out


def _tuned_pool() -> list[Candidate]:
    return [
        _candidate("at-floor", "Caroline hiked", "2023-05-08", cosine=0.30, bm25_score=4.0, bm25_rank=1),
        _candidate("below", "Caroline painted yesterday", "2023-06-01", cosine=0.29, vector_rank=2),
        _candidate("no-vector", "when did melanie paint the lake", "2022-01-02", bm25_score=2.0, bm25_rank=2),
        _candidate(
            "entity", "She painted it last week", "2023-05-20", cosine=0.50, vector_rank=1, bm25_score=-1.0,
            bm25_rank=3, entities=("person:melanie",), salience=0.5,
        ),
        _candidate("plain", "A lake in 2023", "2021-07-07", cosine=0.45, vector_rank=3),
    ]  # fmt: skip


def test_REC24_REC27_the_tuned_score_is_the_documented_sum_of_its_levers() -> None:
    from tempomem.recall.search import rank_tuned

    for query in ("When did caroline and melanie paint the lake in May 2023?", "lake in June"):
        pool = _tuned_pool()
        got = {h.id: h.score for h in rank_tuned(query, pool, limit=10, profile=ALL_LEVERS)}
        assert got == pytest.approx(_expected_tuned(query, pool, ALL_LEVERS), abs=1e-12), query
    # every lever moved some score: a ranker that dropped one would differ above
    query = "When did caroline and melanie paint the lake in May 2023?"
    base = _expected_tuned(query, _tuned_pool(), ALL_LEVERS)
    for lever, off in [
        ("name_anchor_bonus", 0.0), ("numeric_anchor_bonus", 0.0), ("temporal_bonus", 0.0),
        ("rrf_weight", 0.0), ("salience_weight", 0.0), ("lexical_weight", 0.0),
    ]:  # fmt: skip
        other = _expected_tuned(query, _tuned_pool(), ALL_LEVERS.model_copy(update={lever: off}))
        assert other != base, lever


def test_REC24_a_pool_whose_best_bm25_is_zero_adds_no_lexical_share() -> None:
    from tempomem.recall.search import rank_tuned

    pool = [_candidate("a", "x", "2023-01-01", cosine=0.5, bm25_score=0.0, bm25_rank=1)]
    assert [h.score for h in rank_tuned("x", pool, limit=1, profile=ALL_LEVERS)] == pytest.approx(
        [0.5 + ALL_LEVERS.rrf_weight / (ALL_LEVERS.rrf_k + 1)]
    )


# --------------------------------------------------------------------------------------------------
# Context lines (issue #17): the lines next to the best candidates join the pool.

CONTEXT = profiles.RecallProfile(
    name="context", ranker="tuned", semantic_floor=0.0, rrf_weight=0.0, lexical_weight=0.5,
    neighbour_weight=0.5, neighbour2_weight=0.25, context_seeds=4,
)  # fmt: skip
D = "2026-03-01"


def _context_pool() -> list[Candidate]:
    return [
        cand("a", "Nate: what genre is your first screenplay?", cosine=0.9, bm25_score=4.0, seq=10),
        cand("b", "Joanna: my screenplay is finished", cosine=0.8, bm25_score=2.0, bm25_rank=2, seq=14),
        cand("n", "Nate: I write too", cosine=0.99),  # no position (seq): lends no context lines
        cand("d", "Nate: cool", cosine=0.1, seq=11),
        cand("c", "Joanna: I like tea", cosine=0.85, seq=2),
        cand("e", "Joanna: screenplay", cosine=0.8, seq=5, day="2026-03-02"),
    ]  # fmt: skip


class Lines:
    """The index's side of ``rank``'s ``context``: answers the positions it holds, records each call."""

    def __init__(self, lines: Sequence[Candidate]) -> None:
        self.lines = {(str(c.row["day"]), c.row["seq"]): c for c in lines}
        self.calls: list[list[tuple[str, int]]] = []

    def __call__(self, positions: Sequence[tuple[str, int]]) -> list[Candidate]:
        self.calls.append(list(positions))
        return [self.lines[p] for p in positions if p in self.lines]


def test_context_lines_of_the_best_candidates_join_the_pool_scored_like_the_rest() -> None:
    reply = cand("r", "Joanna: It's a mix of drama and romance!", cosine=0.3, bm25_score=1.0, seq=12)
    other = cand("o", "Joanna: thanks", cosine=0.25, seq=13)
    lines = Lines([reply, other, cand("far", "Nate: far away", cosine=0.9, seq=17)])
    query = "What genre is Joanna's first screenplay?"
    hits = rank(query, _context_pool(), limit=10, profile=CONTEXT, hybrid=True, context=lines)
    # Seeds by score before neighbour context: a (0.9 + 0.5), b (0.8 + 0.25 + 0.08 for "Joanna"),
    # n (0.99, no position), c (0.85 + 0.08), not e (0.88). Positions seed by seed, nearest first, each
    # once (12 is near a and b); a held one (d at 11) and seq 0 or below never asked.
    assert lines.calls == [[(D, 9), (D, 8), (D, 12), (D, 13), (D, 15), (D, 16), (D, 1), (D, 3), (D, 4)]]
    pool = [*_context_pool(), reply, other]
    base = {c.id: s for c, s in zip(pool, _expected_scores(query, pool), strict=True)}
    want = {c.id: s for s, c in scoring.with_neighbours([(base[c.id], c) for c in pool], (0.5, 0.25))}
    assert {h.id: h.score for h in hits} == pytest.approx(want, abs=1e-12)
    assert {"r", "o"} <= {h.id for h in hits} and "far" not in {h.id for h in hits}
    # BM25 of a context line counts against the pool's best, as a retrieved line's does.
    assert base["r"] == pytest.approx(0.3 + 0.5 * 1.0 / 4.0 + CONTEXT.name_anchor_bonus)  # "Joanna"


def _expected_scores(query: str, pool: Sequence[Candidate]) -> list[float]:
    got = rank(query, pool, limit=len(pool), profile=CONTEXT.model_copy(update={"neighbour_weight": 0.0,
               "neighbour2_weight": 0.0}), hybrid=True)  # fmt: skip
    by_id = {h.id: h.score for h in got}
    return [by_id[c.id] for c in pool]


def test_no_context_lines_without_seeds_neighbour_weights_or_a_hybrid_pool() -> None:
    lines = Lines([cand("r", "Joanna: drama and romance", cosine=0.3, seq=12)])
    query = "What genre is Joanna's first screenplay?"
    for profile, hybrid in (
        (CONTEXT.model_copy(update={"context_seeds": 0}), True),
        (CONTEXT.model_copy(update={"neighbour_weight": 0.0, "neighbour2_weight": 0.0}), True),
        (CONTEXT, False),
        (REFERENCE, True),
    ):
        hits = rank(query, _context_pool(), limit=10, profile=profile, hybrid=hybrid, context=lines)
        assert "r" not in {h.id for h in hits}
    assert lines.calls == []
    # One seed, one distance: only the best candidate's free direct neighbour is asked for.
    one = CONTEXT.model_copy(update={"context_seeds": 1, "neighbour2_weight": 0.0})
    rank(query, _context_pool(), limit=10, profile=one, hybrid=True, context=lines)
    assert lines.calls == [[(D, 9)]]


# ---------------------------------------------------------------------------------------------------
# question lines (issue #17)


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("[8 May 2023] Caroline: What pet do you have?", True),
        ("Nate: what genre is it?  ", True),
        ('Ann said: "are you coming?"', True),
        ("(did she go?)", True),
        ("Melanie: I have a cat named Oliver.", False),
        ("Why? Because it was raining.", False),  # it asks, then tells: the line ends telling
        ("", False),
    ],
)
def test_a_question_line_is_one_that_ends_by_asking(text: str, asks: bool) -> None:
    assert scoring.is_question_line(text) is asks


def test_a_question_line_lends_its_full_match_to_its_reply_but_ranks_below_it() -> None:
    # "What pets does Melanie have?": Caroline's question matches best; Melanie's reply is the evidence.
    pool = [
        cand("q", "Caroline: That's so nice! What pet do you have?", cosine=0.8, bm25_score=2.0, seq=1),
        cand("r", "Melanie: A cat and a dog, Luna and Oliver.", cosine=0.7, bm25_score=1.8, seq=2),
        cand("x", "Melanie: I went running today.", cosine=0.55, seq=7),
    ]
    query = "What pets does Melanie have?"
    asks = TUNED_MINILM.model_copy(update={"speaker_bonus": 0.0})  # this lever alone
    plain = asks.model_copy(update={"question_penalty": 0.0})
    before = {h.id: h for h in rank(query, pool, limit=3, profile=plain, hybrid=True)}
    after = {h.id: h for h in rank(query, pool, limit=3, profile=asks, hybrid=True)}
    assert TUNED_MINILM.question_penalty == 0.1
    # Without the penalty the question ranks first; with it, the reply does.
    assert before["q"].score > before["r"].score and after["r"].score > after["q"].score
    # Only the question line moves, by exactly the penalty; the reply keeps the boost the question's
    # whole match lends it (neighbour context reads the scores before the penalty).
    assert after["q"].score == pytest.approx(before["q"].score - 0.1)
    assert after["r"].score == pytest.approx(before["r"].score)
    assert after["x"].score == pytest.approx(before["x"].score)
    # The evidence the floors compare is the question line's own match, unpenalised.
    assert after["q"].evidence == pytest.approx(before["q"].evidence)
    # The reference contract and the e5 profile (not measured here) do not rank questions lower.
    assert REFERENCE.question_penalty == 0.0 and TUNED.question_penalty == 0.0
    assert "question lines -0.1" in TUNED_MINILM.describe()


# ---------------------------------------------------------------------------------------------------
# named speakers (issue #17)


@pytest.mark.parametrize(
    ("text", "speaker"),
    [
        ("[8 May 2023] Caroline: I went to a support group", "Caroline"),
        ("Melanie: I have a cat", "Melanie"),
        ("Dr. Jane Smith: take two", "Dr. Jane Smith"),
        ("Zoë: hallo", "Zoë"),
        ("note: lower-case is no speaker", None),
        ("12: numbers are no speaker", None),
        ("A line with no prefix", None),
        ("Four Words Are Too: many", None),
        ("Melanie:no space after the colon", None),
    ],
)
def test_the_speaker_is_the_capitalised_name_a_line_starts_with(text: str, speaker: str | None) -> None:
    assert scoring.line_speaker(text) == speaker


def test_a_named_speaker_is_matched_on_a_name_word_not_a_title() -> None:
    asked = scoring.word_tokens("What did Jane say about Melanie's dog?")
    assert scoring.spoken_by_named("Dr. Jane Smith: walk it twice a day", asked)
    assert scoring.spoken_by_named("[20 July 2023] Melanie: he loves the beach", asked)
    assert not scoring.spoken_by_named("Dr. Who: not named", asked)  # "dr" is no name word
    assert not scoring.spoken_by_named("Caroline: Melanie's dog is cute", asked)  # named, not speaking


def test_the_named_speakers_lines_rank_higher_and_floors_see_the_same_evidence() -> None:
    query = "What pets does Melanie have?"
    pool = [
        cand("c", "Caroline: my neighbour has pets, a dog and two cats", cosine=0.8, bm25_score=2.0, seq=1),
        cand("m", "Melanie: Luna and Oliver keep me busy", cosine=0.75, bm25_score=1.5, seq=9),
        cand("o", "Oscar: unrelated", cosine=0.2, seq=20),
    ]
    plain = TUNED_MINILM.model_copy(update={"speaker_bonus": 0.0})
    before = {h.id: h for h in rank(query, pool, limit=3, profile=plain, hybrid=True)}
    after = {h.id: h for h in rank(query, pool, limit=3, profile=TUNED_MINILM, hybrid=True)}
    assert TUNED_MINILM.speaker_bonus == 0.4
    assert before["c"].score > before["m"].score and after["m"].score > after["c"].score
    assert after["m"].score == pytest.approx(before["m"].score + 0.4)
    assert after["c"].score == pytest.approx(before["c"].score)
    assert after["m"].evidence == pytest.approx(before["m"].evidence)
    # A query naming both speakers lifts both: their order is what it was without the bonus.
    both = [h.id for h in rank("Do Caroline and Melanie have pets?", pool, limit=3, profile=TUNED_MINILM,
                                hybrid=True)]  # fmt: skip
    assert both == [h.id for h in rank("Do Caroline and Melanie have pets?", pool, limit=3, profile=plain,
                                       hybrid=True)]  # fmt: skip
    assert REFERENCE.speaker_bonus == 0.0 and TUNED.speaker_bonus == 0.0
