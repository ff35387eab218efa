"""Replay-sidecar entries and raw sidecar files (tests/test_replay_sidecar*.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tempomem.storage.replay_sidecar import (
    SIDECAR_NAME,
    Authority,
    Entry,
    entry_id,
)

AT = "2026-03-04T05:06:07.089Z"
DIGEST = "ab" * 32


def sup(old: str, new: str, *, at: str = AT, digest: str = DIGEST) -> Entry:
    return Entry(
        id=entry_id("supersede", old, new),
        kind="supersede",
        from_=old,
        to=new,
        at=at,
        authority=Authority(kind="capture", digest=digest),
    )


def thread(a: str, b: str, weight: int) -> Entry:
    return Entry(
        id=entry_id("thread", a, b),
        kind="thread",
        from_=a,
        to=b,
        weight=weight,
        at=AT,
        authority=Authority(kind="capture", digest=DIGEST),
    )


def raw_entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "at": AT,
        "authority": {"digest": DIGEST, "kind": "capture"},
        "from": "c-old",
        "id": "sup-1",
        "kind": "supersede",
        "to": "c-new",
    }
    entry.update(overrides)
    return entry


def write_raw(root: Path, data: bytes, mode: int = 0o600) -> Path:
    path = root / SIDECAR_NAME
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def canonical_doc(entries: list[dict[str, Any]]) -> bytes:
    return json.dumps({"entries": entries, "version": 1}, sort_keys=True, separators=(",", ":")).encode()
