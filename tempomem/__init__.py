"""tempomem: durable, observable long-term memory for AI agents, orchestrated by Temporal.

The host API::

    from tempomem import MemoryStore, CompletedTurn, load_config

    store = MemoryStore(load_config("tempomem.json"))
    result = await store.persist_completed_turn(CompletedTurn(...))
    recalled = await store.recall("where do I live?")

Names load lazily (PEP 562), so ``import tempomem`` stays cheap and pulls in neither Temporal nor the
index; ``tempomem.worker`` registers tempomem's workflows and activities on a team's own client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # host API
    "MemoryStore": "tempomem.store",
    "StoreClosedError": "tempomem.store",
    "CompletedTurn": "tempomem.storage.turn",
    "AdmissionResult": "tempomem.storage.turn",
    "AdmissionStatus": "tempomem.storage.turn",
    # configuration
    "load_config": "tempomem.config",
    "load_config_data": "tempomem.config",
    "default_config": "tempomem.config",
    "TempomemConfig": "tempomem.config",
    "ConfigError": "tempomem.config",
    # results a host reads
    "RecallResult": "tempomem.recall.tools",
    "RecallInputError": "tempomem.recall.tools",
    "JournalResult": "tempomem.recall.journal",
    "JournalError": "tempomem.recall.journal",
    "AutoLookup": "tempomem.recall.auto_block",
    "Hit": "tempomem.recall.search",
    "RememberResult": "tempomem.storage.remember",
    "RememberRejected": "tempomem.storage.remember",
    # errors admission raises
    "IntakeError": "tempomem.storage.intake",
    "IntakeConflictError": "tempomem.storage.intake",
    "IntakeCapacityError": "tempomem.storage.intake",
    "IntakeCorruptError": "tempomem.storage.intake",
    # your own worker
    "store_worker_parts": "tempomem.worker",
}

__all__ = [  # the same names as _EXPORTS (tests/test_public_api.py checks)
    "AdmissionResult",
    "AdmissionStatus",
    "AutoLookup",
    "CompletedTurn",
    "ConfigError",
    "Hit",
    "IntakeCapacityError",
    "IntakeConflictError",
    "IntakeCorruptError",
    "IntakeError",
    "JournalError",
    "JournalResult",
    "MemoryStore",
    "RecallInputError",
    "RecallResult",
    "RememberRejected",
    "RememberResult",
    "StoreClosedError",
    "TempomemConfig",
    "default_config",
    "load_config",
    "load_config_data",
    "store_worker_parts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tempomem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # static tools see the real names
    from tempomem.config import (
        ConfigError,
        TempomemConfig,
        default_config,
        load_config,
        load_config_data,
    )
    from tempomem.recall.auto_block import AutoLookup
    from tempomem.recall.journal import JournalError, JournalResult
    from tempomem.recall.search import Hit
    from tempomem.recall.tools import RecallInputError, RecallResult
    from tempomem.storage.intake_records import (
        IntakeCapacityError,
        IntakeConflictError,
        IntakeCorruptError,
        IntakeError,
    )
    from tempomem.storage.remember import RememberRejected, RememberResult
    from tempomem.storage.turn import AdmissionResult, AdmissionStatus, CompletedTurn
    from tempomem.store import MemoryStore, StoreClosedError
    from tempomem.worker import store_worker_parts
