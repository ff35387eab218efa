"""The exact BuJo replay projection: ``.replay-projection-v1.json`` at the memory root (RPL-01..RPL-05).

It is the canonical authority for state that daily Markdown and ``graph.jsonl`` cannot rebuild on their
own: thread edges, supersession edges and lifecycle, and terminal timestamps (RPL-01, AMB-47). Format
(AMB-24)::

    {"entries":[{"at":…,"authority":{"digest":…,"kind":…},"from":…,"id":…,"kind":…,"to":…[,"weight":n]}],
     "version":1}

* Strict canonical JSON (RFC 8785 subset): sorted keys, no whitespace, UTF-8, integers only (weights), no
  NaN/Infinity; entries sorted by ``id``, ids unique. A file whose bytes differ from the re-serialisation
  of what it parses to is rejected, so there is exactly one byte string per projection.
* Metadata only (RPL-03): every string is an id, a token, a millisecond UTC timestamp or a 64-hex digest,
  enforced by patterns, so memory text or model output cannot be stored even by mistake.
* Owner-owned, single-link regular file, mode 0600 (RPL-04); at most 32 MiB and 131,072 entries (RPL-05).
  Anything else raises :class:`SidecarError`; nothing is repaired or guessed (fail closed).

Writers hold ``exclusive_lock(root / STORE_LOCK)`` around :func:`apply_delta`; this module takes no lock
itself (``flock`` is per open file, so nesting it inside the caller's lock would deadlock).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from tempomem.storage.fsio import UnsafePathError, atomic_write, read_private_file
from tempomem.storage.limits import SIDECAR_MAX_BYTES, SIDECAR_MAX_ENTRIES

SIDECAR_NAME = ".replay-projection-v1.json"
VERSION = 1
# Module-level so tests can shrink them; read at call time.
MAX_BYTES = SIDECAR_MAX_BYTES
MAX_ENTRIES = SIDECAR_MAX_ENTRIES

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"  # same grammar as Markdown bullet ids
AT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
EntryKind = Literal["thread", "supersede", "lifecycle", "terminal"]
AuthorityKind = Literal["capture", "migration", "remember", "adoption"]
LIFECYCLE_STATES = frozenset({"current", "superseded"})  # AMB-28
TERMINAL_STATES = frozenset({"forgotten"})  # AMB-47: explicit migration forget


class SidecarError(Exception):
    """The sidecar is unsafe, non-canonical, out of bounds, or a delta conflicts with it.

    ``reason`` is a short content-free code: ``unsafe_file``, ``too_large``, ``too_many_entries``,
    ``not_utf8``, ``not_json``, ``schema``, ``non_canonical``, ``conflict``.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class Authority(_Strict):
    kind: AuthorityKind
    digest: Annotated[str, Field(pattern=DIGEST_PATTERN)]


Token = Annotated[str, Field(pattern=ID_PATTERN)]


class Entry(_Strict):
    id: Token
    kind: EntryKind
    from_: Annotated[Token, Field(alias="from")]
    to: Token
    weight: Annotated[int | None, Field(ge=1)] = None
    at: Annotated[str, Field(pattern=AT_PATTERN)]
    authority: Authority

    @model_validator(mode="after")
    def _per_kind(self) -> Entry:
        if self.kind == "thread":
            if self.weight is None:
                raise ValueError("a thread edge needs an integer weight")
        elif self.weight is not None:
            raise ValueError("only thread edges carry a weight")
        if self.kind in ("thread", "supersede") and self.from_ == self.to:
            raise ValueError("an edge cannot point at its own source")
        if self.kind == "lifecycle" and self.to not in LIFECYCLE_STATES:
            raise ValueError("lifecycle target must be a lifecycle state")
        if self.kind == "terminal" and self.to not in TERMINAL_STATES:
            raise ValueError("terminal target must be a terminal state")
        return self

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def _exact_int(value: Any) -> Any:
    if type(value) is not int:  # Literal[1] alone would let True through (True == 1)
        raise ValueError("version must be the integer 1")
    return value


class Projection(_Strict):
    version: Annotated[Literal[1], BeforeValidator(_exact_int)]
    entries: tuple[Entry, ...]

    @model_validator(mode="after")
    def _sorted_unique(self) -> Projection:
        ids = [e.id for e in self.entries]
        if any(a >= b for a, b in itertools.pairwise(ids)):
            raise ValueError("entries must be sorted by id without duplicates")
        return self

    def by_id(self) -> dict[str, Entry]:
        return {e.id: e for e in self.entries}


EMPTY = Projection(version=VERSION, entries=())


@dataclass(frozen=True)
class SupersedeInfo:
    new_id: str
    at: str


def sidecar_path(root: Path) -> Path:
    return Path(root) / SIDECAR_NAME


def entry_id(kind: str, from_: str, to: str) -> str:
    """A deterministic, content-free entry id: replays of the same edge get the same id."""
    digest = hashlib.sha256(f"{kind}\x00{from_}\x00{to}".encode()).hexdigest()
    return f"{kind[:3]}-{digest[:40]}"


def authority_digest(kind: str, *parts: str) -> str:
    """A content-free SHA-256 over an authority's kind and metadata (ids, timestamps), never over text."""
    return hashlib.sha256("\x00".join(["tempomem-authority-v1", kind, *parts]).encode()).hexdigest()


def canonical_bytes(projection: Projection) -> bytes:
    """AMB-24 canonical form. All strings are ASCII by schema, so ``sort_keys`` equals JCS ordering."""
    obj = {"version": projection.version, "entries": [e.as_json() for e in projection.entries]}
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def _reject(reason: str, detail: str = "") -> NoReturn:
    raise SidecarError(reason, detail)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            _reject("non_canonical", "duplicate key")
        out[key] = value
    return out


def _no_constant(_name: str) -> NoReturn:
    _reject("non_canonical", "NaN or Infinity")


def _no_float(_text: str) -> NoReturn:
    _reject("non_canonical", "non-integer number")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constant, parse_float=_no_float)


def parse(data: bytes) -> Projection:
    """Validate sidecar bytes exactly (bounds, JSON, schema, canonical form)."""
    if len(data) > MAX_BYTES:
        _reject("too_large", f"{len(data)} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _reject("not_utf8")
    try:
        raw, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        raise SidecarError("not_json", f"at offset {exc.pos}") from None
    if end != len(text):
        _reject("non_canonical", "trailing bytes")
    if isinstance(raw, dict) and isinstance(raw.get("entries"), list) and len(raw["entries"]) > MAX_ENTRIES:
        _reject("too_many_entries", f"{len(raw['entries'])} entries")
    if isinstance(raw, dict) and isinstance(raw.get("entries"), list):
        raw = {**raw, "entries": tuple(raw["entries"])}  # strict mode wants a tuple for a tuple field
    try:
        projection = Projection.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise SidecarError("schema", f"{first['type']} at {loc}") from None
    if canonical_bytes(projection) != data:
        _reject("non_canonical", "bytes differ from the canonical serialisation")
    return projection


def load(root: Path) -> Projection:
    """The projection at ``root``; a missing file is the empty projection. Never repairs anything."""
    path = sidecar_path(root)
    try:
        data = read_private_file(path, max_bytes=MAX_BYTES, strict=True)
    except FileNotFoundError:
        return EMPTY
    except UnsafePathError as exc:
        # read_private_file checks the size on the open descriptor; only the reason is re-derived here.
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_BYTES:
                raise SidecarError("too_large", f"{st.st_size} bytes") from None
        raise SidecarError("unsafe_file", str(exc).removeprefix(str(path)).strip()) from None
    return parse(data)


def _as_entry(item: Entry | dict[str, Any]) -> Entry:
    if isinstance(item, Entry):
        return item
    try:
        return Entry.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise SidecarError("schema", f"{first['type']} at {loc}") from None


def merge(projection: Projection, delta: Iterable[Entry | dict[str, Any]]) -> tuple[Projection, int]:
    """Pure merge: ``(new projection, entries added)``. Same id + same content is a no-op; same id with
    other content, or a second replacement of an already superseded id, raises ``conflict``."""
    entries = projection.by_id()
    superseded = {e.from_: e.to for e in entries.values() if e.kind == "supersede"}
    added = 0
    for item in delta:
        entry = _as_entry(item)
        existing = entries.get(entry.id)
        if existing is not None:
            if existing != entry:
                _reject("conflict", f"entry {entry.id} already holds other values")
            continue
        if entry.kind == "supersede":
            if superseded.get(entry.from_, entry.to) != entry.to:
                _reject("conflict", f"{entry.from_} is already superseded")
            superseded[entry.from_] = entry.to
        entries[entry.id] = entry
        added += 1
    if not added:
        return projection, 0
    merged = Projection(version=VERSION, entries=tuple(entries[k] for k in sorted(entries)))
    return merged, added


def apply_delta(root: Path, entries: Sequence[Entry | dict[str, Any]]) -> int:
    """Publish ``entries`` into the sidecar atomically; return how many were new.

    Idempotent by entry id: re-applying a delta writes nothing and leaves the bytes unchanged. The
    existing file is validated first, so an unsafe or non-canonical sidecar is never overwritten. Bounds
    are checked before writing; exceeding one fails closed with nothing written. Caller holds STORE_LOCK.
    """
    current = load(root)
    merged, added = merge(current, entries)
    if not added:
        return 0
    if len(merged.entries) > MAX_ENTRIES:
        _reject("too_many_entries", f"{len(merged.entries)} entries")
    data = canonical_bytes(merged)
    if len(data) > MAX_BYTES:
        _reject("too_large", f"{len(data)} bytes")
    atomic_write(sidecar_path(root), data)
    return added


def superseded(root: Path) -> dict[str, SupersedeInfo]:
    """``old id → SupersedeInfo(new id, at)`` for every supersession edge (old lines stay as history)."""
    return {e.from_: SupersedeInfo(new_id=e.to, at=e.at) for e in load(root).entries if e.kind == "supersede"}


def ended_ids(root: Path) -> set[str]:
    """Ids no longer current (AMB-28): replaced by a supersession edge or ended by a lifecycle entry."""
    return {
        e.from_
        for e in load(root).entries
        if e.kind == "supersede" or (e.kind == "lifecycle" and e.to == "superseded")
    }


def threads(root: Path) -> dict[tuple[str, str], int]:
    """``(from id, to id) → weight`` for every thread edge (AMB-47: weight = count of threaded notes)."""
    return {(e.from_, e.to): e.weight or 0 for e in load(root).entries if e.kind == "thread"}


def terminal(root: Path) -> dict[str, str]:
    """``memory id → at`` for every terminal (explicitly forgotten) record."""
    return {e.from_: e.at for e in load(root).entries if e.kind == "terminal"}
