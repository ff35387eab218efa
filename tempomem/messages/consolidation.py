"""What crosses Temporal for a consolidation: names, the store id and content-free counts.

Shared by the workflow (sandboxed) and its activities and starters, so this module imports nothing but
the stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass

CONSOLIDATION_WORKFLOW = "ConsolidationWorkflow"
CONSOLIDATE = "consolidation.regenerate_index"


def consolidation_workflow_id(store_id: str) -> str:
    return f"tempomem-consolidate-run-{store_id}"


@dataclass(frozen=True)
class ConsolidationInput:
    store_id: str


@dataclass(frozen=True)
class ConsolidationResult:
    """Content-free: what ``index.md`` now holds, in counts, and its digest."""

    index_sha256: str
    index_bytes: int
    changed: bool
    daily_lines: int
    duplicate_groups: int
    duplicate_lines: int
    graph_rows: int
    graph_rows_scanned: int
    graph_truncated: bool
    graph_error: str | None
    entity_groups: int
    entity_groups_shown: int
