"""Retained-session receipts for automatic context.

PROFILE-12..16, PROFILE-18..22, REM-20, LIM-58, LIM-59, AMB-48.

A provider that retains its session (a warm conversation) already holds what earlier turns injected.
The host asks ``prepare()`` what to inject this turn and, after the provider call, says with
``confirm()`` whether that call succeeded and the session was retained; only then do the injected lines
become receipts (PROFILE-14). The cache is volatile and bounded: at most 256 conversations (least
recently used goes first) and 256 served-line fingerprints each (PROFILE-18); nothing is persisted, and
a reset, disposal or restart forgets it (PROFILE-19).

- A cold turn (the provider holds nothing: a new or reseeded session) injects everything and, once
  confirmed, replaces the conversation's receipts (PROFILE-13).
- A warm turn leaves out unchanged lines already served (PROFILE-12). The profile is sent again only
  when its text changed; when it became empty, one replacement saying so is sent, once (PROFILE-22).
- A warm turn whose receipts are unknown (evicted, or the process restarted) injects nothing until a
  cold reseed: the deliberate tools stay available (PROFILE-20).
- A full receipt set injects no further warm lines; it never evicts a served line (PROFILE-21).
- An isolated turn never touches the shared session's receipts (PROFILE-15), and a Remember write
  between ``prepare()`` and ``confirm()`` discards nothing pending (PROFILE-16, REM-20).

Fingerprints are SHA-256 digests of a section heading and a line; the cache keeps no memory text.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from tempomem.recall.auto_block import AutoLookup
from tempomem.recall.owner_profile import PROFILE_HEADING

MAX_CONVERSATIONS = 256  # LIM-58
MAX_FINGERPRINTS = 256  # LIM-59
PROFILE_CLEARED = f"{PROFILE_HEADING}\n- (nothing current: earlier profile lines no longer hold)"

Suppressed = Literal["receipts_unknown", "receipts_full"]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Injection:
    """What to put in front of the provider this turn, and the receipts it would establish."""

    conversation_id: str
    text: str  # "" when nothing is injected
    cold: bool
    pending: frozenset[str] = frozenset()
    profile_digest: str | None = None  # the profile state this injection leaves the session in
    suppressed: Suppressed | None = None

    @property
    def byte_size(self) -> int:
        return len(self.text.encode("utf-8"))


@dataclass
class _Receipts:
    lines: set[str] = field(default_factory=set)
    profile: str | None = None  # digest of the profile text the session holds ("" digest: none)


def _sections(lookup: AutoLookup) -> list[str]:
    return [t for t in (lookup.cards.text, lookup.background.text, lookup.block.text) if t]


def _filter_section(text: str, served: set[str], room: int) -> tuple[str, list[str]]:
    """The section without already-served ``- `` lines (at most ``room`` new ones), and their digests.
    Structural lines (headings, a person's name) stay only above a line that is still shown."""
    lines = text.split("\n")
    heading = lines[0]
    kept: list[str] = []
    new: list[str] = []
    pending_structure: list[str] = []
    for raw in lines[1:]:
        if not raw.startswith("- "):
            pending_structure.append(raw)
            continue
        digest = _digest(heading, raw)
        if digest in served or len(new) >= room:
            continue
        kept += pending_structure
        pending_structure = []
        kept.append(raw)
        new.append(digest)
    if not new:
        return "", []
    tail = [x for x in pending_structure if x and not x.startswith("- ")]  # e.g. a conflict note
    return "\n".join([heading, *kept, *tail]), new


class SessionReceiptCache:
    """Per-process, in-memory receipts by conversation id; safe to share between threads."""

    def __init__(
        self, *, max_conversations: int = MAX_CONVERSATIONS, max_fingerprints: int = MAX_FINGERPRINTS
    ) -> None:
        self.max_conversations = max_conversations
        self.max_fingerprints = max_fingerprints
        self._by_conversation: OrderedDict[str, _Receipts] = OrderedDict()
        self._lock = threading.Lock()

    def prepare(self, conversation_id: str, lookup: AutoLookup, *, retained_session: bool) -> Injection:
        """What to inject for this turn. ``retained_session``: the host confirms the provider still holds
        this conversation's earlier turns (a warm turn); ``False`` is a cold (re)seed."""
        profile = lookup.profile.text
        if not retained_session:
            sections = [t for t in (profile, *_sections(lookup)) if t]
            pending: list[str] = []
            for section in _sections(lookup):
                _, digests = _filter_section(section, set(), self.max_fingerprints - len(pending))
                pending += digests
            return Injection(
                conversation_id, "\n\n".join(sections), True, frozenset(pending), _digest(profile)
            )
        with self._lock:
            known = self._by_conversation.get(conversation_id)
            if known is None:
                return Injection(conversation_id, "", False, suppressed="receipts_unknown")
            served, held_profile = set(known.lines), known.profile
        room = self.max_fingerprints - len(served)
        if room <= 0:  # full: no further warm injection, and no served line is ever evicted (PROFILE-21)
            return Injection(conversation_id, "", False, suppressed="receipts_full")
        parts: list[str] = []
        profile_digest = held_profile
        if _digest(profile) != held_profile:
            if profile:
                parts.append(profile)
            elif held_profile is not None:
                parts.append(PROFILE_CLEARED)  # one replacement, never the old text again
            profile_digest = _digest(profile)
        pending = []
        for section in _sections(lookup):
            text, digests = _filter_section(section, served, room - len(pending))
            if text:
                parts.append(text)
                pending += digests
        return Injection(conversation_id, "\n\n".join(parts), False, frozenset(pending), profile_digest)

    def confirm(
        self, injection: Injection, *, invocation_ok: bool, retained: bool, isolated: bool = False
    ) -> None:
        """After the provider call: only a successful call on a retained, shared session creates
        receipts (PROFILE-14, PROFILE-15)."""
        if isolated or not invocation_ok or not retained:
            return
        with self._lock:
            if injection.cold:
                receipts = _Receipts()
            else:
                existing = self._by_conversation.get(injection.conversation_id)
                if existing is None:
                    return  # forgotten meanwhile: the next warm turn stays suppressed until a reseed
                receipts = existing
            receipts.lines |= injection.pending
            receipts.profile = injection.profile_digest
            self._by_conversation[injection.conversation_id] = receipts
            self._by_conversation.move_to_end(injection.conversation_id)
            while len(self._by_conversation) > self.max_conversations:
                self._by_conversation.popitem(last=False)

    def reset(self, conversation_id: str) -> None:
        """The host reset this conversation's provider session: its receipts go (PROFILE-19)."""
        with self._lock:
            self._by_conversation.pop(conversation_id, None)

    def dispose(self) -> None:
        with self._lock:
            self._by_conversation.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_conversation)
