"""A small store with every canonical file, and archive readers and rewriters (tests/test_export*.py)."""

from __future__ import annotations

import io
import tarfile
from datetime import UTC, datetime
from pathlib import Path

from tempomem import export as ex
from tempomem.storage import graph as graph_store
from tempomem.storage import replay_sidecar
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import build_payload
from tempomem.storage.markdown import Bullet, append_bullets
from tempomem.storage.replay_sidecar import Authority, Entry, entry_id
from tempomem.storage.turn import CompletedTurn

T0 = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
SECRET = "my passport number is X1234567"


def bullet(bid: str, text: str) -> Bullet:
    return Bullet(signifier="–", text=text, id=bid, type="fact", status="open", recorded="2026-03-04")


def sup(old: str, new: str) -> Entry:
    return Entry(
        id=entry_id("supersede", old, new),
        kind="supersede",
        from_=old,
        to=new,
        at="2026-03-04T05:06:07.089Z",
        authority=Authority(kind="capture", digest="ab" * 32),
    )


def make_store(root: Path) -> Path:
    append_bullets(root / "daily" / "2026-03-04.md", "2026-03-04", [bullet("m-1", "Ana lives in Lisbon")])
    append_bullets(root / "daily" / "2026-03-05.md", "2026-03-05", [bullet("m-2", "Ana likes tea")])
    append_bullets(root / "audit" / "2026-03-05.md", "2026-03-05", [bullet("a-1", "captured run")])
    graph_store.apply(
        root,
        [{"id": "ana", "name": "Ana", "type": "person", "memories": ["m-1"]}],
        [],
    )
    replay_sidecar.apply_delta(root, [sup("m-0", "m-1")])
    turn = CompletedTurn(
        run_id="run-1",
        conversation_id="web:1",
        speaker_kind="human-turn",
        user_text=SECRET,
        final_answer="Noted.",
        admitted_at=T0,
    )
    Intake(root).admit(build_payload(turn, write_mode="append-host-summary", tier="lite"))
    return root


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root except locks and staging: what a user would diff."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.endswith(".lock"):
            out[rel] = p.read_bytes()
    return out


def canonical(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree(root).items() if ex.is_canonical(k)}


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def rewrite(archive: Path, out: Path, edit) -> Path:
    """Copy an archive member by member through ``edit(info, data) -> (info, data) | None``."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for m in src:
            data = src.extractfile(m).read() if m.isfile() else b""  # type: ignore[union-attr]
            res = edit(m, data)
            if res is None:
                continue
            info, data = res
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out
