"""Read side of the BuJo entity graph: one-hop expansion for deliberate ``MemoryRecall`` (GRAPH-09..11).

Expansion is deterministic and exactly one hop (LIM-48):

1. The seeds are the *tail-cut* direct hits (REC-37), in backend order.
2. Each seed contributes its associated entities: the ids on the line itself (``Bullet.entities``) and every
   graph entity row that lists the seed's memory id (GRAPH-07: precise per-memory associations).
3. A seed entity pulls in the lines attested by its own entity row and by each relation row touching it,
   and each directly related entity (the other end of such a relation) pulls in the lines attested by its
   entity row or associated with it on the line. Relations of that related entity are never followed.

An expanded line gets a graph-derived score below the seed that reached it (``SAME_ENTITY_PENALTY`` for a
shared entity, ``RELATED_ENTITY_PENALTY`` through a relation), so the final tail cut (REC-37) can still
drop it. Expansion only fills free slots of the existing result limit (GRAPH-10, REC-11); direct hits keep
their backend order and come first (REC-16). Only explicit recall calls this (GRAPH-11, AUTO-23); the
automatic block never does. A missing or unreadable graph means no expansion, never an error.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tempomem.recall.search import Hit
from tempomem.recall.shaping import is_recallable, tail_cut
from tempomem.storage.graph import Graph, GraphError, load_graph
from tempomem.storage.limits import DELIBERATE_FLOOR, TAIL_MARGIN
from tempomem.storage.markdown import Bullet, iter_bullets

SAME_ENTITY_PENALTY = 0.05  # a line about the very entity a seed names
RELATED_ENTITY_PENALTY = 0.10  # a line reached through one directly related entity (one hop)
GRAPH_HOPS = 1  # LIM-48: exactly one hop


def bullet_hit(day: str, bullet: Bullet, *, score: float, cosine: float | None = None) -> Hit:
    """A daily bullet as a hybrid ``Hit`` with a graph-derived score (same fields the index stores)."""
    return Hit(
        id=bullet.id,
        text=bullet.text,
        day=day,
        recorded=bullet.recorded,
        type=bullet.type,
        status=bullet.status,
        score=score,
        cosine=cosine,
        mode="hybrid",
        source_session=bullet.source_session,
        due=bullet.due,
        valid_from=bullet.valid_from,
        valid_to=bullet.valid_to,
        labels=bullet.labels,
        entities=tuple(bullet.entities),
        src=bullet.src,
        attr=bullet.attr,
        insight=bullet.insight,
        path=f"daily/{day}.md",
    )


@dataclass
class GraphReader:
    """The graph and curated daily lines of one BuJo memory root, read lazily once per reader.

    Build one per request; Lite and Journal hosts never build one (GRAPH-11).
    """

    root: Path
    _graph: Graph | None = field(default=None, init=False, repr=False)
    _lines: dict[str, tuple[str, Bullet]] | None = field(default=None, init=False, repr=False)

    def graph(self) -> Graph:
        if self._graph is None:
            try:
                self._graph = load_graph(self.root)
            except GraphError:
                self._graph = Graph({}, {})  # an unreadable graph expands nothing
        return self._graph

    def lines(self) -> dict[str, tuple[str, Bullet]]:
        """Curated ``daily/`` bullets by memory id (never raw ``audit/``, REC-52)."""
        if self._lines is None:
            out: dict[str, tuple[str, Bullet]] = {}
            try:
                for day, bullet in iter_bullets(self.root, "daily"):
                    out.setdefault(bullet.id, (day, bullet))
            except (OSError, ValueError):
                out = {}
            self._lines = out
        return self._lines


def _entities_of(hit: Hit, graph: Graph) -> list[str]:
    """The seed's associated entity ids: its own line's ids, then graph rows attesting it (sorted)."""
    out = list(dict.fromkeys(hit.entities))
    for eid in sorted(graph.entities):
        if hit.id in graph.entities[eid].memories and eid not in out:
            out.append(eid)
    return out


def _line_ids_by_entity(lines: dict[str, tuple[str, Bullet]]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for mid in sorted(lines):
        for eid in lines[mid][1].entities:
            index.setdefault(eid, []).append(mid)
    return index


def expansion_candidates(seeds: Sequence[Hit], reader: GraphReader) -> list[tuple[str, float]]:
    """``(memory id, derived score)`` reached in one hop from ``seeds``, best first, deterministic.

    A line reached several ways keeps its highest derived score; ties keep discovery order.
    """
    graph = reader.graph()
    if not graph.entities:
        return []
    by_entity = _line_ids_by_entity(reader.lines())

    def attested(eid: str) -> list[str]:
        row = graph.entities.get(eid)
        return [*(row.memories if row else ()), *by_entity.get(eid, ())]

    found: dict[str, float] = {}

    def offer(ids: Iterable[str], score: float) -> None:
        for mid in ids:
            if mid not in found or score > found[mid]:
                found[mid] = score

    relations = [graph.relations[k] for k in sorted(graph.relations)]
    for seed in seeds:
        for eid in _entities_of(seed, graph):
            offer(attested(eid), seed.score - SAME_ENTITY_PENALTY)
            for rel in relations:
                if eid not in (rel.from_, rel.to):
                    continue
                offer(rel.memories, seed.score - SAME_ENTITY_PENALTY)  # the relation's own evidence
                other = rel.to if rel.from_ == eid else rel.from_
                offer(attested(other), seed.score - RELATED_ENTITY_PENALTY)  # one hop, never further
    order = {mid: i for i, mid in enumerate(found)}
    return sorted(found.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def expand_hits(
    direct: Sequence[Hit],
    reader: GraphReader,
    *,
    limit: int,
    pool: Sequence[Hit] = (),
    original_query: bool = False,
    superseded_ids: Collection[str] | None = None,
    floor: float = DELIBERATE_FLOOR,
    margin: float = TAIL_MARGIN,
) -> list[Hit]:
    """Direct hits plus one-hop graph evidence, at most ``limit`` hits (GRAPH-09, GRAPH-10, REC-37).

    ``direct`` are the live hybrid hits in backend order. They are tail-cut first (not in original-query
    mode, REC-13), limited, and used as seeds; expanded lines fill only the remaining slots; the final
    list is tail-cut once more. ``pool`` (the retrieved superset) supplies a line's stored cosine.
    """
    seeds = (list(direct) if original_query else tail_cut(direct, margin=margin, floor=floor))[:limit]
    room = limit - len(seeds)
    if room <= 0 or not seeds:
        return seeds
    lines = reader.lines()
    taken = {h.id for h in seeds}
    cosines = {h.id: h.cosine for h in pool}
    extra: list[Hit] = []
    for mid, score in expansion_candidates(seeds, reader):
        if len(extra) == room:
            break
        if mid in taken or mid not in lines:
            continue
        day, bullet = lines[mid]
        candidate = bullet_hit(day, bullet, score=score, cosine=cosines.get(mid))
        if not is_recallable(candidate, superseded_ids):
            continue
        taken.add(mid)
        extra.append(candidate)
    final = seeds + extra
    return final if original_query else tail_cut(final, margin=margin, floor=floor)
