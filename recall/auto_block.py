"""The automatic "possibly relevant" memory block appended to a turn's user message (AUTO-*, PROV-01..04).

Pure selection and rendering over direct hybrid hits: score floor 0.62 (the ``auto_floor`` of the profile
that scored the hits; 0.62 is the reference's), window 0.04, at most three lines,
identical text once, current lines chosen first and shown oldest first (AMB-60), byte budgets (AMB-14).
Gates: host-verified owner turns on web/TUI/ACP only (AUTO-20..22), the short-message gate (AUTO-17), and
the same-conversation filter applied before scoring (AUTO-28, AMB-59). No word lists, no graph (AUTO-23).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, tzinfo
from typing import Literal

from pydantic import BaseModel

from tempomem.recall.graph_read import GraphReader
from tempomem.recall.guidance import (
    BACKGROUND_MAX_BYTES,
    NO_BACKGROUND,
    Background,
    conversation_bucket,
    labelled_background,
)
from tempomem.recall.owner_profile import NO_PROFILE, OwnerProfile
from tempomem.recall.person_card import NO_CARDS, PERSON_CARD_MAX_BYTES, PersonCards, person_cards
from tempomem.recall.profiles import scored_by
from tempomem.recall.search import Hit
from tempomem.recall.shaping import (
    CONFLICT_PREFIX,
    SCORE_EPSILON,
    SOURCE_UNKNOWN,
    CurrentnessInfo,
    SearchBackend,
    currentness,
    cut_utf8,
    display_key,
    find_conflicts,
    is_recallable,
    parse_labels,
)
from tempomem.storage.limits import (
    AUTO_BLOCK_BUDGET_BYTES,
    AUTO_BLOCK_LINES,
    AUTO_BLOCK_WINDOW,
    AUTO_CONTEXT_MAX_BYTES,
    AUTO_LINE_MAX_BYTES,
    DELIBERATE_SUPERSET,
    SHORT_MESSAGE_CODE_POINTS,
)

HEADING = "## Memory (possibly relevant — may be unrelated; verify before relying)"
AUTO_SURFACES = frozenset({"web", "tui", "acp"})  # AUTO-22: Telegram, peers and triggers get none
ATTRIBUTION_PHRASES = {"owner": "you said", "assistant": "assistant noted", "document": "from a document"}
INSIGHT_MARK = "★"  # AMB-55

Reason = Literal[
    "no_hits",
    "not_owner_turn",
    "lexical",
    "short_message",
    "below_floor",
    "backend_unavailable",
    "budget",
    "in_background",
]


@dataclass(frozen=True)
class TurnGate:
    """Host-stamped facts about the turn; the library never infers them from text (AUTO-24)."""

    verified_owner: bool
    surface: str
    process_job_wake: bool = False

    def allows_automatic_context(self) -> bool:
        return self.verified_owner and self.surface in AUTO_SURFACES and not self.process_job_wake


class AutoBlock(BaseModel):
    """The block text (empty when nothing is shown) plus content-free diagnostics (AUTO-02)."""

    text: str
    byte_size: int
    line_ids: list[str]
    suppressed: Reason | None = None


EMPTY = AutoBlock(text="", byte_size=0, line_ids=[])


def _empty(reason: Reason) -> AutoBlock:
    return EMPTY.model_copy(update={"suppressed": reason})


def exclude_same_conversation(hits: Sequence[Hit], conversation_id: str | None) -> list[Hit]:
    """PROV-01/02: drop hits whose *known* source session is this logical conversation (any bucket).
    Unknown provenance stays eligible (PROV-15)."""
    if not conversation_id:
        return list(hits)
    current = conversation_bucket(conversation_id)
    return [h for h in hits if h.source_session is None or conversation_bucket(h.source_session) != current]


def is_short_message(owner_text: str) -> bool:
    """AUTO-17: at most 16 code points after NFC normalisation and trimming."""
    return len(unicodedata.normalize("NFC", owner_text).strip()) <= SHORT_MESSAGE_CODE_POINTS


def attribution(hit: Hit) -> str | None:
    """AUTO-13: ``you said`` / ``assistant noted`` / ``from a document`` only when every label agrees."""
    values = {label.attribution for label in parse_labels(hit) if label.attribution}
    if hit.attr:
        values.add(hit.attr)
    if len(values) != 1:
        return None
    return ATTRIBUTION_PHRASES.get(values.pop())


def render_auto_line(hit: Hit, info: CurrentnessInfo, *, with_attribution: bool) -> str:
    """``- – Morgan prefers green tea. (recorded 2026-05-01; current; you said)``.

    Tasks never show a live ``[ ]``: a current task says ``task/plan recorded`` (AUTO-09). The text is
    capped at 360 UTF-8 bytes on a code-point boundary (AUTO-14).
    """
    signifier = "o" if hit.type == "event" else "–"
    text, _ = cut_utf8(" ".join(hit.text.split()), AUTO_LINE_MAX_BYTES)
    meta: list[str] = []
    if hit.recorded:
        meta.append(f"recorded {hit.recorded[:10]}")
    if info.state == "superseded":
        meta.append("superseded")
    elif info.state == "ended":
        meta.append(f"ended {info.ended_on}")
    else:
        meta.append("task/plan recorded" if hit.type == "task" else "current")
    if with_attribution and (who := attribution(hit)):
        meta.append(who)
    if hit.source_session is None:
        meta.append(SOURCE_UNKNOWN)  # PROV-16; a known session id is never shown (PROV-17)
    if hit.insight:
        meta.append(INSIGHT_MARK)
    return f"- {signifier} {text} ({'; '.join(meta)})"


def _recorded_key(hit: Hit) -> tuple[datetime, str]:
    try:
        instant = datetime.fromisoformat(hit.recorded)
        if instant.tzinfo is not None:
            return instant.astimezone(UTC), hit.id
    except ValueError:
        pass
    try:
        return datetime.combine(date.fromisoformat(hit.day), time(0), tzinfo=UTC), hit.id
    except ValueError:
        return datetime.min.replace(tzinfo=UTC), hit.id


def _render(lines: Sequence[str], note: str | None = None) -> str:
    return "\n".join([HEADING, "", *lines, *([note] if note else [])])


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def select_auto_block(
    hits: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    conversation_id: str | None = None,
    owner_text: str | None = None,
    gate: TurnGate | None = None,
    standalone: bool = False,
    context_bytes_used: int = 0,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
    shown_elsewhere: Collection[str] = (),
) -> AutoBlock:
    """Select and render the automatic block from direct hits (no graph expansion, AUTO-23).

    ``standalone`` is programmatic ``load()`` (AUTO-26): the caller gates the audience, the short-message
    gate does not apply (AUTO-18) and there is no richer attribution. ``context_bytes_used`` is what the
    person card / labelled background already took from the 2,560-byte automatic context (AUTO-15).
    ``shown_elsewhere`` are ids the labelled background already shows: the floor and window are computed
    as usual, but those lines do not take a slot a second time.
    """
    if not standalone and (gate is None or not gate.allows_automatic_context()):
        return _empty("not_owner_turn")
    if not hits:
        return _empty("no_hits")
    if any(h.mode != "hybrid" for h in hits):
        return _empty("lexical")  # AUTO-19, AUTO-27: the host warns instead
    if not standalone and is_short_message(owner_text or ""):
        return _empty("short_message")

    pool = exclude_same_conversation(hits, conversation_id)  # before scoring (PROV-02)
    pool = [h for h in pool if is_recallable(h, superseded_ids)]
    if intent_expiry:  # AUTO-29: dated notes and done/dropped notes never surface automatically
        pool = [h for h in pool if not h.due and h.status not in ("done", "dropped")]
    if not pool:
        return _empty("no_hits")
    best = max(h.score for h in pool)
    if max(h.floor_score for h in pool) < scored_by(h.profile for h in hits).auto_floor - SCORE_EPSILON:
        return _empty("below_floor")

    window: list[Hit] = []
    seen_text: set[str] = set()
    for h in sorted(pool, key=lambda h: -h.score):  # stable: backend order among equal scores
        key = " ".join(h.text.split())
        if best - h.score > AUTO_BLOCK_WINDOW + SCORE_EPSILON or key in seen_text:
            continue
        seen_text.add(key)
        window.append(h)

    infos = {
        h.id: currentness(h, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry)
        for h in window
    }
    # Selection priority (AMB-60): current lines fill the slots first, then superseded/ended ones.
    ordered = [h for h in window if infos[h.id].state == "current"]
    ordered += [h for h in window if infos[h.id].state != "current"]

    budget = min(AUTO_BLOCK_BUDGET_BYTES, AUTO_CONTEXT_MAX_BYTES - context_bytes_used)
    chosen: list[tuple[Hit, str]] = []
    for h in ordered:
        if len(chosen) == AUTO_BLOCK_LINES:
            break
        if h.id in shown_elsewhere:
            continue
        line = render_auto_line(h, infos[h.id], with_attribution=not standalone)
        if _size(_render([*(c[1] for c in chosen), line])) <= budget:
            chosen.append((h, line))  # a line that does not fit is left out, never truncated
    if not chosen:
        return _empty("in_background" if all(h.id in shown_elsewhere for h in ordered) else "budget")

    chosen.sort(key=lambda c: _recorded_key(c[0]))  # display order: oldest first (AUTO-11)
    lines = [c[1] for c in chosen]
    conflicts = find_conflicts([c[0] for c in chosen], now=now, tz=tz, superseded_ids=superseded_ids)
    note = None
    if conflicts:  # AUTO-25: only structured conflicting current facts
        note = f"{CONFLICT_PREFIX} different current values for {display_key(conflicts[0].key)}; weigh them."
        if _size(_render(lines, note)) > budget:
            note = None
    text = _render(lines, note)
    return AutoBlock(text=text, byte_size=_size(text), line_ids=[c[0].id for c in chosen])


@dataclass(frozen=True)
class BackgroundScopes:
    """Switches on the automatic labelled background (GUIDE-06, GUIDE-07) and names the turn's scopes.

    ``agent`` labels always count; ``user:<owner_sender>`` when the host supplies the verified owner's
    sender id; ``conversation:<id>`` for the lookup's ``conversation_id`` (any daily bucket, AMB-59).
    """

    owner_sender: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    """A named, content-free diagnostic for the host to emit (HOST-06): a name, where it came from, and
    a byte count; never text, ids or provenance."""

    name: Literal[
        "memory_recalled", "memory_recall_unavailable", "memory_recall_lexical_only", "turn_context"
    ]
    source: str
    byte_size: int = 0


@dataclass(frozen=True)
class AutoLookup:
    """The turn's bounded direct lookup (reused uncut by ``useOriginalQuery``, REC-10) and its block."""

    hits: list[Hit]
    block: AutoBlock
    cards: PersonCards = NO_CARDS  # GUIDE-08..18; empty unless the person-card switch is on
    background: Background = NO_BACKGROUND  # GUIDE-06/07; empty unless the background switch is on
    profile: OwnerProfile = NO_PROFILE  # PROFILE-01..11; empty unless memory.profile.enabled
    query: str = ""  # the text this lookup searched ("" when no search ran or it failed): POL-03
    # Ids Remember wrote during this turn (``MemoryStore.remember(turn_lookup=…)``): once any is here the
    # lookup is stale, so neither useOriginalQuery (REM-21) nor the same-query reuse (REM-20) may use it.
    written: list[str] = field(default_factory=list, compare=False)

    @property
    def stale(self) -> bool:
        return bool(self.written)

    @property
    def context_text(self) -> str:
        """The whole automatic context: the owner profile, person cards, labelled background, then the
        block (within AUTO_CONTEXT_MAX_BYTES)."""
        parts = (self.profile.text, self.cards.text, self.background.text, self.block.text)
        return "\n\n".join(t for t in parts if t)

    def diagnostics(self) -> list[Diagnostic]:
        """What the host reports for this turn, by name (HOST-06): ``memory_recalled`` with the injected
        context's size (AUTO-02), ``memory_recall_unavailable`` when the backend failed (the profile, if
        any, is still injected: PROFILE-11), ``memory_recall_lexical_only`` when recall fell back to
        full-text only (AUTO-19), and one byte-count-only ``turn_context`` entry per opt-in block
        (profile, person cards, labelled background: PROFILE-23, AUTO-32)."""
        out: list[Diagnostic] = []
        if self.block.suppressed == "backend_unavailable":
            out.append(Diagnostic("memory_recall_unavailable", "automatic"))
        elif self.block.suppressed == "lexical":
            out.append(Diagnostic("memory_recall_lexical_only", "automatic"))
        text = self.context_text
        if text:
            out.append(Diagnostic("memory_recalled", "automatic", len(text.encode("utf-8"))))
        for source, part in (
            ("profile", self.profile.text),
            ("person_card", self.cards.text),
            ("labelled_background", self.background.text),
        ):
            if part:
                out.append(Diagnostic("turn_context", source, len(part.encode("utf-8"))))
        return out


_SEPARATOR_BYTES = len(b"\n\n")


def automatic_lookup(
    backend: SearchBackend,
    owner_text: str,
    *,
    now: datetime,
    tz: tzinfo,
    gate: TurnGate,
    conversation_id: str | None = None,
    context_bytes_used: int = 0,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
    cards_from: GraphReader | None = None,
    background: BackgroundScopes | None = None,
    profile: OwnerProfile | None = None,
) -> AutoLookup:
    """Run the turn's one direct lookup (the bounded fifty-hit superset) and select the block from it.

    The lookup runs even when the gates suppress the block, so explicit ``useOriginalQuery`` still has
    it (REC-10, AUTO-17). A backend failure yields no block, never an exception into the turn.

    ``cards_from`` switches on person cards (GUIDE-08..GUIDE-18) for BuJo hosts; ``None`` (default) leaves
    the result byte-identical. Cards need an allowed turn (GUIDE-18) but not a long message (GUIDE-14),
    are never graph-expanded answers (AUTO-23), and their bytes plus the separator count against the
    block's share of the whole automatic context (GUIDE-15, AUTO-15).

    ``background`` switches on the labelled background (GUIDE-06, GUIDE-07) the same way: ``None``
    (default) is byte-identical; it needs an allowed turn (GUIDE-18) but not a long message (GUIDE-14),
    uses this same lookup (no extra backend call, no graph), and takes from what the cards left of the
    non-block share before the block takes the rest (GUIDE-15). A line it shows does not repeat in the
    block.

    ``profile`` (BuJo ``memory.profile.enabled``) comes first on an allowed turn only (PROFILE-02); its
    bytes count against the whole context, and a failing backend never takes it away (PROFILE-11).
    ``None`` (default) is byte-identical (PROFILE-24).
    """
    shown_profile = NO_PROFILE
    if profile is not None and profile.text and gate.allows_automatic_context():
        shown_profile = profile
        context_bytes_used += profile.byte_size + _SEPARATOR_BYTES
    if not owner_text.strip():
        return AutoLookup([], _empty("no_hits"), profile=shown_profile)
    cards = NO_CARDS
    if cards_from is not None and gate.allows_automatic_context():
        try:
            cards = person_cards(
                owner_text,
                cards_from,
                now=now,
                tz=tz,
                budget=min(PERSON_CARD_MAX_BYTES, AUTO_CONTEXT_MAX_BYTES - context_bytes_used),
                superseded_ids=superseded_ids,
                intent_expiry=intent_expiry,
            )
        except Exception:  # a card must never break the turn
            cards = NO_CARDS
        if cards.text:
            context_bytes_used += cards.byte_size + _SEPARATOR_BYTES
    try:
        hits = list(backend.search(owner_text, limit=DELIBERATE_SUPERSET))
    except Exception:
        return AutoLookup([], _empty("backend_unavailable"), cards, profile=shown_profile)
    labelled = NO_BACKGROUND
    if background is not None and gate.allows_automatic_context():
        remaining = AUTO_CONTEXT_MAX_BYTES - context_bytes_used
        labelled = labelled_background(
            hits,
            now=now,
            tz=tz,
            owner_sender=background.owner_sender,
            conversation_id=conversation_id,
            budget=min(BACKGROUND_MAX_BYTES, remaining),
            superseded_ids=superseded_ids,
            intent_expiry=intent_expiry,
        )
        if labelled.text:
            context_bytes_used += labelled.byte_size + _SEPARATOR_BYTES
    block = select_auto_block(
        hits,
        now=now,
        tz=tz,
        conversation_id=conversation_id,
        owner_text=owner_text,
        gate=gate,
        context_bytes_used=context_bytes_used,
        superseded_ids=superseded_ids,
        intent_expiry=intent_expiry,
        shown_elsewhere=labelled.line_ids,
    )
    return AutoLookup(hits, block, cards, labelled, shown_profile, owner_text)


def same_query(a: str, b: str) -> bool:
    """POL-03: queries that differ only in Unicode form, case or spacing are one lookup."""

    def norm(text: str) -> str:
        return " ".join(unicodedata.normalize("NFC", text).casefold().split())

    return bool(a.strip()) and norm(a) == norm(b)


def load_block(
    hits: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    conversation_id: str | None = None,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> AutoBlock:
    """Standalone ``load()`` (AUTO-26, PROV-04): same selector and bounds, no privacy gate — callers
    must gate the audience themselves."""
    return select_auto_block(
        hits,
        now=now,
        tz=tz,
        conversation_id=conversation_id,
        standalone=True,
        superseded_ids=superseded_ids,
        intent_expiry=intent_expiry,
    )
