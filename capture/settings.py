"""The ``memory.llm`` / ``memory.capture`` settings capture needs, as plain values (no config import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tempomem.capture.model_client import HostModelClient, ProviderEndpoint


@dataclass(frozen=True)
class CaptureSettings:
    """The ``memory.llm`` / ``memory.capture`` settings capture needs, as plain values (no config import)."""

    llm_provider: str
    llm_model: str
    llm_endpoint: str | None = None
    timeout_ms: int = 60_000
    reconcile_model: str | None = None  # an agent-host reference used for classification only (CAP-08)
    # Resolved at start from the config and the environment; in memory only, never logged (repr=False).
    llm_api_key: str | None = field(default=None, repr=False)
    providers: Mapping[str, ProviderEndpoint] = field(default_factory=dict, repr=False)
    host_client: HostModelClient | None = field(default=None, repr=False)
    focus: str | None = None
    only: tuple[str, ...] | None = None
    intent_lifecycle: bool = False
    concurrency: int = 1  # memory.llm.concurrency: extraction/review calls of this store in flight
