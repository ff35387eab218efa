"""Consolidation: index.md from daily/ and graph.jsonl, LLM-free, never touching canonical memory.

Covers TIER-13, AMB-01, GRAPH-12..14 (ceiling, ≤ 50 lexical groups, time nodes filtered, names collapsed)
and the Temporal side: ConsolidationWorkflow on the store's worker and its Schedule.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from tempomem.activities.consolidation import consolidation_schedule_id, ensure_consolidation_schedule
from tempomem.backfill import consolidate_now
from tempomem.storage import graph
from tempomem.storage.consolidation import (
    INDEX_NAME,
    MAX_GROUPS,
    consolidate,
    duplicate_groups,
    entity_preview,
    render_index,
)
from tempomem.storage.markdown import Bullet, append_bullets
from tempomem.storage.replay_projection import sidecar_path
from tests.conftest import make_store
from tests.test_backfill import backfill_worker

REC = "2026-12-03T09:30:15.123Z"


def bullet(i: int, text: str, status: str = "open") -> Bullet:
    return Bullet(signifier="–", text=text, id=f"c-{i:04d}", type="fact", status=status, recorded=REC)


def seed(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    append_bullets(
        root / "daily" / "2026-12-03.md",
        "2026-12-03",
        [
            bullet(1, "Ana is vegetarian."),
            bullet(2, "ana is VEGETARIAN"),  # same words, same order (AMB-18)
            bullet(3, "Vegetarian is Ana."),  # same words, other order: not a duplicate
            bullet(4, "The boiler was serviced."),
            bullet(5, "the boiler — was serviced!!"),
            bullet(6, "Ana is vegetarian", status="invalidated"),  # superseded: not live
        ],
    )
    append_bullets(
        root / "daily" / "2026-12-04.md",
        "2026-12-04",
        [bullet(7, "Ana is vegetarian!"), bullet(8, "Unique.")],
    )
    graph.apply(
        root,
        entities=[
            {"id": "person:ana", "name": "Ana", "type": "person", "memories": ["c-0001", "c-0002", "c-0007"]},
            {"id": "person:ana-2", "name": "ANA", "type": "person", "memories": ["c-0003"]},  # collapses
            {"id": "org:acme", "name": "Acme", "type": "organization", "memories": ["c-0004"]},
            {"id": "time:friday", "name": "Friday", "type": "time", "memories": ["c-0001"]},
            {"id": "concept:may-2023", "name": "8 May, 2023", "type": "concept", "memories": ["c-0008"]},
            {"id": "person:may", "name": "May", "type": "person", "memories": ["c-0008"]},
        ],
        relations=[graph.relation("person:ana", "works at", "org:acme", ["c-0004"])],
    )
    sidecar_path(root).write_bytes(b'{"version":1,"entries":[]}\n')


def canonical_bytes(root: Path) -> dict[str, str]:
    files = [*sorted((root / "daily").glob("*.md")), root / "graph.jsonl", sidecar_path(root)]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_index_counts_exact_duplicates_and_previews_entities(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    seed(root)
    before = canonical_bytes(root)
    report = consolidate(root)
    text = (root / INDEX_NAME).read_text(encoding="utf-8")
    assert canonical_bytes(root) == before  # no canonical mutation (TIER-13)
    assert (report.changed, report.daily_lines) == (True, 7)
    # {1, 2, 7} and {4, 5}; "Vegetarian is Ana." is another order; the invalidated line is history.
    assert (report.duplicate_groups, report.duplicate_lines) == (2, 3)
    assert "- 3× Ana is vegetarian. — first 2026-12-03 c-0001" in text
    assert "- 2× The boiler was serviced. — first 2026-12-03 c-0004" in text
    # Entities: Ana/ANA collapse; Friday (time) and "8 May, 2023" (a date concept) are ephemeral; May the
    # person stays.
    assert (report.entity_groups, report.graph_rows, report.graph_rows_scanned) == (3, 7, 7)
    lines = [line for line in text.splitlines() if line.startswith("- **")]
    assert lines[0] == ("- **Ana** (person) — 4 memories · 1 relations · `person:ana` · also person:ana-2")
    assert [line.split("**")[1] for line in lines] == ["Ana", "Acme", "May"]
    assert "Friday" not in text and "2023" not in text
    # Deterministic: the same memory renders the same bytes, and an unchanged index is not rewritten.
    again = consolidate(root)
    assert (again.changed, again.index_sha256) == (False, report.index_sha256)
    assert (root / INDEX_NAME).read_text(encoding="utf-8") == text
    assert render_index(root)[0] == text


def test_preview_is_bounded_by_the_scan_ceiling_and_50_groups(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    graph.apply(
        root,
        entities=[
            {"id": f"concept:c{i:03d}", "name": f"Topic {i}", "type": "concept", "memories": [f"m-{i}"]}
            for i in range(120)
        ],
    )
    preview = entity_preview(root, ceiling=30)
    assert (preview.scanned, preview.truncated, preview.total_groups, len(preview.groups)) == (
        30,
        True,
        30,
        30,
    )
    full = entity_preview(root)
    assert (full.scanned, full.truncated, full.total_groups, len(full.groups)) == (
        120,
        False,
        120,
        MAX_GROUPS,
    )
    # 60 duplicate groups: every one counted, 50 listed.
    append_bullets(
        root / "daily" / "2026-12-03.md",
        "2026-12-03",
        [bullet(i * 2 + k, f"Line number {i} repeated") for i in range(60) for k in range(2)],
    )
    dups = duplicate_groups(root)
    assert (dups.total_groups, dups.duplicate_lines, len(dups.groups)) == (60, 60, MAX_GROUPS)
    text, report = render_index(root)
    assert report.entity_groups_shown == MAX_GROUPS
    assert text.count("× Line number") == MAX_GROUPS


def test_unreadable_graph_is_reported_not_fatal(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    seed(root)
    (root / "graph.jsonl").write_text('{"row":"entity"}\n', encoding="utf-8")
    report = consolidate(root)
    assert report.graph_error is not None and report.duplicate_groups == 2
    assert "could not be read" in (root / INDEX_NAME).read_text(encoding="utf-8")


async def test_consolidation_workflow_and_schedule(client: Client, tmp_path: Path) -> None:
    store = make_store(tmp_path / "mem", client, mode="lite")
    seed(store.root)
    before = canonical_bytes(store.root)
    ctx = store.worker_context(client)
    async with backfill_worker(client, store):
        result = await consolidate_now(client, store)
        assert (result.changed, result.duplicate_groups, result.entity_groups) == (True, 2, 3)
        index = store.root / INDEX_NAME
        data = index.read_bytes()
        assert hashlib.sha256(data).hexdigest() == result.index_sha256
        # The schedule: created once, then found (its interval updated in place).
        assert await ensure_consolidation_schedule(client, ctx, every=timedelta(hours=1)) is True
        try:
            assert await ensure_consolidation_schedule(client, ctx, every=timedelta(minutes=30)) is False
            handle = client.get_schedule_handle(consolidation_schedule_id(store.store_id))
            description = await handle.describe()
            assert [i.every for i in description.schedule.spec.intervals] == [timedelta(minutes=30)]
            index.unlink()
            await handle.trigger()
            deadline = time.monotonic() + 60
            while not index.exists():
                assert time.monotonic() < deadline, "the scheduled consolidation did not write index.md"
                await asyncio.sleep(0.2)
        finally:
            await client.get_schedule_handle(consolidation_schedule_id(store.store_id)).delete()
    assert index.read_bytes() == data  # regenerated to the same bytes
    assert canonical_bytes(store.root) == before
