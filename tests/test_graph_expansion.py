"""One-hop graph expansion for deliberate MemoryRecall (GRAPH-09..GRAPH-11, REC-11, REC-37, LIM-48).

Hand-made ``graph.jsonl`` and ``daily/`` files under tmp_path, written with the real storage writers; the
backend is a fake returning fixed hybrid hits so scores are exact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tempomem.recall.auto_block import TurnGate, automatic_lookup
from tempomem.recall.graph_read import (
    RELATED_ENTITY_PENALTY,
    SAME_ENTITY_PENALTY,
    GraphReader,
    bullet_hit,
    expand_hits,
    expansion_candidates,
)
from tempomem.recall.search import Hit
from tempomem.recall.tools import memory_recall
from tempomem.storage import graph as g
from tempomem.storage.markdown import Bullet, append_bullets

NOW = datetime(2026, 7, 10, 12, 0, tzinfo=UTC)
DAY = "2026-07-01"


def bullet(mid: str, text: str, *entities: str, status: str = "open", **kw: Any) -> Bullet:
    sig = "[-]" if status == "dropped" else "–"
    return Bullet(
        signifier=sig,
        text=text,
        id=mid,
        type=kw.pop("type", "fact"),
        status=status,
        recorded=kw.pop("recorded", f"{DAY}T09:00:00.000Z"),
        entities=tuple(entities),
        source_session="web:thread-1",
        **kw,
    )


def write_store(root: Path, bullets: list[Bullet], entities: list[dict[str, Any]], rels: list[Any]) -> None:
    (root / "daily").mkdir(mode=0o700, parents=True, exist_ok=True)
    append_bullets(root / "daily" / f"{DAY}.md", DAY, bullets)
    g.apply(root, entities, rels)


def ent(eid: str, name: str, typ: str, *memories: str) -> dict[str, Any]:
    return {"id": eid, "name": name, "type": typ, "memories": list(memories)}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """ana —works at→ acme; bruno —sibling of→ ana; carla —friend of→ bruno (two hops from ana)."""
    write_store(
        tmp_path,
        [
            bullet("m-seed", "Ana likes hiking.", "person:ana"),
            bullet("m-ana-acme", "Ana works at Acme.", "person:ana", "org:acme"),
            bullet("m-acme", "Acme is based in Lisbon.", "org:acme"),
            bullet("m-bruno", "Bruno is Ana's brother.", "person:bruno"),
            bullet("m-carla", "Carla plays chess with Bruno.", "person:carla"),
            bullet("m-gone", "Acme had an office in Porto.", "org:acme", status="dropped"),
            bullet("m-other", "The weather was rainy.", "concept:weather"),
        ],
        [
            ent("person:ana", "Ana", "person", "m-seed", "m-ana-acme"),
            ent("org:acme", "Acme", "organization", "m-ana-acme", "m-acme", "m-gone"),
            ent("person:bruno", "Bruno", "person", "m-bruno"),
            ent("person:carla", "Carla", "person", "m-carla"),
            ent("concept:weather", "weather", "concept", "m-other"),
        ],
        [
            g.relation("person:ana", "works at", "org:acme", ["m-ana-acme"]),
            g.relation("person:bruno", "sibling of", "person:ana", ["m-bruno"]),
            g.relation("person:carla", "friend of", "person:bruno", ["m-carla"]),
        ],
    )
    return tmp_path


def hit(mid: str, score: float, text: str = "", *entities: str, mode: str = "hybrid", **kw: Any) -> Hit:
    return Hit(
        id=mid,
        text=text or f"text of {mid}",
        day=DAY,
        recorded=f"{DAY}T09:00:00.000Z",
        type="fact",
        status="open",
        score=score,
        mode=mode,  # type: ignore[arg-type]
        source_session="web:thread-1",
        entities=tuple(entities),
        **kw,
    )


SEED = hit("m-seed", 0.80, "Ana likes hiking.", "person:ana")


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.calls = 0

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        self.calls += 1
        return list(self.hits)


def ids(hits: list[Any]) -> list[str]:
    return [h.id for h in hits]


def test_GRAPH09_LIM48_expansion_is_exactly_one_hop(store: Path) -> None:
    found = dict(expansion_candidates([SEED], GraphReader(store)))
    # same entity (ana) and its relations' evidence; one hop to acme and bruno
    assert {"m-ana-acme", "m-acme", "m-bruno"} <= found.keys()
    assert "m-carla" not in found  # carla is two hops away (ana ← bruno ← carla)
    assert "m-other" not in found  # unrelated entity


def test_GRAPH09_expanded_scores_are_derived_from_the_seed(store: Path) -> None:
    found = dict(expansion_candidates([SEED], GraphReader(store)))
    assert found["m-ana-acme"] == pytest.approx(0.80 - SAME_ENTITY_PENALTY)
    assert found["m-bruno"] == pytest.approx(0.80 - SAME_ENTITY_PENALTY)  # the relation's own evidence
    assert found["m-acme"] == pytest.approx(0.80 - RELATED_ENTITY_PENALTY)  # via related entity acme


def test_GRAPH09_seed_entities_also_come_from_graph_rows(store: Path) -> None:
    bare = hit("m-seed", 0.80, "Ana likes hiking.")  # no entities on the hit; the graph row attests it
    assert "m-bruno" in dict(expansion_candidates([bare], GraphReader(store)))


def test_GRAPH09_is_deterministic_and_direct_hits_come_first(store: Path) -> None:
    direct = [SEED, hit("m-x", 0.78)]
    one = expand_hits(direct, GraphReader(store), limit=8)
    two = expand_hits(direct, GraphReader(store), limit=8)
    assert ids(one) == ids(two)
    assert ids(one)[:2] == ["m-seed", "m-x"]
    assert ids(one)[2:] == ["m-ana-acme", "m-bruno", "m-acme"]


def test_GRAPH10_expansion_stays_within_the_result_limit(store: Path) -> None:
    reader = GraphReader(store)
    assert ids(expand_hits([SEED], reader, limit=2)) == ["m-seed", "m-ana-acme"]
    assert ids(expand_hits([SEED], reader, limit=1)) == ["m-seed"]
    full = [hit(f"d{i}", 0.80) for i in range(3)]
    assert ids(expand_hits(full, reader, limit=3)) == ["d0", "d1", "d2"]


def test_REC37_direct_hits_are_cut_before_expansion(store: Path) -> None:
    weak_carla = hit("m-carla-direct", 0.50, "", "person:carla")  # >0.15 below best: cut before seeding
    out = ids(expand_hits([SEED, weak_carla], GraphReader(store), limit=8))
    assert "m-carla-direct" not in out
    assert "m-carla" not in out  # the cut hit never seeded its own entity
    assert "m-bruno" in out
    # the cut hit does not hold a slot either: expansion fills it
    assert ids(expand_hits([SEED, weak_carla], GraphReader(store), limit=2)) == ["m-seed", "m-ana-acme"]


def test_REC37_final_list_is_cut_again_after_expansion(store: Path) -> None:
    seed = hit("m-seed", 0.70, "Ana likes hiking.", "person:ana")
    out = expand_hits([seed], GraphReader(store), limit=8)
    # 0.70 clears the 0.65 floor, so the 0.60 related-entity line is cut; 0.65 same-entity lines stay
    assert "m-acme" not in ids(out)
    assert {"m-ana-acme", "m-bruno"} <= set(ids(out))


def test_REC14_dropped_lines_are_never_expanded(store: Path) -> None:
    seed = hit("m-acme-seed", 0.80, "", "org:acme")
    assert "m-gone" not in ids(expand_hits([seed], GraphReader(store), limit=8))


def test_GRAPH10_memory_recall_adds_evidence_within_limit(store: Path) -> None:
    backend = Backend([SEED])
    result = memory_recall(backend, query="hiking", limit=3, now=NOW, tz=UTC, graph=GraphReader(store))
    assert ids(result.hits) == ["m-seed", "m-ana-acme", "m-bruno"]
    assert "0.750 [recorded 2026-07-01T09:00:00.000Z] Ana works at Acme." in result.text
    assert result.hits[1].currentness == "current"


def test_GRAPH09_off_switch_output_is_byte_identical(store: Path) -> None:
    backend = Backend([SEED, hit("m-x", 0.72)])
    plain = memory_recall(backend, query="hiking", now=NOW, tz=UTC)
    off = memory_recall(backend, query="hiking", now=NOW, tz=UTC, graph=None)
    on = memory_recall(backend, query="hiking", now=NOW, tz=UTC, graph=GraphReader(store))
    assert off.model_dump_json() == plain.model_dump_json()
    assert off.text.encode() == plain.text.encode()
    assert on.text != off.text  # the switch does something when on


def test_GRAPH09_missing_or_bad_graph_means_no_expansion(tmp_path: Path) -> None:
    backend = Backend([SEED])
    plain = memory_recall(backend, query="hiking", now=NOW, tz=UTC)
    empty = memory_recall(backend, query="hiking", now=NOW, tz=UTC, graph=GraphReader(tmp_path))
    assert empty.text == plain.text
    (tmp_path / g.GRAPH_NAME).write_text("not json\n")
    (tmp_path / g.GRAPH_NAME).chmod(0o600)
    bad = memory_recall(backend, query="hiking", now=NOW, tz=UTC, graph=GraphReader(tmp_path))
    assert bad.text == plain.text


def test_REC11_original_query_mode_expands_without_a_new_lookup(store: Path) -> None:
    backend = Backend([])
    original = [SEED, hit("m-weak", 0.55)]  # REC-13: uncut in this mode
    result = memory_recall(
        backend, use_original_query=True, original_hits=original, limit=4, now=NOW, tz=UTC,
        graph=GraphReader(store),
    )  # fmt: skip
    assert backend.calls == 0
    assert ids(result.hits) == ["m-seed", "m-weak", "m-ana-acme", "m-bruno"]


def test_REC42_GRAPH11_lexical_results_are_never_expanded(store: Path) -> None:
    backend = Backend([hit("m-seed", 0.80, "Ana likes hiking.", "person:ana", mode="lexical")])
    plain = memory_recall(backend, query="hiking", now=NOW, tz=UTC)
    on = memory_recall(backend, query="hiking", now=NOW, tz=UTC, graph=GraphReader(store))
    assert on.text == plain.text
    assert ids(on.hits) == ["m-seed"]


def test_REC40_evidence_notes_come_from_direct_hits(store: Path) -> None:
    backend = Backend([hit("m-seed", 0.60, "Ana likes hiking.", "person:ana")])
    on = memory_recall(backend, query="hiking", now=NOW, tz=UTC, graph=GraphReader(store))
    assert on.evidence == "insufficient"
    assert on.text.startswith("Insufficient evidence:")
    assert len(on.hits) > 1  # expansion still ran under the floor (only the margin cut applies)


def test_AUTO23_GRAPH11_automatic_lookup_stays_direct_only(store: Path) -> None:
    backend = Backend([SEED])
    gate = TurnGate(verified_owner=True, surface="web")
    lookup = automatic_lookup(
        backend, "What does Ana like doing at weekends?", now=NOW, tz=UTC, gate=gate,
        cards_from=GraphReader(store),
    )  # fmt: skip
    assert lookup.block.line_ids == ["m-seed"]
    assert "Acme" not in lookup.block.text


def test_GRAPH09_bullet_hit_carries_every_stored_field() -> None:
    b = bullet(
        "m-1",
        "Ana starts at Acme.",
        "person:ana",
        type="task",
        due="2026-07-09",
        valid_from="2026-07-02",
        valid_to="2026-08-01",
        labels='[{"kind": "fact"}]',
        src="user",
        attr="owner",
        insight=True,
    )
    h = bullet_hit(DAY, b, score=0.7, cosine=0.4)
    assert (h.id, h.text, h.day, h.recorded, h.type, h.status, h.score, h.cosine, h.mode) == (
        "m-1",
        "Ana starts at Acme.",
        DAY,
        f"{DAY}T09:00:00.000Z",
        "task",
        "open",
        0.7,
        0.4,
        "hybrid",
    )
    assert (h.source_session, h.due, h.valid_from, h.valid_to, h.labels, h.entities) == (
        "web:thread-1",
        "2026-07-09",
        "2026-07-02",
        "2026-08-01",
        '[{"kind": "fact"}]',
        ("person:ana",),
    )
    assert (h.src, h.attr, h.insight, h.path) == ("user", "owner", True, f"daily/{DAY}.md")


def test_GRAPH09_REC14_expansion_reaches_lines_by_every_path_and_skips_only_the_unrecallable(
    tmp_path: Path,
) -> None:
    """A dropped or forgotten line ahead of the others is skipped alone; a line naming the entity but
    missing from its graph row is reached; a relation pointing at the seed's entity reaches the other
    end's lines; an expanded line keeps the cosine the retrieved pool had for it; the caller's floor
    and margin decide both cuts."""
    write_store(
        tmp_path,
        [
            bullet("m-seed", "Ana likes hiking.", "person:ana"),
            bullet("m-a0", "Ana once had a cat.", "person:ana", status="dropped"),
            bullet("m-a1", "Ana forgot her keys.", "person:ana", status="invalidated"),
            bullet("m-a2", "Ana cycles to work.", "person:ana"),
            bullet("m-a3", "Ana reads at night.", "person:ana"),  # not in Ana's graph row
            bullet("m-rel", "Bruno is Ana's brother.", "person:bruno"),
            bullet("m-b2", "Bruno lives in Porto.", "person:bruno"),
        ],
        [
            ent("person:ana", "Ana", "person", "m-seed", "m-a0", "m-a1", "m-a2"),
            ent("person:bruno", "Bruno", "person", "m-rel", "m-b2"),
        ],
        [g.relation("person:bruno", "sibling of", "person:ana", ["m-rel"])],
    )
    reader = GraphReader(tmp_path)
    pool = [hit("m-b2", 0.1, cosine=0.33)]
    out = expand_hits([SEED], reader, limit=8, pool=pool, superseded_ids=set(), floor=0.5, margin=0.4)
    assert ids(out) == ["m-seed", "m-a2", "m-a3", "m-rel", "m-b2"]
    assert out[-1].cosine == 0.33 and out[1].cosine is None
    assert "m-a1" in ids(expand_hits([SEED], reader, limit=8, floor=0.5, margin=0.4))  # no edge known
    seed70 = hit("m-seed", 0.70, "Ana likes hiking.", "person:ana")  # Bruno's lines score 0.60
    assert "m-b2" in ids(expand_hits([seed70], reader, limit=8, floor=0.5, margin=0.4))
    assert "m-b2" not in ids(expand_hits([seed70], reader, limit=8))  # under the default floor
    weak = hit("m-weak", 0.55, "", "person:bruno")
    assert "m-weak" in ids(expand_hits([SEED, weak], reader, limit=8, floor=0.5, margin=0.4))
    assert "m-weak" not in ids(expand_hits([SEED, weak], reader, limit=8, floor=0.5))
