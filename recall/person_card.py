"""Automatic person cards for the turn's background context (GUIDE-08..GUIDE-18, AMB-40, AMB-56).

A card appears when the owner's message names a ``person`` entity of the graph, either as a
``person:<id>`` reference or by the exact full display name (NFC + casefold, word boundaries, any
language; AMB-56). First-person words never select anyone's card (GUIDE-12): only names and ids match.

The card lists every current, user-stated or document fact labelled about that person — keys are never
filtered by the question's wording (GUIDE-10) — as ``home town: Maple Harbor (you said, recorded
2026-09-06)`` (GUIDE-09). Keys drop ``other:`` and values render as text, not JSON (GUIDE-13). Two or
more current distinct values for one key render as ``conflicting values — ask`` (GUIDE-11). A full birth
date adds an age as of the host-local date (AMB-40). Under ``intentExpiry`` dated and done/dropped notes
are left out (GUIDE-16). Cards never show memory ids, entity ids or conversation provenance (GUIDE-17,
PROV-19). Cards fit a byte budget inside the whole automatic context (GUIDE-15, AUTO-15): a line that does
not fit is left out, never truncated. The gate (owner turn, no process-job wake) is the caller's
``TurnGate`` (GUIDE-18); the short-message gate does not apply (GUIDE-14).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime, tzinfo

from tempomem.recall.graph_read import GraphReader, bullet_hit
from tempomem.recall.search import Hit
from tempomem.recall.shaping import currentness, cut_utf8, display_key, is_recallable, same_value, value_text
from tempomem.storage.graph import EntityRow
from tempomem.storage.limits import AUTO_BLOCK_BUDGET_BYTES, AUTO_CONTEXT_MAX_BYTES, AUTO_LINE_MAX_BYTES

# The card's share of the 2,560-byte automatic context; the possibly-relevant block keeps its 1.5 KB.
PERSON_CARD_MAX_BYTES = AUTO_CONTEXT_MAX_BYTES - AUTO_BLOCK_BUDGET_BYTES
CARD_HEADING = "## Person card (from memory; verify before relying)"
CONFLICTING = "conflicting values — ask"
ATTRIBUTIONS = {"owner": "you said", "document": "from a document"}  # GUIDE-09: user-stated or document
SRC_ATTRIBUTION = {"user": "owner", "document": "document", "assistant": "assistant"}
BIRTH_KEYS = frozenset({"birth date", "birthdate", "birthday", "date of birth", "born", "dob"})
ENTITY_REF_RE = re.compile(r"(?<![\w:])[a-z]+:[a-z0-9_-]+(?![\w-])")  # AMB-56: person:<id>, org:<id> …
_FULL_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def match_people(message: str, entities: dict[str, EntityRow]) -> list[EntityRow]:
    """Person entities the message names, in order of first mention (AMB-56). Only ``person`` rows."""
    return match_entities(message, {eid: row for eid, row in entities.items() if row.type == "person"})


def match_entities(message: str, people: dict[str, EntityRow]) -> list[EntityRow]:
    """The entities of ``people`` the message names by ``<type>:<id>`` or exact display name, in order of
    first mention (AMB-56: NFC + casefold, word boundaries, any language)."""
    first: dict[str, int] = {}
    for m in ENTITY_REF_RE.finditer(message):
        if m.group(0) in people:
            first.setdefault(m.group(0), m.start())
    folded = _fold(message)
    for eid in sorted(people):
        name = _fold(people[eid].name).strip()
        if not name:
            continue
        m = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", folded)
        if m is not None and (eid not in first or m.start() < first[eid]):
            first[eid] = m.start()
    return [people[eid] for eid in sorted(first, key=lambda e: (first[e], e))]


@dataclass(frozen=True)
class CardFact:
    key: str  # display key (no ``other:``)
    value: str
    recorded: str  # YYYY-MM-DD
    attribution: str  # "you said" | "from a document"


def entity_fact_labels(hit: Hit, entity: EntityRow) -> list[dict]:
    """The line's well-formed fact labels (a key, a value) about ``entity``: its id or display name as the
    label's subject; a label without one is about the line's own entities, else the owner (AMB-27)."""
    try:
        data = json.loads(hit.labels or "")
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    default_subject = ",".join(sorted(hit.entities)) if hit.entities else "owner"
    out: list[dict] = []
    for item in data:
        if not isinstance(item, dict) or item.get("kind") != "fact":
            continue
        key, value = item.get("key"), item.get("value")
        if not isinstance(key, str) or not key.strip() or value is None:
            continue
        subject = item.get("subject") if isinstance(item.get("subject"), str) else default_subject
        if subject == entity.id or _fold(subject) == _fold(entity.name):
            out.append(item)
    return out


def label_attribution(label: dict, hit: Hit) -> str | None:
    """``owner`` | ``document`` | ``assistant`` from the label, else the line's attribution or source."""
    who = label.get("attribution") if isinstance(label.get("attribution"), str) else None
    return who or hit.attr or SRC_ATTRIBUTION.get(hit.src or "")


def _facts_of(hit: Hit, person: EntityRow) -> list[CardFact]:
    """The line's fact labels about ``person`` that the owner stated or a document holds."""
    out: list[CardFact] = []
    for label in entity_fact_labels(hit, person):
        who = label_attribution(label, hit)
        if who not in ATTRIBUTIONS:
            continue  # assistant-noted or unattributed facts stay off the card
        text = value_text(label["value"])
        if text:
            out.append(
                CardFact(display_key(label["key"]), text, hit.recorded[:10] or hit.day, ATTRIBUTIONS[who])
            )
    return out



def age_text(birth: str, today: date) -> str | None:
    """AMB-40: whole years, and months under two years; ``None`` for partial or future dates."""
    if not _FULL_DATE_RE.fullmatch(birth):
        return None
    try:
        born = date.fromisoformat(birth)
    except ValueError:
        return None
    if born > today:
        return None
    months = (today.year - born.year) * 12 + (today.month - born.month) - (today.day < born.day)
    years = months // 12
    if years >= 2:
        return str(years)
    if years == 1:
        rest = months - 12
        return "1 year" + (f" {rest} month{'s' if rest != 1 else ''}" if rest else "")
    return f"{months} month{'s' if months != 1 else ''}"


def card_lines(
    person: EntityRow,
    hits: Sequence[Hit],
    *,
    now: datetime,
    tz: tzinfo,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> list[str]:
    """The card's fact lines for ``person`` from its candidate lines, keys in a stable order."""
    by_key: dict[str, dict[str, CardFact]] = {}
    for hit in hits:
        if not is_recallable(hit, superseded_ids) or hit.status == "invalidated":
            continue
        if intent_expiry and (hit.due or hit.status in ("done", "dropped")):
            continue  # GUIDE-16, INTENT-22
        if currentness(hit, now=now, tz=tz, superseded_ids=superseded_ids).state != "current":
            continue
        for fact in _facts_of(hit, person):
            values = by_key.setdefault(fact.key, {})
            old = values.get(same_value(fact.value))
            if old is None or fact.recorded > old.recorded:
                values[same_value(fact.value)] = fact  # the same value keeps its latest recording
    lines: list[str] = []
    today = now.astimezone(tz).date()
    for key in sorted(by_key, key=lambda k: (k.casefold(), k)):
        values = by_key[key]
        if len(values) >= 2:
            lines.append(f"- {key}: {CONFLICTING}")
            continue
        fact = next(iter(values.values()))
        text, _ = cut_utf8(fact.value, AUTO_LINE_MAX_BYTES)
        lines.append(f"- {key}: {text} ({fact.attribution}, recorded {fact.recorded})")
        if key.casefold().replace("_", " ") in BIRTH_KEYS and (age := age_text(fact.value, today)):
            lines.append(f"- age: {age}")
    return lines


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


@dataclass(frozen=True)
class PersonCards:
    """Rendered cards (``text`` empty when none) and the byte size they take from the context."""

    text: str
    byte_size: int
    people: tuple[str, ...] = ()  # display names shown (diagnostics only; never entity or memory ids)


NO_CARDS = PersonCards("", 0)


def person_cards(
    message: str,
    reader: GraphReader,
    *,
    now: datetime,
    tz: tzinfo,
    budget: int = PERSON_CARD_MAX_BYTES,
    superseded_ids: Collection[str] | None = None,
    intent_expiry: bool = False,
) -> PersonCards:
    """Cards for every person the message names, within ``budget`` bytes (GUIDE-08, GUIDE-15)."""
    if not message.strip():
        return NO_CARDS
    people = match_people(message, reader.graph().entities)
    if not people:
        return NO_CARDS
    lines_by_id = reader.lines()
    blocks: list[str] = []
    shown: list[str] = []
    for person in people:
        about = (m for m in sorted(lines_by_id) if person.id in lines_by_id[m][1].entities)
        ids = list(dict.fromkeys([*person.memories, *about]))
        hits = [bullet_hit(*lines_by_id[m], score=0.0) for m in ids if m in lines_by_id]
        facts = card_lines(
            person, hits, now=now, tz=tz, superseded_ids=superseded_ids, intent_expiry=intent_expiry
        )
        if not facts:
            continue
        name = " ".join(person.name.split())
        kept = [f"{name}:"]
        if _size("\n".join([CARD_HEADING, "", *blocks, *kept])) > budget:
            break
        for line in facts:
            if _size("\n".join([CARD_HEADING, "", *blocks, *kept, line])) <= budget:
                kept.append(line)  # a line that does not fit is left out, never truncated
        if len(kept) > 1:
            blocks.extend(kept)
            shown.append(name)
    if not blocks:
        return NO_CARDS
    text = "\n".join([CARD_HEADING, "", *blocks])
    return PersonCards(text, _size(text), tuple(shown))
