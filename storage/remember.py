"""The Remember write: one explicit fact, written to ``daily/`` and indexed at once (REM-01..REM-19).

``remember`` runs the whole write in one critical section under ``exclusive_lock(root / STORE_LOCK)``
(the lock capture commits and projection hold too, INTAKE-15):

1. guards that need no state (tier arguments, credential and unsafe text) — a rejection writes nothing;
2. under the lock: find the canonical bullet by id (``r-`` + SHA-256 of the NFC text, REM-12), check
   ``about`` against ``graph.jsonl`` (REM-05) and ``supersedes`` against Markdown + the sidecar (REM-06,
   REM-07) — still nothing written on a rejection;
3. append the bullet (idempotent by id), publish the supersession edge to the replay sidecar, upsert the
   canonical bullet into the index (REM-02, REM-15).

Every step is idempotent, so a retry after a crash at any boundary converges: the Markdown line is not
duplicated, a missing sidecar edge or index row is completed, and the line keeps the ``source_session``
of the write that created it (REM-18, PROV-12), because the index is fed the bullet read back from disk.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from tempomem.storage import replay_sidecar
from tempomem.storage.credentials import contains_credential, unsafe_reason
from tempomem.storage.fsio import ensure_private_dir, exclusive_lock
from tempomem.storage.graph import entities_by_id
from tempomem.storage.instants import format_instant
from tempomem.storage.markdown import Bullet, append_bullets, iter_bullets
from tempomem.storage.replay_sidecar import ID_PATTERN, Authority, Entry, entry_id
from tempomem.storage.store_ref import STORE_LOCK

if TYPE_CHECKING:
    from tempomem.recall.index import MemoryIndex

Tier = Literal["lite", "journal", "bujo"]
REMEMBER_PREFIX = "r-"
REMEMBER_TYPE = "fact"
DAILY = "daily"
# REM-07: what a Remember may replace. Captured notes/events (by type) and enhanced Remember writes.
SUPERSEDABLE_CAPTURE_TYPES = frozenset({"note", "event"})
PROTECTED_TYPES = frozenset({"fact", "preference", "lesson"})  # owner-stated kinds, never replaced

REASONS = frozenset(
    {
        "credential_rejected",  # AMB-26
        "unsafe_text",  # AMB-25 (detail: the sub-code)
        "unsupported_on_tier",  # AMB-52
        "invalid_reference",  # about/supersedes is not an id
        "unknown_person",  # REM-05: about names no entity
        "not_a_person",  # REM-05: about names a non-person entity
        "unknown_target",  # REM-06: supersedes names no canonical daily line
        "protected_target",  # REM-07: owner-stated / labelled / task / text-only Remember line
        "not_current",  # REM-06: target already superseded, forgotten, dropped or invalidated
        "self_supersede",  # the new text is the target's text
        "tool_disabled",  # REM-03: memory.rememberTool.enabled is false
    }
)


class RememberRejected(Exception):
    """Remember refused the write and wrote nothing. ``reason`` ∈ :data:`REASONS`; content-free."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        self.detail = detail
        super().__init__(reason if detail is None else f"{reason}: {detail}")


class RememberResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["written", "duplicate", "completed_index"]
    id: str
    day: str  # the day file holding the canonical line (the original day for a duplicate)
    superseded: str | None = None  # the id this write replaced, when it did


def normalise_text(text: str) -> str:
    """NFC, outer whitespace removed: the exact text that is stored and hashed."""
    return unicodedata.normalize("NFC", text).strip()


def remember_id(text: str) -> str:
    """REM-12: the bullet id derives from the content hash, so exact repeats are idempotent."""
    return REMEMBER_PREFIX + hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:40]


def _iso_ms(now: dt.datetime) -> str:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    return format_instant(now)


def supersede_refusal(bullet: Bullet) -> str | None:
    """REM-07 on the target's own metadata: ``None`` when Remember may replace it, else a reason."""
    if bullet.id.startswith(REMEMBER_PREFIX):
        # Enhanced Remember writes carry attr=assistant (REM-08); text-only ones are protected (REM-11).
        return None if bullet.attr == "assistant" else "protected_target"
    if bullet.type in PROTECTED_TYPES or bullet.type not in SUPERSEDABLE_CAPTURE_TYPES:
        return "protected_target"
    if bullet.attr == "owner" or bullet.labels:  # owner-stated, or carrying fact/preference/lesson labels
        return "protected_target"
    return None


def _check_reference(value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or re.fullmatch(ID_PATTERN, value) is None):
        raise RememberRejected("invalid_reference")


def remember(
    root: Path,
    *,
    tier: Tier,
    text: str,
    conversation_id: str | None,
    now: dt.datetime,
    about: str | None = None,
    supersedes: str | None = None,
    replaceable: bool = False,
    index: MemoryIndex | None,
) -> RememberResult:
    """Store one explicit fact now (REM-01). Raises :class:`RememberRejected` with nothing written.

    ``index`` is the store's recall index (``MemoryIndex(root, embedder)``, embedder ``None`` on Lite);
    ``None`` skips indexing (the caller then owns it). An ``EmbeddingError`` from the index propagates
    after the line is written and lexically searchable; a retry completes the vector (REM-15).
    """
    root = Path(root)
    if tier not in ("lite", "journal", "bujo"):
        raise ValueError(f"unknown tier {tier!r}")
    enhanced = about is not None or supersedes is not None or bool(replaceable)
    if enhanced and tier != "bujo":
        raise RememberRejected("unsupported_on_tier")  # AMB-52, REM-10
    if not isinstance(text, str):
        raise TypeError("text must be a string")
    stored = normalise_text(text)
    if contains_credential(stored) or contains_credential(text):
        raise RememberRejected("credential_rejected")  # REM-16, AMB-26
    if (why := unsafe_reason(stored)) is not None:
        raise RememberRejected("unsafe_text", why)  # AMB-25
    _check_reference(about)
    _check_reference(supersedes)
    recorded = _iso_ms(now)
    day = recorded[:10]  # UTC day of the write
    new_id = remember_id(stored)
    if supersedes == new_id:
        raise RememberRejected("self_supersede")
    if index is not None and os.path.realpath(index.root) != os.path.realpath(root):
        raise ValueError("index belongs to another memory root")

    ensure_private_dir(root)
    with exclusive_lock(root / STORE_LOCK):
        existing_day, existing = _find(root, new_id)
        if about is not None:
            _check_person(root, about)
        if supersedes is not None:
            _check_target(root, supersedes, new_id)

        if existing is None:
            bullet = Bullet(
                signifier="–",
                text=stored,
                id=new_id,
                type=REMEMBER_TYPE,
                status="open",
                recorded=recorded,
                entities=(about,) if about is not None else (),
                src="assistant" if enhanced else None,
                attr="assistant" if enhanced else None,  # REM-08: never verified owner
                replaceable=bool(replaceable),
                source_session=conversation_id,  # PROV-05: the host conversation id only
            )
            append_bullets(root / DAILY / f"{day}.md", day, [bullet])
            # Read back what is canonical now (REM-18): this is what the index must mirror.
            existing_day, existing = _find(root, new_id)
            assert existing is not None and existing_day is not None
            status: Literal["written", "duplicate", "completed_index"] = "written"
        else:
            status = "duplicate"
        assert existing_day is not None

        if supersedes is not None:
            # The edge's time and digest come from the canonical line, so a retry is byte-identical.
            digest = replay_sidecar.authority_digest("remember", supersedes, existing.id, existing.recorded)
            replay_sidecar.apply_delta(
                root,
                [
                    Entry(
                        id=entry_id("supersede", supersedes, existing.id),
                        kind="supersede",
                        from_=supersedes,
                        to=existing.id,
                        at=existing.recorded,
                        authority=Authority(kind="remember", digest=digest),
                    )
                ],
            )

        if index is not None:
            before = index.active_generation()
            changed = index.upsert([(existing_day, existing)])
            if status == "duplicate" and (changed or before is None or index.active_generation() != before):
                status = "completed_index"  # REM-15: the canonical line's row was missing or stale
    return RememberResult(status=status, id=existing.id, day=existing_day, superseded=supersedes)


def _find(root: Path, bullet_id: str) -> tuple[str | None, Bullet | None]:
    found: tuple[str | None, Bullet | None] = (None, None)
    for day, bullet in iter_bullets(root, DAILY):
        if bullet.id == bullet_id:
            found = (day, bullet)  # a later occurrence wins, as in the index
    return found


def _check_person(root: Path, about: str) -> None:
    entity = entities_by_id(root).get(about)  # a malformed graph raises GraphError: fail closed
    if entity is None:
        raise RememberRejected("unknown_person")
    if entity.type != "person":
        raise RememberRejected("not_a_person")


def _check_target(root: Path, target_id: str, new_id: str) -> None:
    """REM-06/REM-07: the target may be replaced now, or already was by this very write (a retry)."""
    _day, target = _find(root, target_id)
    if target is None:
        raise RememberRejected("unknown_target")
    if (why := supersede_refusal(target)) is not None:
        raise RememberRejected(why)
    replaced = replay_sidecar.superseded(root).get(target_id)
    if replaced is not None:
        if replaced.new_id == new_id:
            return  # a retry of this very write: converge
        raise RememberRejected("not_current")
    projection = replay_sidecar.load(root)
    ended = {e.from_ for e in projection.entries if e.kind == "terminal"} | {
        e.from_ for e in projection.entries if e.kind == "lifecycle" and e.to == "superseded"
    }
    if target_id in ended or target.status in ("dropped", "invalidated"):
        raise RememberRejected("not_current")
