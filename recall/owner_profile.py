"""The optional BuJo owner profile (``memory.profile.enabled``, PROFILE-01..11, PROFILE-24/25, LIM-57).

Derived on every call from the curated daily lines' label projection — no model call, no new file,
store, version or history field (PROFILE-10):

- sources: owner-stated facts about the owner (``attribution: owner``; a key in the ``owner:`` namespace,
  or a line naming no entity) and agent-scope preferences (``scope: agent``), PROFILE-03;
- only current, open lines: not superseded, not ended at the host's observation instant (civil end dates
  inclusive through the host's local day), status ``open``, never an event (an episode) and never a
  dated line (a dated intention), whatever ``intentExpiry`` says (PROFILE-04, PROFILE-06, PROFILE-25);
- a structured key with two or more current distinct values is a conflict: all its sources are left out
  (PROFILE-04);
- whole entries, newest recording first, then by source id; an entry that does not fit ends the
  selection, it is never split (PROFILE-05); heading included, at most 600 code points and at most
  ``memory.maxBytes`` UTF-8 bytes (PROFILE-08); no labels, no profile (PROFILE-09).

The text never shows memory ids, entity ids or conversation provenance.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from tempomem.recall.graph_read import bullet_hit
from tempomem.recall.search import Hit
from tempomem.recall.shaping import currentness, display_key, is_recallable, same_value, value_text
from tempomem.storage.limits import MAX_BYTES_DEFAULT, PROFILE_MAX_CODE_POINTS
from tempomem.storage.markdown import Bullet

PROFILE_HEADING = "## About the owner (from memory; verify before relying)"
# Coarse keys carry a whole statement as their value (AMB-27): each line is its own entry, never a slot.
STATEMENT_KEYS = frozenset({"owner:statement", "preference:stated"})


@dataclass(frozen=True)
class ProfileEntry:
    text: str  # the rendered line, "- …"
    recorded: str  # the source line's recording instant
    source_id: str  # for ordering only; never rendered


@dataclass(frozen=True)
class OwnerProfile:
    text: str  # "" when there is no profile
    entries: tuple[str, ...] = ()

    @property
    def byte_size(self) -> int:
        return len(self.text.encode("utf-8"))


NO_PROFILE = OwnerProfile("")


def _labels(hit: Hit) -> list[dict]:
    try:
        data = json.loads(hit.labels or "")
    except ValueError:
        return []
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def _about_owner(label: dict, hit: Hit) -> bool:
    subject = label.get("subject")
    if isinstance(subject, str):
        return subject == "owner"
    key = label.get("key")
    return (isinstance(key, str) and key.startswith("owner:")) or not hit.entities


def _source_label(label: dict, hit: Hit) -> str | None:
    """``"fact"`` or ``"preference"`` when the label feeds the profile (PROFILE-03), else ``None``."""
    kind, scope = label.get("kind"), label.get("scope")
    who = label.get("attribution") if isinstance(label.get("attribution"), str) else hit.attr
    if kind == "fact" and who == "owner" and _about_owner(label, hit):
        return "fact"
    if kind == "preference" and scope == "agent":
        return "preference"
    return None


def _entry_text(label: dict) -> str | None:
    key, value = label.get("key"), label.get("value")
    if not isinstance(key, str) or value is None:
        return None
    text = value_text(value)
    if not text:
        return None
    if key in STATEMENT_KEYS:
        return f"- {text}"
    name = display_key(key).removeprefix("owner:").removeprefix("preference:")
    return f"- {name}: {text}"


def owner_profile(
    lines: Iterable[tuple[str, Bullet]],
    *,
    now: datetime,
    tz: tzinfo,
    max_bytes: int = MAX_BYTES_DEFAULT,
    superseded_ids: Collection[str] | None = None,
) -> OwnerProfile:
    """The profile from curated ``(day, bullet)`` lines; ``NO_PROFILE`` when nothing qualifies."""
    candidates: list[tuple[Hit, dict, str]] = []
    for day, bullet in lines:
        hit = bullet_hit(day, bullet, score=0.0)
        if hit.status != "open" or hit.type == "event" or hit.due or not is_recallable(hit, superseded_ids):
            continue  # PROFILE-04: open notes only; no episodes, no dated intentions (PROFILE-25)
        if currentness(hit, now=now, tz=tz, superseded_ids=superseded_ids).state != "current":
            continue  # superseded or ended at the observation instant (PROFILE-06)
        for label in _labels(hit):
            kind = _source_label(label, hit)
            if kind is not None:
                candidates.append((hit, label, kind))
    values: dict[tuple[str, str, str], set[str]] = {}
    for _hit, label, kind in candidates:
        key = label.get("key")
        if isinstance(key, str) and key not in STATEMENT_KEYS:
            values.setdefault((kind, key, str(label.get("scope"))), set()).add(
                same_value(value_text(label.get("value")))
            )
    entries: list[ProfileEntry] = []
    seen: set[str] = set()
    for hit, label, kind in candidates:
        key = label.get("key")
        if len(values.get((kind, str(key), str(label.get("scope"))), ())) > 1:
            continue  # a conflicting structured value: leave every source of it out (PROFILE-04)
        text = _entry_text(label)
        if text is None or text in seen:
            continue
        seen.add(text)
        entries.append(ProfileEntry(text, hit.recorded, hit.id))
    if not entries:
        return NO_PROFILE  # PROFILE-09
    entries.sort(key=lambda e: e.source_id)
    entries.sort(key=lambda e: e.recorded, reverse=True)  # newest first, then source id (PROFILE-05)
    kept: list[str] = []
    for entry in entries:
        text = "\n".join([PROFILE_HEADING, *kept, entry.text])
        if len(text) > PROFILE_MAX_CODE_POINTS or len(text.encode("utf-8")) > max_bytes:
            break  # whole entries only (PROFILE-05, PROFILE-08)
        kept.append(entry.text)
    if not kept:
        return NO_PROFILE
    return OwnerProfile("\n".join([PROFILE_HEADING, *kept]), tuple(kept))
