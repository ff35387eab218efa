"""Where the LoCoMo benchmark data lives: ``$TEMPOMEM_LOCOMO``, else ``../shared/data/locomo/`` beside the
repository (never a machine path). Tests that need it skip, saying where they looked, when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCOMO_ENV = "TEMPOMEM_LOCOMO"


def locomo_file() -> Path:
    """The LoCoMo dev file (it may not exist: see ``require_locomo``)."""
    found = os.environ.get(LOCOMO_ENV)
    return Path(found) if found else REPO.parent / "shared" / "data" / "locomo" / "locomo-dev.json"


def require_locomo() -> Path:
    path = locomo_file()
    if not path.is_file():
        pytest.skip(f"LoCoMo data not found at {path} (set {LOCOMO_ENV})")
    return path
