"""A rebuild writes its rows and vectors in bounded chunks (issue #15 item 5: the 1M-memory rebuild
peaked at 10 GB with one Arrow copy of everything). Chunked or not, the generation is the same: the
same rows in the same order, one vector per row in that order, the same answers."""

from __future__ import annotations

from pathlib import Path

import duckdb
import lancedb
import numpy as np
import pytest

from tempomem.recall.embedding import LocalMiniLMEmbedder
from tempomem.recall.index import MemoryIndex
from tempomem.recall.index import build as index_build
from tempomem.recall.index.schema import DB_NAME, LANCE_DIR, LANCE_TABLE
from tempomem.recall.index.vectors import vectors_of
from tempomem.storage.markdown import Bullet, append_bullets

TEXTS = [
    "Ann moved to Lisbon in March.",
    "Ben's dentist appointment is on Tuesday.",
    "The router password is taped under the box.",
    "Carla prefers green tea to coffee.",
    "The ferry to Tangier leaves at nine on Friday.",
    "Dev is allergic to peanuts.",
    "Elif started a pottery class on Wednesdays.",
    "The car insurance renews in October.",
    "Farid lent us his ladder last spring.",
    "Greta's birthday party is at the lake house.",
]


def build(
    root: Path, embedder: LocalMiniLMEmbedder
) -> tuple[list[tuple], np.ndarray, list[str], list[list[str]]]:
    (root / "daily").mkdir(mode=0o700, parents=True)
    bullets = [
        Bullet(
            signifier="–",
            text=t,
            id=f"c-{i:04d}",
            type="note",
            status="open",
            recorded="2026-11-30T09:00:00.000Z",
        )
        for i, t in enumerate(TEXTS)
    ]
    append_bullets(root / "daily" / "2026-11-30.md", "2026-11-30", bullets)
    idx = MemoryIndex(root, embedder)
    report = idx.rebuild()
    assert report.rows == len(TEXTS)
    gen = idx.generation_dir(report.generation)
    con = duckdb.connect(str(gen / DB_NAME), read_only=True)
    try:
        rows = con.execute("SELECT seq, id, text FROM memories ORDER BY seq").fetchall()
    finally:
        con.close()
    data = lancedb.connect(str(gen / LANCE_DIR)).open_table(LANCE_TABLE).to_arrow()
    answers = [
        [h.id for h in idx.search(q, limit=3)] for q in ("Lisbon move", "peanut allergy", "ferry Tangier")
    ]
    return rows, vectors_of(data, 384), data.column("id").to_pylist(), answers


def test_chunked_rebuild_writes_the_same_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = LocalMiniLMEmbedder()
    whole = build(tmp_path / "whole", embedder)
    monkeypatch.setattr(index_build, "REBUILD_CHUNK_ROWS", 3)  # 10 rows: four chunks, the last of one row
    chunked = build(tmp_path / "chunked", embedder)
    assert chunked[0] == whole[0]
    assert chunked[2] == whole[2] == [f"c-{i:04d}" for i in range(len(TEXTS))]
    assert np.allclose(chunked[1], whole[1])
    assert chunked[3] == whole[3]
    assert chunked[3][0][0] == "c-0000" and chunked[3][1][0] == "c-0005"
