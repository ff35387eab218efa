"""REC-05: explicit recall has no English-only grammar that suppresses some languages but not others.

A real store (Markdown, DuckDB FTS, LanceDB, the shipped embedder) holds one memory per language, all
about different things; a question in each language, worded as a person would ask it (its own question
words and articles, which an English stop-word list or stemmer would not know), finds its own memory
first. Queries made only of one language's function words find nothing in any language alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tempomem.storage.markdown import Bullet, append_bullets
from tests.conftest import make_store

MEMORIES = {
    "c-en01": ("The owner's sister Maria moved to Lisbon in March.", "where did Maria move to"),
    "c-de01": ("Der Zahnarzttermin ist am Dienstag in der Bergstraße.", "wann ist der Zahnarzttermin"),
    "c-es01": ("Mi bicicleta roja está en el garaje de Pablo.", "dónde está mi bicicleta roja"),
    "c-fr01": ("Le mot de passe du routeur est collé sous la boîte.", "où est le mot de passe du routeur"),
    "c-tr01": ("Kedimiz Pamuk veterinere cuma günü gidecek.", "Pamuk veterinere ne zaman gidecek"),
    "c-ru01": ("Бабушка печёт пирог с вишней по воскресеньям.", "когда бабушка печёт пирог"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("languages") / "mem"
    (root / "daily").mkdir(mode=0o700, parents=True)
    bullets = [
        Bullet(
            signifier="–",
            text=text,
            id=mid,
            type="note",
            status="open",
            recorded="2026-11-30T09:00:00.000Z",
            source_session="web:t",
        )
        for mid, (text, _) in MEMORIES.items()
    ]
    append_bullets(root / "daily" / "2026-11-30.md", "2026-11-30", bullets)
    s = make_store(root, None)
    s.rebuild()
    yield s
    s.close()


@pytest.mark.parametrize("mid", sorted(MEMORIES))
def test_REC05_each_language_finds_its_own_memory_first(store, mid: str) -> None:
    result = store.recall_sync(MEMORIES[mid][1])
    assert result.hits, f"{mid}: nothing recalled"
    assert result.hits[0].id == mid
