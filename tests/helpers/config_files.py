"""Config files for driving the CLI in-process against a store a test built."""

from __future__ import annotations

import json
from pathlib import Path


def bujo_config_file(path: Path, root: Path) -> Path:
    """A BuJo config at ``path`` for the store at ``root``: the embedded embedder, a chat model that is
    never called by the commands these tests run."""
    memory = {
        "mode": "bujo",
        "path": str(root),
        "embeddings": {"provider": "local"},
        "llm": {"provider": "ollama", "model": "m"},
    }
    path.write_text(json.dumps({"memory": memory}))
    return path
