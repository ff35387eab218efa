"""Pure scoring functions for recall (REC-24..REC-33, AMB-31, AMB-39).

Hybrid (embedding-first) score::

    semantic = cos if cos >= 0.5 else 0                      (REC-24, REC-25)
    bonus    = 0.15 * matched_numeric / numeric_anchors       (REC-27, REC-28)
             + 0.08 * matched_names   / name_anchors
    score    = semantic + bonus + 1e-4 * RRF(k=60) + 1e-5 * salience   (REC-31)

A record still waiting for its vector uses lexical term overlap as its evidence (REC-32).
Lexical-only score (Lite, embedding outage) = fraction of distinct normalised query tokens in the record.
No stop-word or question-word lists anywhere (REC-29).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tempomem.storage.limits import (
    NAME_ANCHOR_BONUS,
    NAME_ANCHOR_MIN_LETTERS,
    NUMERIC_ANCHOR_BONUS,
    RRF_K,
    RRF_TIE_BREAK_WEIGHT,
    SALIENCE_TIE_BREAK_WEIGHT,
    SEMANTIC_EVIDENCE_COSINE,
)

# A token keeps inner separators so dates, instants, versions and ids stay whole:
# "1988-11-02", "2026-03-01T10:00:00Z", "v1.2", "ID-4471", "1,200".
_TOKEN_RE = re.compile(r"\w+(?:(?:[-:./+]|,(?=\d{3}\b))\w+)*")
_WORD_RE = re.compile(r"\w+")
_SENTENCE_END_RE = re.compile(r"[.!?¿¡:;\n]")
_COMPOUND_SPLIT_RE = re.compile(r"[-:./+,]")
_DATE_RE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:t[\d:.,+\-z]*)?)?)?$")


def normalise(text: str) -> str:
    """AMB-39 anchor normalisation: NFKD → drop combining marks → casefold (`Zoë` ≡ `zoe`)."""
    if text.isascii():
        return text.lower()  # same result, without a per-character pass (hot in scoring)
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return stripped.casefold()


def tokens(text: str) -> list[str]:
    """Normalised compound tokens (dates and identifiers kept whole)."""
    return _TOKEN_RE.findall(normalise(text))


def word_tokens(text: str) -> set[str]:
    """Distinct normalised ``\\w+`` words, used for lexical overlap (REC-32)."""
    return set(_WORD_RE.findall(normalise(text)))


def _date_parts(token: str) -> tuple[str, ...] | None:
    """``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` or an ISO instant → its date components, else None."""
    m = _DATE_RE.match(token)
    if not m:
        return None
    return tuple(p for p in m.groups() if p is not None)


def _is_numeric(token: str) -> bool:
    return any(ch.isdigit() for ch in token)


# --------------------------------------------------------------------------------------------------
# Query anchors


@dataclass(frozen=True)
class QueryAnchors:
    numeric: tuple[str, ...]  # normalised tokens containing a digit (numbers, dates, identifiers)
    names: tuple[str, ...]  # normalised name words (>= 3 letters)


def _capitalised_words(text: str) -> list[tuple[str, bool]]:
    """(word, sentence_initial) for every capitalised word of >= NAME_ANCHOR_MIN_LETTERS letters."""
    out: list[tuple[str, bool]] = []
    first = True
    pos = 0
    for m in _WORD_RE.finditer(text):
        word = m.group()
        if word[0].isupper() and len(word) >= NAME_ANCHOR_MIN_LETTERS and word.isalpha():
            # Sentence-initial: the first word, or a sentence end since the previous word. Looked up only
            # for capitalised words (a regex call per word was most of a cold search's scoring).
            initial = first or _SENTENCE_END_RE.search(text, pos, m.start()) is not None
            out.append((word, initial))
        first = False
        pos = m.end()
    return out


# Why the caches: a search derives these from the text of each of its ~100 candidates, which costs more
# than the retrieval itself on a small store, and the same lines come back query after query. They are
# pure functions of the text; entries are small and bounded.
_TEXT_CACHE = 16_384


@functools.lru_cache(maxsize=_TEXT_CACHE)
def _names_in(text: str) -> frozenset[str]:
    return frozenset(normalise(w) for w, initial in _capitalised_words(text) if not initial)


def name_vocabulary(texts: Iterable[str], entities: Iterable[str] = ()) -> frozenset[str]:
    """Normalised words that look like names in the candidate records.

    Why: REC-28 makes a query word a name anchor when it names an entity of a record. Without the graph
    we treat entity strings (namespace ``person:`` dropped) and mid-sentence capitalised words of the
    records as names; sentence-initial capitals are ambiguous ("The", "What") and are not counted.
    """
    vocab: set[str] = set()
    for text in texts:
        vocab.update(_names_in(text))
    for entity in entities:
        name = entity.split(":", 1)[1] if ":" in entity else entity
        vocab.update(
            w for w in _WORD_RE.findall(normalise(name)) if len(w) >= NAME_ANCHOR_MIN_LETTERS and w.isalpha()
        )
    return frozenset(vocab)


def query_anchors(query: str, vocabulary: frozenset[str] = frozenset()) -> QueryAnchors:
    """Numeric anchors: every query token containing a digit. Name anchors: query words of >= 3 letters
    that are capitalised mid-sentence in the query, or that the candidate records use as names
    (``vocabulary``) — so lowercase or sentence-initial names still count, and "What" does not."""
    numeric = tuple(dict.fromkeys(t for t in tokens(query) if _is_numeric(t)))
    names: dict[str, None] = {}
    capitalised = {normalise(w): initial for w, initial in _capitalised_words(query)}
    for m in _WORD_RE.finditer(query):
        word = m.group()
        norm = normalise(word)
        if len(norm) < NAME_ANCHOR_MIN_LETTERS or not norm.isalpha():
            continue
        if (norm in capitalised and not capitalised[norm]) or norm in vocabulary:
            names[norm] = None
    return QueryAnchors(numeric=numeric, names=tuple(names))


# --------------------------------------------------------------------------------------------------
# Record matching


@dataclass(frozen=True)
class RecordTerms:
    """Pre-normalised terms of one candidate record."""

    compound: frozenset[str]  # whole tokens plus the parts of non-date compounds
    dates: tuple[tuple[str, ...], ...]
    words: frozenset[str]  # \w+ words of text and entity names


def record_terms(text: str, entities: Sequence[str] = ()) -> RecordTerms:
    return _record_terms(text, tuple(entities))


@functools.lru_cache(maxsize=_TEXT_CACHE)
def _record_terms(text: str, entities: tuple[str, ...]) -> RecordTerms:
    compound: set[str] = set()
    dates: list[tuple[str, ...]] = []
    for tok in tokens(text):
        compound.add(tok)
        parts = _date_parts(tok) if tok[0].isdigit() else None  # a date starts with 4 digits
        if parts is not None:
            dates.append(parts)
        elif not tok.isalnum():
            # "ID-4471" also offers "4471"; a date never offers its month or day alone.
            compound.update(_COMPOUND_SPLIT_RE.split(tok))
    words = word_tokens(text)
    for entity in entities:
        words |= word_tokens(entity.split(":", 1)[1] if ":" in entity else entity)
    return RecordTerms(compound=frozenset(compound), dates=tuple(dates), words=frozenset(words))


def numeric_anchor_matches(anchor: str, terms: RecordTerms) -> bool:
    """Exact match; a date anchor matches a record date with the same leading components, so `1988`
    matches `1988-11-02` but `1988-11-02` never matches `1988-12-02` (REC-28)."""
    parts = _date_parts(anchor)
    if parts is not None:
        return any(d[: len(parts)] == parts for d in terms.dates) or anchor in terms.compound
    return anchor in terms.compound


def anchor_bonus(anchors: QueryAnchors, terms: RecordTerms) -> float:
    """Two independent pools, each split equally across the query's anchors (REC-27)."""
    bonus = 0.0
    if anchors.numeric:
        matched = sum(numeric_anchor_matches(a, terms) for a in anchors.numeric)
        bonus += NUMERIC_ANCHOR_BONUS * matched / len(anchors.numeric)
    if anchors.names:
        matched = sum(a in terms.words for a in anchors.names)
        bonus += NAME_ANCHOR_BONUS * matched / len(anchors.names)
    return bonus


def semantic_evidence(cosine: float) -> float:
    """A cosine below 0.5 is no semantic evidence at all (REC-25)."""
    return cosine if cosine >= SEMANTIC_EVIDENCE_COSINE else 0.0


def rrf(*ranks: int | None, k: int = RRF_K) -> float:
    """Reciprocal Rank Fusion over 1-based ranks; a retriever that missed the record contributes 0."""
    return sum(1.0 / (k + r) for r in ranks if r is not None)


def lexical_overlap(query: str | set[str], record_words: Iterable[str]) -> float:
    """Fraction of distinct normalised query tokens present in the record (0..1)."""
    q = word_tokens(query) if isinstance(query, str) else query
    if not q:
        return 0.0
    words = record_words if isinstance(record_words, (set, frozenset)) else set(record_words)
    return len(q & words) / len(q)


def hybrid_score(
    *,
    cosine: float | None,
    anchors: QueryAnchors,
    terms: RecordTerms,
    query_words: set[str],
    bm25_rank: int | None,
    vector_rank: int | None,
    salience: float = 0.0,
) -> float:
    """AMB-31 score of one candidate. ``cosine`` None = record still waiting for its vector (REC-32)."""
    evidence = semantic_evidence(cosine) if cosine is not None else lexical_overlap(query_words, terms.words)
    return (
        evidence
        + anchor_bonus(anchors, terms)
        + RRF_TIE_BREAK_WEIGHT * rrf(bm25_rank, vector_rank)
        + SALIENCE_TIE_BREAK_WEIGHT * salience
    )


def lexical_score(query_words: set[str], terms: RecordTerms) -> float:
    return lexical_overlap(query_words, terms.words)


# --------------------------------------------------------------------------------------------------
# Tuned-profile helpers (recall.profiles.TUNED); the reference functions above are untouched.

_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_MONTH_NUMBER = {m: f"{i:02d}" for i, m in enumerate(_MONTHS, start=1)} | {
    m[:3]: f"{i:02d}" for i, m in enumerate(_MONTHS, start=1) if m != "may"
}
_WEEKDAYS = frozenset(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))
# A temporal question asks for a time: "When did …", "What year …", "How long ago …", "Which month …".
_TEMPORAL_QUERY_RE = re.compile(
    r"\b(?:when|how\s+long\s+ago|since\s+when|(?:what|which)\s+(?:year|month|day|date|time|week|weekend))\b",
    re.IGNORECASE,
)
_RELATIVE_TIME_RE = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|recently|lately|"
    r"(?:last|next|this|past|few|couple\s+of)\s+(?:\w+\s+)?(?:week|weekend|month|year|night|day|days|weeks|"
    r"months|years|summer|winter|spring|fall|autumn|friday|saturday|sunday|monday|tuesday|wednesday|thursday))",
    re.IGNORECASE,
)


def is_temporal_query(query: str) -> bool:
    """Whether the query asks *when* something happened (tuned profile only; REC-29 binds the reference)."""
    return _TEMPORAL_QUERY_RE.search(query) is not None


def has_time_evidence(text: str, terms: RecordTerms) -> bool:
    """A record tells when something happened relative to when it was said: a relative expression
    ("yesterday", "last week", "two days ago") or a weekday. Absolute dates and month names do not
    count: a recorded line's own session date already carries those."""
    return bool(terms.words & _WEEKDAYS) or _RELATIVE_TIME_RE.search(text) is not None


# A captured chat turn's speaker: "Name: …", after an optional "[date] " (LoCoMo-style backfills).
_NAME_WORD = r"[^\W\d_][\w.'’-]*"
_SPEAKER_RE = re.compile(rf"^\s*(?:\[[^\]\n]{{1,40}}\]\s*)?({_NAME_WORD}(?: {_NAME_WORD}){{0,2}}):\s")


def line_speaker(text: str) -> str | None:
    """The speaker a stored line names at its start (``"Melanie: …"``, ``"[8 May 2023] Melanie: …"``),
    capitalised, up to three words; None when the line has no such prefix."""
    found = _SPEAKER_RE.match(text)
    return found.group(1) if found and found.group(1)[0].isupper() else None


def spoken_by_named(text: str, query_words: set[str]) -> bool:
    """The line's speaker is someone the query names: a word of the speaker's name of three letters or
    more (not a title such as "Dr") is a query word."""
    speaker = line_speaker(text)
    return speaker is not None and any(len(w) >= 3 and w in query_words for w in word_tokens(speaker))


def is_question_line(text: str) -> bool:
    """A stored line that ends by asking (``?``, before any closing quote or bracket): it was asked, not
    told, so it is rarely the evidence a question wants, though its reply usually is (issue #17)."""
    return text.rstrip().rstrip("\"')]»”’").endswith("?")


def month_anchors(query: str) -> tuple[str, ...]:
    """Capitalised month names in the query, as two-digit month numbers (``"May"`` → ``"05"``; the modal
    verb "may" is not a month)."""
    found = (normalise(w) for w in _WORD_RE.findall(query) if w[:1].isupper())
    return tuple(dict.fromkeys(_MONTH_NUMBER[w] for w in found if w in _MONTH_NUMBER))


def session_date_matches(anchor: str, day: str) -> bool:
    """A numeric query anchor matches the record's own day: ``2023`` or ``2023-05`` or ``2023-05-08``."""
    parts = _date_parts(anchor)
    if parts is None or not day:
        return False
    day_parts = _date_parts(day)
    return day_parts is not None and day_parts[: len(parts)] == parts


def tuned_anchor_bonus(
    anchors: QueryAnchors,
    months: tuple[str, ...],
    terms: RecordTerms,
    day: str | None,
    *,
    numeric_bonus: float,
    name_bonus: float,
    session_dates: bool,
) -> float:
    """Like ``anchor_bonus`` with its own weights; with ``session_dates`` a query date, year or month also
    matches the record's day (the session it was recorded in), not only dates written in its text."""
    bonus = 0.0
    total = len(anchors.numeric) + (len(months) if session_dates else 0)
    if total:
        matched = 0
        for a in anchors.numeric:
            if numeric_anchor_matches(a, terms) or (session_dates and session_date_matches(a, day or "")):
                matched += 1
        if session_dates:
            day_month = (day or "")[5:7]
            for m in months:
                named = _MONTHS[int(m) - 1] in terms.words
                if m == day_month or named or any(len(d) > 1 and d[1] == m for d in terms.dates):
                    matched += 1
        bonus += numeric_bonus * matched / total
    if anchors.names and name_bonus:
        bonus += name_bonus * sum(a in terms.words for a in anchors.names) / len(anchors.names)
    return bonus


class _Positioned(Protocol):
    @property
    def row(self) -> Mapping[str, object]: ...


_C = TypeVar("_C", bound=_Positioned)


def with_neighbours(scored: Sequence[tuple[float, _C]], weights: Sequence[float]) -> list[tuple[float, _C]]:
    """Conversation context (tuned profiles): a line gains ``weights[d-1]`` × how far its best neighbour at
    distance ``d`` (same day file, seq ± d, in the pool) scores above the pool's lowest score, summed over
    the distances. Neighbours are read from the scores before any boost; a line without a neighbour in
    the pool gains nothing at that distance. ``weights == (w,)`` is the original one-line window."""
    if not any(weights):
        return list(scored)
    low = min((s for s, _ in scored), default=0.0)
    by_pos: dict[tuple[str, int], float] = {}
    for s, c in scored:
        seq = c.row.get("seq")
        if isinstance(seq, int):
            by_pos[(str(c.row.get("day") or ""), seq)] = s
    out = []
    for s, c in scored:
        seq = c.row.get("seq")
        if isinstance(seq, int):
            day = str(c.row.get("day") or "")
            boost = 0.0
            for distance, weight in enumerate(weights, start=1):
                if weight:
                    near = max(by_pos.get((day, seq - distance), low), by_pos.get((day, seq + distance), low))
                    boost += weight * (near - low)
            s += boost
        out.append((s, c))
    return out
