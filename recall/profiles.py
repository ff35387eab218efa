"""Recall profiles: named, measured scoring configurations for ``MemoryIndex.search``.

``REFERENCE`` is the reference scoring contract (REC-24..REC-32, AMB-31) with its exact constants; it is
what every configured HTTP provider gets, because those constants were calibrated on 768-dim server
embedders. ``TUNED`` (e5-small) and ``TUNED_MINILM`` (the shipped MiniLM) were measured on the LoCoMo dev
split (``bench/locomo_retrieval.py``) for the embedded offline embedder each names; a search without an
explicit profile uses ``DEFAULT_PROFILES[embedder]`` (``default_profile``), else ``REFERENCE``.

A profile orders the candidate pool (BM25 top-50 ∪ vector top-50 + rows newer than the FTS watermark);
``context_seeds`` also lets the lines next to its best candidates join the pool (conversation context).
Profile choice never changes which records exist, only which of them a search returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tempomem.storage.limits import (
    AUTO_BLOCK_FLOOR,
    DELIBERATE_FLOOR,
    DELIBERATE_SUPERSET,
    NAME_ANCHOR_BONUS,
    NUMERIC_ANCHOR_BONUS,
    RRF_K,
    RRF_TIE_BREAK_WEIGHT,
    SALIENCE_TIE_BREAK_WEIGHT,
    SEMANTIC_EVIDENCE_COSINE,
)

Ranker = Literal["reference", "tuned", "bm25", "vector"]


class RecallProfile(BaseModel):
    """How a candidate pool is ranked. Frozen: profiles are shared module-level constants."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    ranker: Ranker = "tuned"
    # Embedding identity the profile was calibrated with, as ``provider/model`` (None = any embedder).
    # The default profile only applies to an index built with that embedder; others get REFERENCE.
    embedder: str | None = None
    pool: int = DELIBERATE_SUPERSET  # candidates fetched from each retriever (INTENT-35)
    semantic_floor: float = SEMANTIC_EVIDENCE_COSINE  # a cosine below this is no semantic evidence
    numeric_anchor_bonus: float = NUMERIC_ANCHOR_BONUS  # shared equally across numeric/date anchors
    name_anchor_bonus: float = NAME_ANCHOR_BONUS  # shared equally across name anchors
    rrf_weight: float = RRF_TIE_BREAK_WEIGHT
    rrf_k: int = RRF_K
    salience_weight: float = SALIENCE_TIE_BREAK_WEIGHT
    # Bounded lexical evidence: weight × BM25 score / best BM25 score of the pool (0..weight).
    lexical_weight: float = 0.0
    # Session-date anchors: a query date/year/month also matches the record's own day (not only its text).
    session_date_anchors: bool = False
    # Temporal questions ("when did …", "what year …"): bounded bonus for records carrying time evidence
    # (a date, a weekday/month name or a relative time expression such as "last week").
    temporal_bonus: float = Field(default=0.0, ge=0.0)
    # Conversation context: + weight × the best base score of the adjacent lines (same day file,
    # seq ± 1) that are in the pool. A turn answering a question inherits part of the question's match.
    neighbour_weight: float = Field(default=0.0, ge=0.0)
    # The same at distance 2 (seq ± 2): in a dialogue the answer is often two lines from the line that
    # matches the question (question, the other speaker's reply, the answer).
    neighbour2_weight: float = Field(default=0.0, ge=0.0)
    # Context lines (issue #17): the lines within the neighbour distance of the ``context_seeds`` best
    # candidates (before neighbour context) join the pool when no retriever returned them, scored alike
    # (stored-vector cosine, their BM25, anchors). The answer is often a reply that shares no word and
    # little meaning with the question ("It's a mix of drama and romance!"), so neither retriever finds it.
    context_seeds: int = Field(default=0, ge=0)
    # Question lines (issue #17): a line that ends with a question mark was asked, not told. It still
    # lends its match to its neighbours (above: the reply is usually the evidence), but ranks this much
    # lower itself. Applied to the final score only; the evidence the floors compare is unchanged.
    question_penalty: float = Field(default=0.0, ge=0.0)
    # Speakers (issue #17): a line spoken by someone the query names ("What pets does Melanie have?" →
    # "Melanie: …", the prefix captured chat turns carry) ranks this much higher. Keyed on the speaker
    # only: a name matched anywhere in the line is the small name anchor above, because peers that ranked
    # every name match lost 7-8 points. Final score only, like the question penalty.
    speaker_bonus: float = Field(default=0.0, ge=0.0)
    # Which score the evidence floors below compare: the final ``score``, or the ``evidence`` before
    # neighbour context (``Hit.floor_score``), which does not grow with the number of related lines.
    floor_on: Literal["score", "evidence"] = "score"
    # Evidence floors on this profile's score scale (the reference ones are cosine-scale, LIM-35/LIM-38).
    # ``answer_floor``: below it the best hit gets "Insufficient evidence" and the tail cut drops hits
    # under it (REC-34..REC-40), and explicit guidance lines must clear it (AMB-15); ``auto_floor``: the
    # automatic block and labelled background need it (AUTO-*, AMB-16). Measured with
    # bench/locomo_floors.py; the tail-cut margin and the automatic window are shared.
    answer_floor: float = DELIBERATE_FLOOR
    auto_floor: float = AUTO_BLOCK_FLOOR

    def neighbour_weights(self) -> tuple[float, ...]:
        """Neighbour-context weights by distance (1, 2, …) for ``scoring.with_neighbours``; trailing
        zeros dropped, so ``()`` means no neighbour context."""
        weights = [self.neighbour_weight, self.neighbour2_weight]
        while weights and not weights[-1]:
            weights.pop()
        return tuple(weights)

    def describe(self) -> str:
        parts = [f"{self.name} ({self.ranker}"]
        if self.embedder:
            parts.append(f", embedder {self.embedder}")
        if self.ranker == "tuned":
            parts.append(
                f", floor {self.semantic_floor}, lexical {self.lexical_weight}, "
                f"anchors {self.numeric_anchor_bonus}/{self.name_anchor_bonus}, "
                f"session dates {'on' if self.session_date_anchors else 'off'}, "
                f"temporal {self.temporal_bonus}, "
                f"neighbours {'/'.join(map(str, self.neighbour_weights())) or 0}"
                + (f", context lines of the top {self.context_seeds}" if self.context_seeds else "")
                + (f", question lines -{self.question_penalty}" if self.question_penalty else "")
                + (f", named speaker +{self.speaker_bonus}" if self.speaker_bonus else "")
            )
        return "".join(parts) + ")"


E5_EMBEDDER = "local-e5/multilingual-e5-small-q4"
MINILM_EMBEDDER = "local/all-MiniLM-L6-v2-int8"

REFERENCE = RecallProfile(name="reference", ranker="reference")

# Measured on the LoCoMo dev split (760 questions) with bench/locomo_retrieval.py: recall_any@5 0.72 vs
# 0.54 for the reference scoring with the same embedder and 0.60 for BM25 alone. Weights are on the e5
# cosine scale (most candidate cosines fall in 0.75..0.9), so every lever is a bounded nudge.
TUNED = RecallProfile(
    name="tuned",
    ranker="tuned",
    embedder=E5_EMBEDDER,
    semantic_floor=0.0,
    lexical_weight=0.1,
    numeric_anchor_bonus=0.03,
    name_anchor_bonus=0.02,
    session_date_anchors=True,
    temporal_bonus=0.02,
    neighbour_weight=0.4,
    neighbour2_weight=0.2,
    # LoCoMo, each question vs its own conversation (answerable) and vs the next one (unanswerable),
    # bench/locomo_floors.py. Answer floor: the best balanced accuracy, 0.95 (95.5% of answerable / 11.3%
    # of unanswerable clear). Automatic floor, stricter because the block is injected unasked: the
    # highest floor whose balanced accuracy is at least the reference's on MiniLM (0.866 at 0.62),
    # 0.98 (79.9% / 3.4%).
    answer_floor=0.95,
    auto_floor=0.98,
)
# The same levers calibrated for the MiniLM embedder (wider cosine spread → larger lexical weight), plus
# context lines, question lines and named speakers (issue #17). LoCoMo dev recall_any@5: chosen by the
# bench's grid on four conversations and scored on the fifth, pooled, 0.771 (0.736 before question lines
# and speakers, 0.707 before context lines); the same grid on all five picks these constants, 0.778
# in-sample (docs/recall.md, held-out rows). Floors compare the evidence before neighbour context
# (``floor_on``), measured with bench/locomo_floors.py by the same rules as before: answer 0.88, the best
# balanced accuracy — 94.1% of answerable / 9.6% of unanswerable queries clear it (the final-score floor
# 0.81 before context lines: 91.4% / 9.1%); automatic 0.98, the highest floor whose balanced accuracy is
# at least the reference's on MiniLM — 75.4% / 1.4% (before: 0.93, 75.7% / 1.8%). Measured again after
# question lines and speakers, which act on the final score only: unchanged.
TUNED_MINILM = TUNED.model_copy(
    update={
        "name": "tuned-minilm",
        "embedder": MINILM_EMBEDDER,
        "lexical_weight": 0.5,
        "neighbour_weight": 0.5,
        "neighbour2_weight": 0.3,
        "temporal_bonus": 0.04,
        "context_seeds": 20,
        "question_penalty": 0.1,
        "speaker_bonus": 0.4,
        "floor_on": "evidence",
        "answer_floor": 0.88,
        "auto_floor": 0.98,
    }
)

BM25_ONLY = RecallProfile(name="bm25-only", ranker="bm25")
VECTOR_ONLY = RecallProfile(name="vector-only", ranker="vector")

# The default profile of each embedded embedder, measured on the LoCoMo dev split: each beats the
# reference contract with the same embedder by 15+ points of recall_any@5. Any other embedder (every
# configured HTTP provider) keeps REFERENCE, whose constants were calibrated for 768-dim server models.
DEFAULT_PROFILES: dict[str, RecallProfile] = {MINILM_EMBEDDER: TUNED_MINILM, E5_EMBEDDER: TUNED}
# The default of the shipped default embedder (``embeddings.provider: "local"``, MiniLM).
DEFAULT_PROFILE = DEFAULT_PROFILES[MINILM_EMBEDDER]

PROFILES = {p.name: p for p in (REFERENCE, TUNED, TUNED_MINILM, BM25_ONLY, VECTOR_ONLY)}


def scored_by(profiles: Iterable[RecallProfile | None]) -> RecallProfile:
    """The profile whose floors apply to a hit list, given each hit's ``Hit.profile``: the one profile
    that scored them (hits without one — graph-derived, hand-made — are ignored), else ``REFERENCE``
    (none known, or several different ones)."""
    found = {p for p in profiles if p is not None}
    return found.pop() if len(found) == 1 else REFERENCE


def embedder_key(identity: object | None) -> str | None:
    """``provider/model`` of an ``EmbeddingIdentity`` (None for Lite)."""
    if identity is None:
        return None
    return f"{identity.provider}/{identity.model}"  # type: ignore[attr-defined]


def default_profile(identity: object | None) -> RecallProfile:
    """The profile a search without an explicit one uses: ``DEFAULT_PROFILES[provider/model]`` for the
    embedded embedders it was calibrated with, else ``REFERENCE`` (configured providers, Lite)."""
    key = embedder_key(identity)
    return DEFAULT_PROFILES.get(key, REFERENCE) if key is not None else REFERENCE


def resolve_profile(profile: RecallProfile | str | None, identity: object | None) -> RecallProfile:
    """The profile a search uses. An explicit profile (object or name) is used as given; ``None`` means
    ``default_profile(identity)``."""
    if isinstance(profile, str):
        try:
            return PROFILES[profile]
        except KeyError:
            raise ValueError(f"unknown recall profile {profile!r}; known: {sorted(PROFILES)}") from None
    if profile is not None:
        return profile
    return default_profile(identity)
