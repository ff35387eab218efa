"""Tier projections of an admitted record into canonical Markdown (TIER-01, TIER-03, TIER-07, TIER-10).

Idempotent per run id: the bullet id is derived from the record (Lite, BuJo audit) or from the
normalised text (Journal), and ``append_bullets`` skips ids already in the file, so a replay after a
crash never writes a second line.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from tempomem.storage.intake_records import IntakePayload
from tempomem.storage.markdown import Bullet, append_bullets

_WHITESPACE = re.compile(r"\s+")


def journal_identity(text: str) -> str:
    """TIER-03: case-preserving, NFKC- and whitespace-normalised SHA-256 of the observation."""
    normalised = _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()


def observation_id(payload: IntakePayload) -> str:
    """The bullet id a record projects to, per tier."""
    if payload.tier == "journal":
        return f"j-{journal_identity(payload.summary)[:40]}"
    prefix = "a" if payload.tier == "bujo" else "h"
    return f"{prefix}-{payload.id[:40]}"


@dataclass(frozen=True)
class Projected:
    folder: str  # "daily" (recallable) or "audit" (never indexed)
    day: str
    added: tuple[Bullet, ...]
    bullet: Bullet


def project(root: Path, payload: IntakePayload) -> Projected:
    """Write the record's observation to daily/ (Lite, Journal) or audit/ (BuJo), once."""
    day = payload.admitted_at[:10]  # AMB-20: UTC date of the immutable admission instant
    folder = "audit" if payload.tier == "bujo" else "daily"
    bullet = Bullet(
        signifier="–",
        text=payload.summary,
        id=observation_id(payload),
        type="observation",
        status="open",
        recorded=payload.admitted_at,
        src="assistant",
        source_session=payload.conversation_id,  # PROV-05: host conversation id, never model output
    )
    added = append_bullets(Path(root) / folder / f"{day}.md", day, [bullet])
    return Projected(folder=folder, day=day, added=(bullet,) if added else (), bullet=bullet)
