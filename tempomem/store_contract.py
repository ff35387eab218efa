"""The store contract a host relies on (STORE-01, STORE-02, CFG-30, STORE-11).

A host writes every completed turn through ``persist_completed_turn``; ``MemoryStore`` implements it with
the durable intake. A store the host gets from elsewhere (an external backend) may be read-only, but then
writing must be off: ``require_writable_store`` refuses enabled writing on a store without the method,
before the host serves a turn, naming the setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tempomem.config import ConfigError, ConfigViolation

if TYPE_CHECKING:
    from tempomem.storage.turn import AdmissionResult, CompletedTurn


@runtime_checkable
class WritableStore(Protocol):
    """A store that owns durable, run-id-idempotent admission of completed turns (STORE-02)."""

    async def persist_completed_turn(self, turn: CompletedTurn) -> AdmissionResult: ...


def require_writable_store(store: object, write_mode: str) -> None:
    """CFG-30: with ``memory.writeMode`` other than ``disabled`` the store must be a ``WritableStore``;
    a read-only store is fine only with writing disabled. Raises ``ConfigError`` naming the key."""
    if write_mode != "disabled" and not isinstance(store, WritableStore):
        raise ConfigError(
            [
                ConfigViolation(
                    path="memory.writeMode",
                    message=f'is "{write_mode}", but the store ({type(store).__name__}) has no '
                    'persist_completed_turn: set writeMode "disabled" or use a writable store (STORE-02)',
                )
            ]
        )
