"""Consolidation: regenerate ``<root>/index.md`` from canonical memory, LLM-free (TIER-13, AMB-01).

``index.md`` holds

* a bounded top-entity preview of ``graph.jsonl`` (GRAPH-12..14): rows are scanned in their canonical
  order (entities by id, then relations by id) up to a 10,000-row ceiling (LIM-46); ephemeral calendar /
  time nodes are left out; entities whose display names are lexically equal (NFKC, casefold, the same
  words in the same order) collapse into one group; at most 50 groups are rendered (LIM-47). This is a
  view, not canonical entity resolution: ``graph.jsonl`` is never touched;
* the count of exact-duplicate groups among the live ``daily/`` lines (CAP-30 / AMB-18 equivalence,
  ``activities.contracts.is_exact_duplicate``), with at most 50 groups listed.

Reads only; the one write is ``index.md`` itself (atomic, and only when its bytes change). The output has
no timestamp, so the same memory always renders the same bytes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tempomem.storage.fsio import UnsafePathError, atomic_write, exclusive_lock, read_private_file
from tempomem.storage.graph import EntityRow, GraphError, load_graph
from tempomem.storage.markdown import MarkdownFormatError, iter_bullets
from tempomem.storage.store_ref import STORE_LOCK

INDEX_NAME = "index.md"
GRAPH_SCAN_CEILING = 10_000  # LIM-46
MAX_GROUPS = 50  # LIM-47
PREVIEW_TEXT_CHARS = 160
# Statuses that are history rather than live memory (superseded lines stay in the file, AMB-28).
_NOT_LIVE = frozenset({"invalidated"})
# GRAPH-14: calendar/time nodes are ephemeral: typed "time", or named like a date, weekday or month.
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|yesterday|tonight"
_NUM = r"\d+(?:st|nd|rd|th|am|pm|h)?"
_TIME_NAME = re.compile(  # matched against the space-joined lexical tokens of a name
    rf"{_NUM}(?: (?:{_NUM}|am|pm))*"
    rf"|(?:(?:{_NUM}|on|the|of) )*(?:{_MONTHS}|{_DAYS})(?: (?:{_NUM}|of))*"
    rf"|(?:next|last|this) (?:week|weekend|month|year|{_DAYS})"
)


def lexical_key(text: str) -> tuple[str, ...]:
    """AMB-18: NFKC → casefold → ``\\w+`` tokens; ``is_exact_duplicate`` in capture uses this one rule."""
    return tuple(re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold()))


def is_ephemeral(entity: EntityRow) -> bool:
    """GRAPH-14: ``time`` entities, and concepts named like a date, time, weekday or month, are ephemeral.

    People, places, projects and organizations keep their names even when they look like dates (May).
    """
    if entity.type == "time":
        return True
    return entity.type == "concept" and _TIME_NAME.fullmatch(" ".join(lexical_key(entity.name))) is not None


@dataclass(frozen=True)
class EntityGroup:
    name: str  # the display name of the group's first entity (by id)
    type: str
    ids: tuple[str, ...]
    memories: int  # distinct memories attesting any entity of the group
    relations: int  # scanned relation rows touching the group


@dataclass(frozen=True)
class DuplicateGroup:
    count: int
    text: str  # the first occurrence, shortened
    first: str  # "<day> <bullet id>" of the first occurrence


@dataclass(frozen=True)
class ConsolidationReport:
    """Content-free summary of one consolidation (what the activity returns)."""

    index_sha256: str
    index_bytes: int
    changed: bool
    daily_lines: int
    duplicate_groups: int
    duplicate_lines: int  # lines beyond the first in every duplicate group
    graph_rows: int  # rows in graph.jsonl
    graph_rows_scanned: int
    graph_truncated: bool  # the 10,000-row ceiling was reached
    graph_error: str | None  # a content-free reason when graph.jsonl could not be read
    entity_groups: int
    entity_groups_shown: int


@dataclass
class _Preview:
    groups: list[EntityGroup] = field(default_factory=list)
    total_groups: int = 0
    rows: int = 0
    scanned: int = 0
    truncated: bool = False
    error: str | None = None


def entity_preview(root: Path, *, ceiling: int = GRAPH_SCAN_CEILING, limit: int = MAX_GROUPS) -> _Preview:
    """GRAPH-13/14: the bounded top-entity preview (groups ordered by memories, relations, then name)."""
    out = _Preview()
    try:
        graph = load_graph(root)
    except GraphError as exc:
        out.error = str(exc)  # GraphError messages are content-free by contract
        return out
    out.rows = len(graph.entities) + len(graph.relations)
    groups: dict[tuple[str, ...], tuple[list[EntityRow], set[str]]] = {}
    group_of: dict[str, tuple[str, ...]] = {}
    degree: Counter[tuple[str, ...]] = Counter()
    for entity_id in sorted(graph.entities):
        if out.scanned >= ceiling:
            out.truncated = True
            break
        out.scanned += 1
        entity = graph.entities[entity_id]
        if is_ephemeral(entity):
            continue
        key = lexical_key(entity.name) or (entity.id,)
        members, memories = groups.setdefault(key, ([], set()))
        members.append(entity)
        memories.update(entity.memories)
        group_of[entity.id] = key
    for relation_id in sorted(graph.relations):
        if out.scanned >= ceiling:
            out.truncated = True
            break
        out.scanned += 1
        rel = graph.relations[relation_id]
        ends = {group_of[e] for e in (rel.from_, rel.to) if e in group_of}
        for key in ends:
            degree[key] += 1
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1][1]), -degree[kv[0]], kv[0]))
    out.total_groups = len(ranked)
    for key, (members, memories) in ranked[:limit]:
        first = members[0]
        out.groups.append(
            EntityGroup(
                name=first.name,
                type=first.type,
                ids=tuple(m.id for m in members),
                memories=len(memories),
                relations=degree[key],
            )
        )
    return out


@dataclass
class _Duplicates:
    lines: int = 0
    groups: list[DuplicateGroup] = field(default_factory=list)
    total_groups: int = 0
    duplicate_lines: int = 0


def duplicate_groups(root: Path, *, limit: int = MAX_GROUPS) -> _Duplicates:
    """Exact-duplicate groups of live daily lines. State per line is a 32-byte digest, not its text."""
    out = _Duplicates()
    counts: Counter[bytes] = Counter()
    first: dict[bytes, tuple[int, str, str]] = {}  # digest -> (ordinal, day, bullet id)
    for ordinal, (day, bullet) in enumerate(_live_bullets(root)):
        out.lines += 1
        digest = hashlib.sha256("\x00".join(lexical_key(bullet.text)).encode()).digest()
        counts[digest] += 1
        first.setdefault(digest, (ordinal, day, bullet.id))
    dups = [(d, n) for d, n in counts.items() if n > 1]
    out.total_groups = len(dups)
    out.duplicate_lines = sum(n - 1 for _, n in dups)
    shown = sorted(dups, key=lambda dn: (-dn[1], first[dn[0]][0]))[:limit]
    wanted = {first[d][0]: (d, n) for d, n in shown}
    texts: dict[bytes, str] = {}
    if wanted:
        for ordinal, (_day, bullet) in enumerate(_live_bullets(root)):
            if ordinal in wanted:
                texts[wanted[ordinal][0]] = _shorten(bullet.text)
    for digest, n in shown:
        _, day, bullet_id = first[digest]
        out.groups.append(DuplicateGroup(count=n, text=texts.get(digest, ""), first=f"{day} {bullet_id}"))
    return out


def _live_bullets(root: Path):  # -> Iterator[tuple[str, Bullet]]
    for day, bullet in iter_bullets(root, "daily"):
        if bullet.status not in _NOT_LIVE:
            yield day, bullet


def _shorten(text: str) -> str:
    return text if len(text) <= PREVIEW_TEXT_CHARS else text[: PREVIEW_TEXT_CHARS - 1] + "…"


def _md(text: str) -> str:
    """Keep a display name or line inert in Markdown: no comment openers, no emphasis/link syntax."""
    text = text.replace("<!--", "&lt;!--").replace("-->", "--&gt;")
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", text)


def render_index(root: Path) -> tuple[str, ConsolidationReport]:
    """The ``index.md`` text of ``root`` and its report (``changed`` says whether it differs on disk)."""
    root = Path(root)
    preview = entity_preview(root)
    try:
        dups = duplicate_groups(root)
        daily_error = None
    except (MarkdownFormatError, OSError, UnsafePathError) as exc:  # a symlink or folder for a day file
        dups, daily_error = _Duplicates(), type(exc).__name__
    lines = ["# Memory index", "", "<!-- generated by tempomem consolidation; edits are overwritten -->", ""]
    lines += ["## Top entities", ""]
    if preview.error is not None:
        lines.append(f"_graph.jsonl could not be read ({_md(preview.error)}); nothing previewed._")
    elif preview.rows == 0:
        lines.append("_No entity graph (graph.jsonl is empty or absent)._")
    else:
        scanned = f"{preview.scanned} of {preview.rows} graph rows scanned"
        if preview.truncated:
            scanned += f" (ceiling {GRAPH_SCAN_CEILING})"
        lines.append(f"{scanned}; {len(preview.groups)} of {preview.total_groups} entity groups shown.")
        lines.append("")
        for g in preview.groups:
            also = f" · also {', '.join(_md(i) for i in g.ids[1:])}" if len(g.ids) > 1 else ""
            lines.append(
                f"- **{_md(g.name)}** ({g.type}) — {g.memories} memories · {g.relations} relations · "
                f"`{g.ids[0]}`{also}"
            )
    lines += ["", "## Duplicate groups", ""]
    if daily_error is not None:
        lines.append(f"_daily/ could not be read ({daily_error}); nothing counted._")
    else:
        lines.append(
            f"{dups.total_groups} exact-duplicate groups ({dups.duplicate_lines} redundant lines) among "
            f"{dups.lines} live daily lines; {len(dups.groups)} shown."
        )
        if dups.groups:
            lines.append("")
        for d in dups.groups:
            lines.append(f"- {d.count}× {_md(d.text)} — first {d.first}")
    text = "\n".join(lines) + "\n"
    data = text.encode("utf-8")
    report = ConsolidationReport(
        index_sha256=hashlib.sha256(data).hexdigest(),
        index_bytes=len(data),
        changed=_current(root) != data,
        daily_lines=dups.lines,
        duplicate_groups=dups.total_groups,
        duplicate_lines=dups.duplicate_lines,
        graph_rows=preview.rows,
        graph_rows_scanned=preview.scanned,
        graph_truncated=preview.truncated,
        graph_error=preview.error,
        entity_groups=preview.total_groups,
        entity_groups_shown=len(preview.groups),
    )
    return text, report


def _current(root: Path) -> bytes | None:
    try:
        return read_private_file(root / INDEX_NAME)
    except (OSError, UnsafePathError):
        return None


def consolidate(root: Path) -> ConsolidationReport:
    """Regenerate ``index.md`` under the store lock (a consistent snapshot of daily/ and graph.jsonl).

    Writes nothing else; rewrites ``index.md`` only when its bytes change.
    """
    root = Path(root)
    with exclusive_lock(root / STORE_LOCK):
        text, report = render_index(root)
        if report.changed:
            atomic_write(root / INDEX_NAME, text.encode("utf-8"))
    return report
