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
from tempomem.starts import consolidate_now
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
from tempomem.storage.replay_sidecar import sidecar_path
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


EXPECTED_INDEX = """\
# Memory index

<!-- generated by tempomem consolidation; edits are overwritten -->

## Top entities

7 of 7 graph rows scanned; 3 of 3 entity groups shown.

- **Ana** (person) — 4 memories · 1 relations · `person:ana` · also person:ana-2
- **Acme** (organization) — 1 memories · 1 relations · `org:acme`
- **May** (person) — 1 memories · 0 relations · `person:may`

## Duplicate groups

2 exact-duplicate groups (3 redundant lines) among 7 live daily lines; 2 shown.

- 3× Ana is vegetarian. — first 2026-12-03 c-0001
- 2× The boiler was serviced. — first 2026-12-03 c-0004
"""


def test_index_md_is_exactly_this_text(tmp_path: Path) -> None:
    """The whole file, byte for byte (TIER-13's format): every heading, count and line is part of it."""
    root = tmp_path / "mem"
    seed(root)
    report = consolidate(root)
    assert (root / INDEX_NAME).read_text(encoding="utf-8") == EXPECTED_INDEX
    assert report.index_bytes == len(EXPECTED_INDEX.encode())
    assert (report.graph_truncated, report.graph_error, report.entity_groups_shown) == (False, None, 3)
    assert report.index_sha256 == hashlib.sha256(EXPECTED_INDEX.encode()).hexdigest()


def test_empty_or_unreadable_parts_get_their_own_sentence(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    text, report = render_index(root)
    assert "## Top entities\n\n_No entity graph (graph.jsonl is empty or absent)._\n" in text
    assert "0 exact-duplicate groups (0 redundant lines) among 0 live daily lines; 0 shown.\n" in text
    assert (report.graph_rows, report.daily_lines) == (0, 0)
    (root / "graph.jsonl").write_text('{"row":"entity"}\n', encoding="utf-8")
    preview = entity_preview(root)
    assert preview.error is not None and preview.error != "None"
    assert f"_graph.jsonl could not be read ({preview.error}); nothing previewed._" in render_index(root)[0]
    (root / "daily" / "2026-12-03.md").mkdir(parents=True)  # a day "file" that is a folder
    text, report = render_index(root)
    assert "_daily/ could not be read (UnsafePathError); nothing counted._" in text
    assert report.daily_lines == 0


def test_names_and_lines_stay_inert_markdown_and_long_lines_are_shortened(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    graph.apply(root, entities=[{"id": "concept:x", "name": "a*b_c [d]|e`f\\g <h>", "type": "concept",
                                 "memories": ["c-0001"]}])  # fmt: skip
    exact, longer = "x" * 160, "y" * 161
    append_bullets(
        root / "daily" / "2026-12-03.md",
        "2026-12-03",
        [bullet(1, exact), bullet(2, exact), bullet(3, longer), bullet(4, longer)],
    )
    text = render_index(root)[0]
    assert "- **a\\*b\\_c \\[d\\]\\|e\\`f\\\\g \\<h\\>** (concept)" in text
    assert f"- 2× {exact} — first 2026-12-03 c-0001" in text
    assert f"- 2× {'y' * 159}… — first 2026-12-03 c-0003" in text


def test_groups_rank_by_size_then_first_appearance_and_relations_count_each(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    append_bullets(
        root / "daily" / "2026-12-03.md",
        "2026-12-03",
        [bullet(1, "First pair."), bullet(2, "Triple."), bullet(3, "First pair."), bullet(4, "Second pair."),
         bullet(5, "Triple."), bullet(6, "Second pair."), bullet(7, "Triple.")],
    )  # fmt: skip
    dups = duplicate_groups(root)
    assert [(g.count, g.text, g.first) for g in dups.groups] == [
        (3, "Triple.", "2026-12-03 c-0002"),
        (2, "First pair.", "2026-12-03 c-0001"),
        (2, "Second pair.", "2026-12-03 c-0004"),
    ]
    assert [(g.count, g.text) for g in duplicate_groups(root, limit=1).groups] == [(3, "Triple.")]
    graph.apply(
        root,
        entities=[
            {"id": "person:bo", "name": "Bo", "type": "person", "memories": ["c-0001"]},
            {"id": "person:cy", "name": "Cy", "type": "person", "memories": ["c-0002"]},
            {"id": "org:acme", "name": "Acme", "type": "organization", "memories": ["c-0003"]},
        ],
        relations=[
            graph.relation("person:bo", "works at", "org:acme", ["c-0001"]),
            graph.relation("person:cy", "works at", "org:acme", ["c-0002"]),
        ],
    )
    preview = entity_preview(root)
    # Equal memories: more relations first (Acme has two), then the lexical key.
    assert [(g.name, g.relations) for g in preview.groups] == [("Acme", 2), ("Bo", 1), ("Cy", 1)]
    exact = entity_preview(root, ceiling=preview.rows)
    assert (exact.scanned, exact.truncated) == (5, False)  # a ceiling equal to the rows truncates nothing
    short = entity_preview(root, ceiling=4)
    assert (short.scanned, short.truncated) == (4, True)


def test_a_group_lists_every_other_id_it_collapsed(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    graph.apply(
        root,
        entities=[
            {"id": "person:a1", "name": "Ana", "type": "person", "memories": ["c-0001"]},
            {"id": "person:a2", "name": "ANA", "type": "person", "memories": ["c-0002"]},
            {"id": "person:a3", "name": "ana", "type": "person", "memories": ["c-0003"]},
        ],
    )
    assert (
        "- **Ana** (person) — 3 memories · 0 relations · `person:a1` · also person:a2, person:a3\n"
        in (render_index(root)[0])
    )


def test_a_graph_beyond_the_scan_ceiling_says_where_it_stopped(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir()
    graph.apply(
        root,
        entities=[
            {"id": f"concept:c{i:05d}", "name": f"Topic {i}", "type": "concept", "memories": [f"m-{i}"]}
            for i in range(10_001)
        ],
    )
    text, report = render_index(root)
    assert "10000 of 10001 graph rows scanned (ceiling 10000); 50 of 10000 entity groups shown.\n" in text
    assert (report.graph_truncated, report.graph_rows_scanned) == (True, 10_000)
