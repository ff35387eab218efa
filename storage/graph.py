"""The BuJo entity graph: ``graph.jsonl`` at the memory root (GRAPH-01, GRAPH-03, GRAPH-07, GRAPH-15).

One canonical JSON object per line (sorted keys, no whitespace), rows sorted by ``(row, id)``::

    {"id":"person:alice","memories":["c-…"],"name":"Alice","row":"entity","type":"person"}
    {"from":"person:alice","id":"rel-…","memories":["c-…"],"relation":"works at","row":"relation",
     "to":"org:acme"}   (one line in the file)

Rows are content-light: entity ids, display names, types, lowercase relation triples and the memory ids
that attest them, never memory text. ``apply`` is idempotent by row id and rewrites the whole file
atomically (temp → fsync → rename → fsync dir), so a crash leaves the old or the new graph. Writers hold
``exclusive_lock(root / STORE_LOCK)``; this module takes no lock itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from tempomem.storage.credentials import unsafe_reason
from tempomem.storage.fsio import UnsafePathError, atomic_write, read_private_file

GRAPH_NAME = "graph.jsonl"
GRAPH_MAX_BYTES = 64 * 1024 * 1024
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
RELATION_PATTERN = r"^[a-z][a-z0-9_ ]{0,47}$"  # GRAPH-03: lowercase, strict, never coerced
EntityType = Literal["person", "project", "organization", "concept", "place", "time"]
MAX_NAME_BYTES = 1024


class GraphError(Exception):
    """``graph.jsonl`` is unsafe or malformed, or a row is invalid. The message is content-free."""


def _safe_name(value: str) -> str:
    if (why := unsafe_reason(value, max_bytes=MAX_NAME_BYTES)) is not None:
        raise ValueError(f"unsafe name ({why})")
    return value


Id = Annotated[str, Field(pattern=ID_PATTERN)]
MemoryIds = Annotated[tuple[Id, ...], AfterValidator(lambda v: tuple(sorted(set(v))))]


class _Strict(BaseModel):
    # hide_input_in_errors: a refused row never carries its names or ids into an error message.
    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, populate_by_name=True, hide_input_in_errors=True
    )


class EntityRow(_Strict):
    row: Literal["entity"] = "entity"
    id: Id
    name: Annotated[str, AfterValidator(_safe_name)]
    type: EntityType
    memories: MemoryIds = ()


class RelationRow(_Strict):
    row: Literal["relation"] = "relation"
    id: Id
    from_: Annotated[Id, Field(alias="from")]
    relation: Annotated[str, Field(pattern=RELATION_PATTERN)]
    to: Id
    memories: MemoryIds = ()


Row = EntityRow | RelationRow


def relation_id(from_: str, relation: str, to: str) -> str:
    """Deterministic row id of a directed triple, so a replayed plan names the same row."""
    return "rel-" + hashlib.sha256(f"{from_}\x00{relation}\x00{to}".encode()).hexdigest()[:40]


def relation(from_: str, rel: str, to: str, memories: Iterable[str] = ()) -> RelationRow:
    return RelationRow(
        id=relation_id(from_, rel, to), from_=from_, relation=rel, to=to, memories=tuple(memories)
    )


@dataclass(frozen=True)
class Graph:
    entities: dict[str, EntityRow]
    relations: dict[str, RelationRow]


def graph_path(root: Path) -> Path:
    return Path(root) / GRAPH_NAME


def _dump(row: Row) -> str:
    data = row.model_dump(by_alias=True)
    data["memories"] = list(data["memories"])
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _serialize(graph: Graph) -> bytes:
    rows = [graph.entities[k] for k in sorted(graph.entities)] + [
        graph.relations[k] for k in sorted(graph.relations)
    ]
    return "".join(_dump(r) + "\n" for r in rows).encode("utf-8")


def _parse_row(line: str, number: int) -> Row:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        raise GraphError(f"line {number}: not JSON") from None
    if not isinstance(data, dict):
        raise GraphError(f"line {number}: not an object")
    if isinstance(data.get("memories"), list):
        data["memories"] = tuple(data["memories"])
    model: type[EntityRow] | type[RelationRow] = RelationRow if data.get("row") == "relation" else EntityRow
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise GraphError(f"line {number}: {exc.errors()[0]['type']}") from None


def load_graph(root: Path) -> Graph:
    """The graph at ``root`` (missing file = empty). Raises ``GraphError`` on any unsafe or bad row."""
    try:
        data = read_private_file(graph_path(root), max_bytes=GRAPH_MAX_BYTES)
    except FileNotFoundError:
        return Graph({}, {})
    except UnsafePathError as exc:
        raise GraphError(f"unsafe graph file ({type(exc).__name__})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise GraphError("graph.jsonl is not UTF-8") from None
    entities: dict[str, EntityRow] = {}
    relations: dict[str, RelationRow] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = _parse_row(line, number)
        if row.id in entities or row.id in relations:
            raise GraphError(f"line {number}: duplicate row id")
        if isinstance(row, EntityRow):
            entities[row.id] = row
        else:
            relations[row.id] = row
    return Graph(entities, relations)


def _as_row(item: Row | dict[str, Any], model: type[EntityRow] | type[RelationRow]) -> Row:
    if isinstance(item, model):
        return item
    if isinstance(item, BaseModel):
        raise GraphError(f"expected a {model.__name__}")
    data = dict(item)
    if isinstance(data.get("memories"), list):
        data["memories"] = tuple(data["memories"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise GraphError(f"invalid {model.__name__}: {exc.errors()[0]['type']}") from None


def apply(
    root: Path,
    entities: Iterable[EntityRow | dict[str, Any]] = (),
    relations: Iterable[RelationRow | dict[str, Any]] = (),
) -> int:
    """Add or replace rows by id; return how many rows were added or changed (0 on a replay).

    A row with a known id replaces the stored name/type/triple, and its attesting memory ids are the
    union of both (a replay or a second plan never loses an attestation). Relation rows must name a row
    id derived from their triple and endpoints that exist as entities after the update. The file is
    rewritten only when something changed.
    """
    graph = load_graph(root)
    ents = dict(graph.entities)
    rels = dict(graph.relations)
    changed = 0
    for item in entities:
        row = _as_row(item, EntityRow)
        assert isinstance(row, EntityRow)
        old = ents.get(row.id)
        if old is not None:
            row = row.model_copy(update={"memories": tuple(sorted(set(old.memories) | set(row.memories)))})
        if old != row:
            ents[row.id] = row
            changed += 1
    for item in relations:
        rrow = _as_row(item, RelationRow)
        assert isinstance(rrow, RelationRow)
        if rrow.id != relation_id(rrow.from_, rrow.relation, rrow.to):
            raise GraphError("relation row id does not match its triple")
        if rrow.from_ not in ents or rrow.to not in ents:
            raise GraphError("relation endpoint is not a known entity")
        old_rel = rels.get(rrow.id)
        if old_rel is not None:
            merged = tuple(sorted(set(old_rel.memories) | set(rrow.memories)))
            rrow = rrow.model_copy(update={"memories": merged})
        if old_rel != rrow:
            rels[rrow.id] = rrow
            changed += 1
    if changed:
        atomic_write(graph_path(root), _serialize(Graph(ents, rels)))
    return changed


def entities_by_id(root: Path) -> dict[str, EntityRow]:
    return load_graph(root).entities


def person(root: Path, entity_id: str) -> EntityRow | None:
    """The existing person entity ``entity_id`` or ``None`` (Remember ``about`` never creates one)."""
    row = entities_by_id(root).get(entity_id)
    return row if row is not None and row.type == "person" else None
