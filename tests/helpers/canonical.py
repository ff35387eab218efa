"""The bytes of a store's canonical semantic state (daily Markdown, graph, replay sidecar), for tests that
compare a crashed-and-resumed store with an uninterrupted one (RPL-06..RPL-08)."""

from __future__ import annotations

from pathlib import Path

CANONICAL = ("daily", "graph.jsonl", ".replay-projection-v1.json")


def canonical_bytes(root: Path) -> dict[str, bytes]:
    out = {}
    for name in CANONICAL:
        path = root / name
        for f in sorted(path.rglob("*") if path.is_dir() else [path]):
            if f.is_file():
                out[str(f.relative_to(root))] = f.read_bytes()
    return out
