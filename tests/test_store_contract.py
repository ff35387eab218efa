"""STORE-01, STORE-02, CFG-30: enabled writing needs a store that implements persist_completed_turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from tempomem.config import ConfigError, load_config_data
from tempomem.store import MemoryStore
from tempomem.store_contract import WritableStore, require_writable_store


class ReadOnlyStore:
    """An external backend that can search but owns no admission."""

    def search(self, query: str, *, limit: int = 8) -> list:
        return []


def test_the_built_in_store_is_writable(tmp_path: Path) -> None:
    store = MemoryStore(load_config_data({"memory": {"mode": "lite", "path": str(tmp_path / "m")}}))
    assert isinstance(store, WritableStore)
    for mode in ("append-host-summary", "disabled"):
        require_writable_store(store, mode)
    store.close()


@pytest.mark.parametrize("mode", ["append-host-summary", "capture"])
def test_a_read_only_store_with_writing_on_is_refused_by_name(mode: str) -> None:
    with pytest.raises(ConfigError) as err:
        require_writable_store(ReadOnlyStore(), mode)
    [violation] = err.value.violations
    assert violation.path == "memory.writeMode" and "persist_completed_turn" in violation.message


def test_a_read_only_store_is_fine_with_writing_disabled() -> None:
    require_writable_store(ReadOnlyStore(), "disabled")
