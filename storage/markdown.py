"""Canonical Markdown of ``daily/`` and ``audit/`` day files (AMB-03, PROV-07..PROV-22).

Each bullet is two lines::

    - <signifier> <text>
      <!--mem id=… type=… status=… recorded=… [optional keys…] source_session=<pct-encoded|unknown>-->

Anything else (headings, prose, plain ``- item`` lines, malformed metadata) is kept verbatim as a
``RawLine`` so a rewrite never loses bytes. ``serialize_document(parse_document(s)) == s`` for every
``s`` this module writes; legacy one-line bullets are normalised to two lines only on rewrite (PROV-22).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from tempomem.storage.fsio import atomic_write, ensure_private_dir, read_private_file
from tempomem.storage.limits import SOURCE_SESSION_MAX_BYTES

SIGNIFIERS = ("[ ]", "[x]", "[>]", "[<]", "[-]", "–", "o")
STATUSES = frozenset({"open", "done", "scheduled", "migrated", "dropped", "invalidated"})  # AMB-28
SRCS = frozenset({"user", "assistant", "tool", "document"})
ATTRS = frozenset({"owner", "assistant", "document"})
UNKNOWN_SESSION = "unknown"

# Everything str.splitlines() breaks on: a bullet's text must stay one line for every reader.
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SIG = "|".join(re.escape(s) for s in SIGNIFIERS)
_HEAD_RE = re.compile(rf"- ({_SIG}) (.*)")
_META_RE = re.compile(r"  <!--mem (.*)-->")
_LEGACY_RE = re.compile(rf"- ({_SIG}) (.*) <!--mem (.*)-->")
_PCT_RE = re.compile(r"(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2})+")  # RFC 3986 unreserved or pct-encoded
_KEY_RE = re.compile(r"[a-z_]+")
_KEYS = (
    "id", "type", "status", "recorded", "due", "valid_from", "valid_to", "labels", "entities",
    "src", "attr", "replaceable", "insight", "source_session",
)  # fmt: skip
_SAFE = ":+,"  # kept literal for readable timestamps/lists; space, '>', '<', '%', '=' are always encoded


class MarkdownFormatError(ValueError):
    """Input that cannot be written as canonical Markdown (or read back identically)."""


def encode_session(session_id: str | None) -> str:
    """Percent-encode a host conversation id; ``unknown`` when absent or unstorable (PROV-13, LIM-63)."""
    if not session_id:
        return UNKNOWN_SESSION
    try:
        raw = session_id.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates cannot be stored
        return UNKNOWN_SESSION
    if len(raw) > SOURCE_SESSION_MAX_BYTES:
        return UNKNOWN_SESSION
    if session_id == UNKNOWN_SESSION:
        # A real id spelled "unknown" must not read back as unknown: encode one unreserved byte.
        return "%75nknown"
    return quote(raw, safe="")


def decode_session(value: str) -> str | None:
    """Inverse of ``encode_session``; anything malformed or unstorable is ``None`` (PROV-15)."""
    if value == UNKNOWN_SESSION or not _PCT_RE.fullmatch(value):
        return None
    try:
        decoded = unquote(value, errors="strict")
    except UnicodeDecodeError:
        return None
    return decoded if len(decoded.encode("utf-8")) <= SOURCE_SESSION_MAX_BYTES else None


def _storable_session(session_id: str | None) -> str | None:
    return decode_session(encode_session(session_id))


def _check_utf8(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MarkdownFormatError(f"{name} is not valid UTF-8 text") from None


@dataclass(frozen=True)
class Bullet:
    signifier: str
    text: str
    id: str
    type: str
    status: str
    recorded: str
    due: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    labels: str | None = None
    entities: tuple[str, ...] = ()
    src: str | None = None
    attr: str | None = None
    replaceable: bool = False
    insight: bool = False
    source_session: str | None = None

    def __post_init__(self) -> None:
        # Validate at construction so a bad bullet fails where it is built, not at write time.
        if self.signifier not in SIGNIFIERS:
            raise MarkdownFormatError(f"unknown signifier {self.signifier!r}")
        if not self.text or _LINE_BREAKS.intersection(self.text):
            raise MarkdownFormatError("text must be one non-empty line")
        if "<!--" in self.text or "-->" in self.text:
            raise MarkdownFormatError("text must not open or close an HTML comment")
        if not isinstance(self.id, str) or not _ID_RE.fullmatch(self.id):
            raise MarkdownFormatError(f"invalid id {self.id!r}")
        if not self.type or not self.recorded:
            raise MarkdownFormatError("type and recorded are required")
        if self.status not in STATUSES:
            raise MarkdownFormatError(f"unknown status {self.status!r}")
        if self.src is not None and self.src not in SRCS:
            raise MarkdownFormatError(f"unknown src {self.src!r}")
        if self.attr is not None and self.attr not in ATTRS:
            raise MarkdownFormatError(f"unknown attr {self.attr!r}")
        object.__setattr__(self, "entities", tuple(self.entities))
        for name in ("text", "type", "recorded", "due", "valid_from", "valid_to", "labels"):
            value = getattr(self, name)
            if value is not None:
                _check_utf8(name, value)
        for entity in self.entities:
            _check_utf8("entities", entity)
        # PROV-13: an unstorable session is unknown everywhere, so the index can mirror this object.
        object.__setattr__(self, "source_session", _storable_session(self.source_session))


@dataclass(frozen=True)
class RawLine:
    text: str

    def __post_init__(self) -> None:
        if "\n" in self.text:
            raise MarkdownFormatError("a raw line cannot contain a newline")


@dataclass
class MarkdownDocument:
    items: list[Bullet | RawLine]
    # Whether the last line ends with "\n"; needed to reproduce files saved without one byte for byte.
    trailing_newline: bool = field(default=True)

    def bullets(self) -> list[Bullet]:
        return [item for item in self.items if isinstance(item, Bullet)]

    def ids(self) -> set[str]:
        return {b.id for b in self.bullets()}


def _meta(b: Bullet) -> str:
    parts = [f"id={b.id}", f"type={quote(b.type, safe=_SAFE)}", f"status={b.status}"]
    parts.append(f"recorded={quote(b.recorded, safe=_SAFE)}")
    for key in ("due", "valid_from", "valid_to", "labels"):
        value = getattr(b, key)
        if value is not None:
            parts.append(f"{key}={quote(value, safe=_SAFE)}")
    if b.entities:  # each entity encoded without ',' so the list splits back exactly
        parts.append("entities=" + ",".join(quote(e, safe=":+") for e in b.entities))
    if b.src is not None:
        parts.append(f"src={b.src}")
    if b.attr is not None:
        parts.append(f"attr={b.attr}")
    if b.replaceable:
        parts.append("replaceable=1")
    if b.insight:
        parts.append("insight=1")
    parts.append(f"source_session={encode_session(b.source_session)}")  # always last (AMB-03)
    return " ".join(parts)


def serialize_bullet(b: Bullet) -> str:
    return f"- {b.signifier} {b.text}\n  <!--mem {_meta(b)}-->\n"


def _bullet_from(signifier: str, text: str, body: str) -> Bullet | None:
    """Build a bullet from a parsed head and mem-comment body, or ``None`` if anything is malformed."""
    values: dict[str, str] = {}
    sessions: list[str] = []
    for token in body.split(" "):
        key, eq, value = token.partition("=")
        if not eq or not _KEY_RE.fullmatch(key) or key not in _KEYS:
            return None  # unknown keys would be dropped on rewrite: keep the line verbatim instead
        if key == "source_session":
            sessions.append(value)
        elif key in values:
            return None
        else:
            values[key] = value
    if not {"id", "type", "status", "recorded"} <= values.keys():
        return None
    flags: dict[str, bool] = {}
    for flag in ("replaceable", "insight"):
        raw = values.pop(flag, "0")
        if raw not in ("0", "1"):
            return None
        flags[flag] = raw == "1"
    try:
        decoded = {k: unquote(v, errors="strict") for k, v in values.items() if k != "entities"}
        entities = (
            tuple(unquote(e, errors="strict") for e in values["entities"].split(","))
            if "entities" in values
            else ()
        )
        # PROV-15: missing, duplicated or malformed source_session is unknown, never an error.
        session = decode_session(sessions[0]) if len(sessions) == 1 else None
        return Bullet(
            signifier=signifier, text=text, entities=entities, source_session=session, **flags, **decoded
        )
    except (UnicodeDecodeError, MarkdownFormatError):
        return None


def parse_document(text: str) -> MarkdownDocument:
    """Parse any text; never raises. Unrecognised or malformed lines become ``RawLine``."""
    trailing = text == "" or text.endswith("\n")
    lines = text.split("\n")
    if trailing:
        lines.pop()
    items: list[Bullet | RawLine] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        bullet: Bullet | None = None
        if (legacy := _LEGACY_RE.fullmatch(line)) is not None:
            bullet = _bullet_from(legacy[1], legacy[2], legacy[3])
        if bullet is not None:
            items.append(bullet)
            i += 1
            continue
        head = _HEAD_RE.fullmatch(line)
        meta = _META_RE.fullmatch(lines[i + 1]) if head and i + 1 < len(lines) else None
        if head and meta and (bullet := _bullet_from(head[1], head[2], meta[1])) is not None:
            items.append(bullet)
            i += 2
            continue
        items.append(RawLine(line))
        i += 1
    return MarkdownDocument(items, trailing_newline=trailing)


def serialize_document(doc: MarkdownDocument) -> str:
    out = "".join(
        serialize_bullet(item) if isinstance(item, Bullet) else item.text + "\n" for item in doc.items
    )
    return out if doc.trailing_newline else out.removesuffix("\n")


def is_day(day: str) -> bool:
    """``YYYY-MM-DD`` naming a real date (the name of a day file, without ``.md``)."""
    try:
        return _DAY_RE.fullmatch(day) is not None and dt.date.fromisoformat(day) is not None
    except ValueError:  # e.g. 2026-02-30
        return False


def new_document(day: str) -> MarkdownDocument:
    if not is_day(day):
        raise MarkdownFormatError(f"invalid day {day!r}, expected YYYY-MM-DD")
    return MarkdownDocument([RawLine(f"# {day}"), RawLine("")])


def read_document(path: Path) -> MarkdownDocument:
    """Read a day file (``FileNotFoundError`` if missing). Undecodable bytes survive a rewrite.

    Files are read the way people save them: a UTF-8 byte-order mark and CRLF line endings are accepted
    (a rewrite stores the canonical form: no mark, LF)."""
    text = read_private_file(Path(path)).decode("utf-8", errors="surrogateescape")
    return parse_document(text.removeprefix("\ufeff").replace("\r\n", "\n"))


def append_bullets(path: Path, day: str, bullets: Sequence[Bullet]) -> int:
    """Append bullets whose id is not yet in the file; return how many were added.

    Idempotent by id, so Temporal retries and replays converge. The file is rewritten (atomically,
    re-serialising every bullet, PROV-22) only when something is added; otherwise it is untouched
    (PROV-21). Not locked: callers that may race on one file must serialise their writes.
    """
    path = Path(path)
    key = str(path)
    cached = _WRITTEN.get(key)
    if cached is not None and cached[0] == _identity(path):
        # The file is byte for byte what this process last wrote (canonical, ends with a newline): its
        # re-serialisation is that text, so appending needs no parse (issue #15 item 2: a day of n lines
        # cost O(n) per append).
        seen, text = set(cached[1]), cached[2]
        new = list(_unique_new(bullets, seen))
        if new:
            added = "".join(serialize_bullet(b) for b in new)
            text += added
            atomic_write(path, text.encode("utf-8", errors="surrogateescape"))
            _remember(key, path, seen, text)
            _parsed_append(path, cached[0], added)
        return len(new)
    try:
        doc = read_document(path)
    except FileNotFoundError:
        doc = new_document(day)
    seen = doc.ids()
    new = list(_unique_new(bullets, seen))
    if new:
        doc.items.extend(new)
        doc.trailing_newline = True
        ensure_private_dir(path.parent)
        text = serialize_document(doc)
        atomic_write(path, text.encode("utf-8", errors="surrogateescape"))
        _remember(key, path, seen, text)
    return len(new)


# Day files this process wrote last, by path: (file identity, ids, text). A file changed by anyone else
# (an editor, another process, a restore) has another identity and is read and parsed again.
_WRITTEN: dict[str, tuple[tuple[int, ...] | None, set[str], str]] = {}
_WRITTEN_MAX = 8
_WRITTEN_LOCK = threading.Lock()


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return None  # read_private_file refuses it on the slow path
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _remember(key: str, path: Path, seen: set[str], text: str) -> None:
    identity = _identity(path)
    with _WRITTEN_LOCK:
        _WRITTEN.pop(key, None)
        if identity is not None:
            _WRITTEN[key] = (identity, seen, text)
        while len(_WRITTEN) > _WRITTEN_MAX:
            _WRITTEN.pop(next(iter(_WRITTEN)))


def _unique_new(bullets: Sequence[Bullet], seen: set[str]) -> Iterator[Bullet]:
    """Bullets whose id is not in ``seen`` (first of each id), adding their ids to it."""
    for bullet in bullets:
        if bullet.id not in seen:
            seen.add(bullet.id)
            yield bullet


def day_files(root: Path, folder: str = "daily") -> list[tuple[str, Path]]:
    """``(day, path)`` of every ``<root>/<folder>/YYYY-MM-DD.md``, in date order."""
    directory = Path(root) / folder
    if not directory.is_dir():
        return []
    # Temp files (".x.md.tmp-123"), notes and misnamed files are not day files.
    days = [e.name[:-3] for e in directory.iterdir() if e.name.endswith(".md") and is_day(e.name[:-3])]
    return [(day, directory / f"{day}.md") for day in sorted(days)]


def iter_bullets(root: Path, folder: str = "daily") -> Iterator[tuple[str, Bullet]]:
    """Yield ``(day, bullet)`` for each ``<root>/<folder>/YYYY-MM-DD.md``: date order, then file order.

    A plain bullet a person typed into a daily note (``- text``, no metadata) is a memory too: a
    user-authored note (see ``plain_note``). Damaged bullets are skipped here and reported by
    ``damaged_bullets``.
    """
    for day, path in day_files(root, folder):
        for bullet in _bullets_of(day, path, folder):
            yield day, bullet


def iter_day_bullets(root: Path, day: str, folder: str = "daily") -> Iterator[Bullet]:
    """The bullets of one day file, as ``iter_bullets`` yields them (none when the file is absent; a
    folder or symlink in its place raises, as ``read_document`` does)."""
    path = Path(root) / folder / f"{day}.md"
    if is_day(day) and os.path.lexists(path):
        yield from _bullets_of(day, path, folder)


def _bullets_of(day: str, path: Path, folder: str) -> Iterator[Bullet]:
    """The bullets of one day file; parsed once per file identity (bullets are immutable), so a
    reconciliation that reads the live lines for every turn parses only what changed (issue #15)."""
    key = (str(path), folder)
    before = _identity(path)
    with _PARSED_LOCK:  # never held while yielding: a caller's loop may append, which takes it too
        hit = _PARSED.get(key)
        if hit is not None and before is not None and hit[0] == before:
            _PARSED.move_to_end(key)
        else:
            hit = None
    if hit is not None:
        yield from hit[1]
        return
    bullets = tuple(_parse_bullets(day, path, folder))
    # Kept only when the file did not change while it was read, and only what was read from the disk.
    if before is not None and _identity(path) == before:
        _keep_parsed(key, before, bullets)
    yield from bullets


def _parsed_append(path: Path, before: tuple[int, ...] | None, added: str) -> None:
    """A kept parse of ``path`` as it was (identity ``before``) grows by the lines just appended, parsed
    on their own: a bullet's two lines parse the same wherever they stand, so the next read (a commit's
    verification, the next turn's live lines) need not parse the whole day again."""
    key = (str(path), path.parent.name)
    with _PARSED_LOCK:
        hit = _PARSED.get(key)
    if hit is None or before is None or hit[0] != before:
        return
    after = _identity(path)
    if after is None:
        return
    appended = tuple(i for i in parse_document(added).items if isinstance(i, Bullet))
    _keep_parsed(key, after, hit[1] + appended)


def _keep_parsed(key: tuple[str, str], identity: tuple[int, ...], bullets: tuple[Bullet, ...]) -> None:
    global _PARSED_BULLETS
    with _PARSED_LOCK:
        old = _PARSED.pop(key, None)
        _PARSED_BULLETS += len(bullets) - (len(old[1]) if old is not None else 0)
        _PARSED[key] = (identity, bullets)
        while _PARSED_BULLETS > _PARSED_MAX_BULLETS and _PARSED:
            _, (_, dropped) = _PARSED.popitem(last=False)
            _PARSED_BULLETS -= len(dropped)


# Parsed day files by (path, folder): (file identity, bullets), least recently used first. A file
# changed by anyone (a commit, an editor, a restore) has another identity and is parsed again. Bounded by
# bullets, not files, so a process serving many stores keeps a few MB at most.
_PARSED: OrderedDict[tuple[str, str], tuple[tuple[int, ...], tuple[Bullet, ...]]] = OrderedDict()
_PARSED_BULLETS = 0
_PARSED_MAX_BULLETS = 20_000
_PARSED_LOCK = threading.Lock()


def _parse_bullets(day: str, path: Path, folder: str) -> Iterator[Bullet]:
    items = read_document(path).items
    seen: dict[str, int] = {}
    for k, item in enumerate(items):
        if isinstance(item, Bullet):
            yield item
            continue
        # the head of a damaged bullet is not a hand-written note: its metadata line follows it
        damaged_head = k + 1 < len(items) and "<!--mem" in getattr(items[k + 1], "text", "")
        if folder == "daily" and not damaged_head and (note := plain_note(day, item.text, seen)):
            yield note


_PLAIN_RE = re.compile(r"[-*+] (?:(" + _SIG + r") )?(.*\S.*)")


def plain_note(day: str, line: str, seen: dict[str, int] | None = None) -> Bullet | None:
    """A hand-written bullet as a memory: a note by the owner, recorded at the day's start (UTC), with a
    stable id from the day, the text and its occurrence (``seen`` counts repeats within one file)."""
    match = _PLAIN_RE.fullmatch(line)
    if match is None:
        return None  # (half a comment in the text is refused by Bullet itself, below)
    text = match[2].strip()
    key = f"{day}\n{text}"
    occurrence = 0
    if seen is not None:
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
    digest = hashlib.sha256(f"{key}\n{occurrence}".encode("utf-8", "surrogatepass")).hexdigest()
    try:
        return Bullet(
            signifier=match[1] or "–",
            text=text,
            id=f"u-{digest[:40]}",
            type="note",
            status="done" if match[1] == "[x]" else "open",
            recorded=f"{day}T00:00:00.000Z",
            src="user",
            attr="owner",
        )
    except MarkdownFormatError:
        return None


def damaged_bullets(root: Path, folder: str = "daily") -> list[str]:
    """``folder/day.md:line`` of every line that carries tempomem metadata (``<!--mem``) but does not
    parse: kept verbatim in the file, left out of recall, reported by health and rebuild."""
    found = []
    for day, path in day_files(root, folder):
        text = read_private_file(path).decode("utf-8", errors="surrogateescape")
        lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
        for i, line in enumerate(lines):
            if "<!--mem" not in line:
                continue
            legacy = _LEGACY_RE.fullmatch(line)
            if legacy is not None and _bullet_from(legacy[1], legacy[2], legacy[3]) is not None:
                continue
            meta = _META_RE.fullmatch(line)
            head = _HEAD_RE.fullmatch(lines[i - 1]) if meta is not None and i > 0 else None
            if head is not None and meta is not None and _bullet_from(head[1], head[2], meta[1]) is not None:
                continue
            found.append(f"{folder}/{day}.md:{i + 1}")
    return found
