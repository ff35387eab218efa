"""Hand-made BuJo stores for the recall side: labelled ``daily/`` bullets and ``graph.jsonl`` rows written
with the real storage writers (person cards, the MemoryRecall fact sheet)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from tempomem.recall.graph_read import GraphReader
from tempomem.storage import graph as g
from tempomem.storage.markdown import Bullet, append_bullets

SECRET_SESSION = "web:thread-secret-42"
_ids = itertools.count(1)


def fact(
    key: str, value: Any, attribution: str | None = "owner", subject: str | None = None, **extra: Any
) -> dict[str, Any]:
    label: dict[str, Any] = {"kind": "fact", "scope": "user:owner", "key": key, "value": value, **extra}
    if attribution:
        label["attribution"] = attribution
    if subject:
        label["subject"] = subject
    return label


def line(text: str, labels: list[dict[str, Any]], *entities: str, **kw: Any) -> Bullet:
    return Bullet(
        signifier=kw.pop("signifier", "–"),
        text=text,
        id=kw.pop("id", f"c-{next(_ids):04d}"),
        type=kw.pop("type", "fact"),
        status=kw.pop("status", "open"),
        recorded=kw.pop("recorded", "2026-09-06T10:00:00.000Z"),
        labels=json.dumps(labels),
        entities=tuple(entities) or ("person:morgan",),
        source_session=kw.pop("source_session", SECRET_SESSION),
        **kw,
    )


def write(root: Path, bullets: list[Bullet], people: dict[str, str] | None = None) -> GraphReader:
    (root / "daily").mkdir(mode=0o700, parents=True, exist_ok=True)
    append_bullets(root / "daily" / "2026-09-06.md", "2026-09-06", bullets)
    people = people if people is not None else {"person:morgan": "Morgan"}
    rows = [
        {"id": eid, "name": name, "type": "person", "memories": [b.id for b in bullets if eid in b.entities]}
        for eid, name in people.items()
    ]
    rows.append(
        {
            "id": "org:acme",
            "name": "Acme",
            "type": "organization",
            "memories": [b.id for b in bullets if "org:acme" in b.entities],
        }
    )
    g.apply(root, rows)
    return GraphReader(root)
