"""Labelled guidance: the explicit MemoryRecall "Preferences & lessons" section (GUIDE-01..GUIDE-05, AMB-15)
and the automatic labelled background (GUIDE-06, GUIDE-07, GUIDE-14..GUIDE-18, AMB-16).

Explicit section: only labelled preference/lesson lines among the effective query's top eight retrieved
candidates take part; they must clear ``GUIDANCE_FLOOR`` (on a tuned profile's scale: its ``answer_floor``)
unless the request names that ``kind``. Scope
precedence is user, then conversation, then agent; within a scope higher scores first; at most six lines.

Automatic background: see ``labelled_background``. Both readers never show scope ids (a sender or a
conversation id), memory ids or conversation provenance (GUIDE-17, PROV-19).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo

from tempomem.recall.profiles import REFERENCE, scored_by
from tempomem.recall.search import Hit
from tempomem.recall.shaping import (
    SCORE_EPSILON,
    StructuredLabel,
    currentness,
    cut_utf8,
    is_recallable,
    parse_labels,
    same_value,
)
from tempomem.storage.limits import (
    AUTO_BLOCK_BUDGET_BYTES,
    AUTO_CONTEXT_MAX_BYTES,
    AUTO_LINE_MAX_BYTES,
    BACKGROUND_MEDIAN_LEAD,
    GUIDANCE_MAX_LINES,
    GUIDANCE_WINDOW,
)

GUIDANCE_FLOOR = 0.65  # AMB-15: separate from the automatic floor, kept configurable
GUIDANCE_HEADING = "Preferences & lessons:"
GUIDANCE_KINDS = ("preference", "lesson")
_SCOPE_ORDER = {"user": 0, "conversation": 1, "agent": 2}
_BUCKET_RE = re.compile(r"#\d{4}-\d{2}-\d{2}$")


def _scope_kind(scope: str) -> str | None:
    kind = scope.split(":", 1)[0]
    return kind if kind in _SCOPE_ORDER else None


def guidance_lines(
    candidates: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    kind: str | None = None,
    floor: float | None = None,
    superseded_ids: Collection[str] | None = None,
) -> list[str]:
    """Lines for the section, best first; empty when nothing is eligible (GUIDE-04). ``floor`` None is
    ``GUIDANCE_FLOOR`` for reference-scale scores, else the scoring profile's ``answer_floor``."""
    if floor is None:
        profile = scored_by(h.profile for h in candidates)
        floor = GUIDANCE_FLOOR if profile == REFERENCE else profile.answer_floor
    wanted = (kind,) if kind in GUIDANCE_KINDS else GUIDANCE_KINDS
    picked: list[tuple[int, float, int, str]] = []
    for rank, hit in enumerate(candidates[:GUIDANCE_WINDOW]):
        if not is_recallable(hit, superseded_ids):
            continue
        if kind is None and hit.floor_score < floor - SCORE_EPSILON:
            continue  # GUIDE-03: an explicit kind may show lines below the floor
        if currentness(hit, now=now, tz=tz, superseded_ids=superseded_ids).state != "current":
            continue
        best: tuple[int, str] | None = None
        for label in parse_labels(hit):
            scope = _scope_kind(label.scope)
            if label.kind in wanted and scope is not None:
                option = (_SCOPE_ORDER[scope], f"- {label.kind} ({scope}): {hit.text}")
                best = option if best is None or option[0] < best[0] else best
        if best is not None:
            picked.append((best[0], -hit.score, rank, best[1]))
    picked.sort()
    return [line for *_, line in picked[:GUIDANCE_MAX_LINES]]


def guidance_section(lines: Sequence[str]) -> str | None:
    return "\n".join([GUIDANCE_HEADING, *lines]) if lines else None


# --------------------------------------------------------------------------------------------------
# Automatic labelled background (GUIDE-06, GUIDE-07, AMB-16)
#
# Selection is structural and language-neutral (no word lists, no question grammar):
#   * candidates = the turn's direct lookup hits (hybrid only; recallable; under intentExpiry no dated or
#     done/dropped notes), in score order; the window is the top ``GUIDANCE_WINDOW`` (8) of them;
#   * a line *leads* when it is in that window, clears ``AUTO_BLOCK_FLOOR`` (0.62; on a tuned profile's
#     scale its ``auto_floor``) and
#     ``score - median(window scores) >= BACKGROUND_MEDIAN_LEAD`` (0.05) (AMB-16);
#   * it must carry a ``preference`` or *verified* ``lesson`` label in one of the turn's scopes: ``agent``,
#     the verified owner's own ``user:<sender>``, or this logical conversation's ``conversation:<id>``;
#     "verified" = the label (else the line) is attributed to the owner or a document; an assistant-noted
#     lesson is model judgement and stays out. The same check applies to preferences, which the capture
#     gates only ever attribute to the owner (CAP-69);
#   * GUIDE-07 (opposite advice shown together): labels name a slot ``(kind, subject, key)``. A window line
#     that clears the floor and holds a *different* value in the same slot as a leading line joins as its
#     partner even without the median lead, and the pair is one unit for the byte budget: shown together
#     or not at all. Whether the two values really disagree is left to the model, as AUTO-16 does.
# The same-conversation provenance filter (PROV-01) is not applied: it keeps an earlier *status* of the
# active dialogue out of the possibly-relevant block, while labelled guidance is standing advice (and
# ``conversation:<id>`` labels are by definition from this conversation). Like the person card, this is a
# label reader: no ids, no provenance, no "source conversation unknown" marker (GUIDE-17, PROV-19).

BACKGROUND_HEADING = "## Preferences & lessons (from memory; verify before relying)"
# The non-block share of the 2,560-byte automatic context, shared with the person card (GUIDE-15).
BACKGROUND_MAX_BYTES = AUTO_CONTEXT_MAX_BYTES - AUTO_BLOCK_BUDGET_BYTES
VERIFIED_ATTRIBUTIONS = {"owner": "you said", "document": "from a document"}
_SRC_ATTRIBUTION = {"user": "owner", "document": "document"}


def conversation_bucket(conversation_id: str) -> str:
    """AMB-59: the logical conversation is the host id without a trailing ``#YYYY-MM-DD`` bucket."""
    return _BUCKET_RE.sub("", conversation_id)


def turn_scope_kind(scope: str, *, owner_sender: str | None, conversation_id: str | None) -> str | None:
    """``user`` / ``conversation`` / ``agent`` when ``scope`` is one of the turn's scopes, else ``None``."""
    if scope == "agent":
        return "agent"
    kind, _, ident = scope.partition(":")
    if kind == "user" and owner_sender and ident == owner_sender:
        return "user"
    if kind != "conversation" or not conversation_id or not ident:
        return None
    return "conversation" if conversation_bucket(ident) == conversation_bucket(conversation_id) else None


def _attribution(label: StructuredLabel, hit: Hit) -> str | None:
    return label.attribution or hit.attr or _SRC_ATTRIBUTION.get(hit.src or "")



@dataclass(frozen=True)
class _Entry:
    hit: Hit
    rank: int
    scope: str  # the line's best turn scope kind (GUIDE-02 precedence)
    kind: str
    who: str
    slots: dict[tuple[str, str, str], str]  # (kind, subject, key) -> normalised value
    leads: bool


@dataclass(frozen=True)
class Background:
    """Rendered labelled background (``text`` empty when none) and the byte size it takes."""

    text: str
    byte_size: int
    line_ids: tuple[str, ...] = ()  # diagnostics and block de-duplication only; never rendered


NO_BACKGROUND = Background("", 0)


def _entries(
    window: Sequence[Hit],
    median: float,
    *,
    floor: float,
    now: datetime,
    tz: tzinfo,
    owner_sender: str | None,
    conversation_id: str | None,
    superseded_ids: Collection[str] | None,
    intent_expiry: bool,
) -> list[_Entry]:
    out: list[_Entry] = []
    seen_text: set[str] = set()
    for rank, hit in enumerate(window):
        if hit.floor_score < floor - SCORE_EPSILON:
            continue
        info = currentness(hit, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry)
        if info.state != "current":
            continue
        eligible: list[tuple[int, str, StructuredLabel, str]] = []
        for label in parse_labels(hit):
            scope = turn_scope_kind(label.scope, owner_sender=owner_sender, conversation_id=conversation_id)
            who = _attribution(label, hit)
            if label.kind in GUIDANCE_KINDS and scope is not None and who in VERIFIED_ATTRIBUTIONS:
                eligible.append((_SCOPE_ORDER[scope], scope, label, who))
        text_key = " ".join(hit.text.split())
        if not eligible or text_key in seen_text:
            continue  # identical text once (as AUTO-08)
        seen_text.add(text_key)
        _, scope, label, who = min(eligible, key=lambda e: e[0])  # GUIDE-02 scope precedence
        slots = {(lab.kind, lab.subject, lab.key): same_value(lab.value) for _, _, lab, _ in eligible}
        leads = hit.score - median >= BACKGROUND_MEDIAN_LEAD - SCORE_EPSILON
        out.append(_Entry(hit, rank, scope, label.kind, who, slots, leads))
    return out


def _partners(a: _Entry, b: _Entry) -> bool:
    """GUIDE-07: the same ``(kind, subject, key)`` slot holding different values."""
    return any(slot in b.slots and b.slots[slot] != value for slot, value in a.slots.items())


def _groups(entries: list[_Entry]) -> list[list[_Entry]]:
    """Leading lines plus their partners; leaders sharing a partner end up in one group."""
    parent = list(range(len(entries)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(entries):
        for j in range(i + 1, len(entries)):
            b = entries[j]
            if (a.leads or b.leads) and _partners(a, b):
                parent[root(j)] = root(i)
    members: dict[int, list[_Entry]] = {}
    for i, e in enumerate(entries):
        members.setdefault(root(i), []).append(e)
    groups = [sorted(g, key=lambda e: e.rank) for g in members.values() if any(e.leads for e in g)]
    return sorted(groups, key=lambda g: (min(_SCOPE_ORDER[e.scope] for e in g), g[0].rank))


def render_background_line(entry: _Entry) -> str:
    """``- preference (user): Answers should be brief. (recorded 2026-05-01; you said)``."""
    text, _ = cut_utf8(" ".join(entry.hit.text.split()), AUTO_LINE_MAX_BYTES)
    meta = [f"recorded {entry.hit.recorded[:10] or entry.hit.day}", VERIFIED_ATTRIBUTIONS[entry.who]]
    return f"- {entry.kind} ({entry.scope}): {text} ({'; '.join(meta)})"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def labelled_background(
    hits: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    owner_sender: str | None = None,
    conversation_id: str | None = None,
    budget: int = BACKGROUND_MAX_BYTES,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> Background:
    """The automatic labelled background from the turn's direct lookup (GUIDE-06, GUIDE-07, AMB-16).

    Pure: the caller applies the turn gate (GUIDE-18) and passes what is left of the automatic context as
    ``budget`` (GUIDE-15). The short-message gate does not apply (GUIDE-14). Groups (a leading line and
    its GUIDE-07 partners) are placed whole or left out, never truncated.
    """
    if not hits or any(h.mode != "hybrid" for h in hits):
        return NO_BACKGROUND  # lexical/degraded scores are not calibrated for the floor (AUTO-19)
    pool = [h for h in hits if is_recallable(h, superseded_ids)]
    if intent_expiry:  # GUIDE-16, INTENT-22
        pool = [h for h in pool if not h.due and h.status not in ("done", "dropped")]
    window = sorted(pool, key=lambda h: -h.score)[:GUIDANCE_WINDOW]  # stable among equal scores
    if not window:
        return NO_BACKGROUND
    median = statistics.median(h.score for h in window)
    entries = _entries(
        window,
        median,
        floor=scored_by(h.profile for h in hits).auto_floor,
        now=now,
        tz=tz,
        owner_sender=owner_sender,
        conversation_id=conversation_id,
        superseded_ids=superseded_ids,
        intent_expiry=intent_expiry,
    )
    lines: list[str] = []
    ids: list[str] = []
    for group in _groups(entries):
        rendered = [render_background_line(e) for e in group]
        if _size("\n".join([BACKGROUND_HEADING, "", *lines, *rendered])) <= budget:
            lines.extend(rendered)
            ids.extend(e.hit.id for e in group)
    if not lines:
        return NO_BACKGROUND
    text = "\n".join([BACKGROUND_HEADING, "", *lines])
    return Background(text, _size(text), tuple(ids))
