"""The index's on-disk contract: layout names, the ``memories`` table and its Arrow schema, the FTS
extension file, rows from bullets and the digest of the indexed set, and the index's errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from pydantic import BaseModel

from tempomem.storage.limits import DIR_MODE, FILE_MODE
from tempomem.storage.markdown import Bullet

SCHEMA_VERSION = 1


DAILY_FOLDER = "daily"


DB_NAME = "fts.duckdb"


LANCE_DIR = "vectors"


LANCE_TABLE = "vectors"


MANIFEST = "manifest.json"


CURRENT = "CURRENT"


CACHE_DIR = "vector-cache"


LOCK_NAME = ".write.lock"


GATE_NAME = ".gate"


EXCLUDED_STATUSES = frozenset({"dropped"})  # AMB-28: dropped lines are never recallable


BUSY_TIMEOUT_SECONDS = 3.0


# How long a writer lets announced waiters in before it takes the gate again (connections.let_waiters_in).
WRITER_YIELD_SECONDS = 1.0


WAL_CHECKPOINT_BYTES = 2 * 1024 * 1024


GEN_RE = re.compile(r"^gen-(\d+)$")


DUCKDB_CONFIG = {
    # Never reach for the network: the FTS extension is loaded from the installed package file.
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


COLUMNS = (
    "id",
    "day",
    "text",
    "recorded",
    "type",
    "status",
    "source_session",
    "path",
    "signifier",
    "due",
    "valid_from",
    "valid_to",
    "labels",
    "entities",
    "src",
    "attr",
    "replaceable",
    "insight",
    "content_hash",
    "row_digest",
    "seq",
)


CREATE_MEMORIES = """
CREATE TABLE memories (
    id VARCHAR PRIMARY KEY, day VARCHAR, text VARCHAR, recorded VARCHAR, type VARCHAR, status VARCHAR,
    source_session VARCHAR, path VARCHAR, signifier VARCHAR, due VARCHAR, valid_from VARCHAR,
    valid_to VARCHAR, labels VARCHAR, entities VARCHAR[], src VARCHAR, attr VARCHAR, replaceable BOOLEAN,
    insight BOOLEAN, content_hash VARCHAR, row_digest VARCHAR, seq BIGINT
)
"""


ARROW_SCHEMA = pa.schema(
    [
        pa.field(name, pa.list_(pa.string()))
        if name == "entities"
        else pa.field(name, pa.bool_())
        if name in ("replaceable", "insight")
        else pa.field(name, pa.int64())
        if name == "seq"
        else pa.field(name, pa.string())
        for name in COLUMNS
    ]
)


class IndexBusyError(Exception):
    """The index database stayed locked by another process for longer than the busy timeout."""


class RebuildReport(BaseModel):
    generation: int
    rows: int
    embedded: int  # rows whose vector was computed by this rebuild
    cached: int  # rows whose vector came from the cache or the previous generation
    seconds: float
    damaged: list[str] = []  # "daily/<day>.md:<line>" of bullets whose metadata does not parse (kept)


class RebuildShrinkError(Exception):
    """A rebuild would drop most memories of the active index; nothing was changed."""


SHRINK_GUARD_MIN_ROWS = 8  # below this, a big relative drop is ordinary editing


def fts_extension_path() -> Path:
    """The FTS extension file shipped by ``duckdb-extension-fts`` for this DuckDB version."""
    import duckdb_extension_fts

    base = Path(duckdb_extension_fts.__file__).parent / "extensions"
    exact = base / f"v{duckdb.__version__}" / "fts.duckdb_extension"
    if exact.is_file():
        return exact
    found = sorted(base.glob("v*/fts.duckdb_extension"))
    if not found:
        raise FileNotFoundError(f"no fts.duckdb_extension under {base}")
    return found[-1]


_VERIFIED_EXTENSION: tuple[str, int, int, int, int] | None = None


def file_identity(path: Path) -> tuple[str, int, int, int, int]:
    st = os.stat(path)
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def extension_state() -> tuple[Path, bool]:
    """The FTS file, and whether DuckDB already verified its signature in this process.

    Why: a signed LOAD re-checks the 11 MB file's signature on every connection (~55 ms here), and we
    may not keep connections open. The first LOAD per process is verified by DuckDB; later connections
    load the very same file (same inode, size and mtime) without re-verifying it.
    """
    path = fts_extension_path()
    return path, _VERIFIED_EXTENSION is not None and file_identity(path) == _VERIFIED_EXTENSION


def mark_verified(path: Path) -> None:
    global _VERIFIED_EXTENSION
    _VERIFIED_EXTENSION = file_identity(path)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sql_str(value: str) -> str:
    """A quoted literal for values this code owns (the extension path, hex digests, and the id filter
    LanceDB takes as text, which has no parameters). Text from memory always goes as a ``?`` parameter."""
    if any(ord(ch) < 32 for ch in value):
        raise ValueError("control character in a SQL literal")
    return "'" + value.replace("'", "''") + "'"


def is_lock_conflict(exc: BaseException) -> bool:
    msg = str(exc)
    return "lock" in msg.lower() or "different configuration" in msg


def privatise(path: Path) -> None:
    """DuckDB and Lance create files with the process umask: tighten to 0700 dirs / 0600 files.

    Only what is not private yet is changed: a Lance table gains files with every write and keeps the
    old ones, so changing every mode on every upsert cost O(files) metadata writes (issue #15)."""
    if stat.S_IMODE(os.lstat(path).st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    pending = [str(path)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    continue
                mode = DIR_MODE if stat.S_ISDIR(st.st_mode) else FILE_MODE
                if stat.S_IMODE(st.st_mode) != mode:
                    os.chmod(entry.path, mode)
                if mode == DIR_MODE:
                    pending.append(entry.path)


FLAT = (str, int, float, bool, type(None))


def fields_of(bullet: Bullet) -> dict[str, Any]:
    """``asdict(bullet)`` without its recursive deep copy (~50 µs a line, seconds per 100k rebuild):
    equal to it whenever every field is a scalar or a tuple of scalars, as Bullet's are."""
    out = {f.name: getattr(bullet, f.name) for f in dataclass_fields(bullet)}
    for value in out.values():
        if not isinstance(value, FLAT) and not (
            isinstance(value, tuple) and all(isinstance(v, FLAT) for v in value)
        ):
            return asdict(bullet)
    return out


def row_of(day: str, bullet: Bullet) -> dict[str, Any]:
    fields = fields_of(bullet)
    row: dict[str, Any] = {
        "id": bullet.id,
        "day": day,
        "text": bullet.text,
        "recorded": bullet.recorded,
        "type": bullet.type,
        "status": bullet.status,
        "source_session": bullet.source_session,
        "path": f"{DAILY_FOLDER}/{day}.md",
        "signifier": bullet.signifier,
        "due": bullet.due,
        "valid_from": bullet.valid_from,
        "valid_to": bullet.valid_to,
        "labels": bullet.labels,
        "entities": list(bullet.entities),
        "src": bullet.src,
        "attr": bullet.attr,
        "replaceable": bool(bullet.replaceable),
        "insight": bool(bullet.insight),
        "content_hash": content_hash(bullet.text),
    }
    fields["day"] = day
    # Any change of any field (status, validity …) must reach the index on upsert, not only text changes.
    row["row_digest"] = hashlib.sha256(
        json.dumps(fields, sort_keys=True, default=list).encode("utf-8")
    ).hexdigest()
    return row


DIGEST_MOD = 1 << 256


def pair_hash(rid: str, digest: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{rid}\t{digest}\n".encode()).digest(), "big")


def digest_hex(total: int) -> str:
    return f"{total % DIGEST_MOD:064x}"


def digest_of_rows(pairs: Iterable[tuple[str, str]]) -> str:
    """Digest of the indexed (id, row digest) set: equal digests mean equal indexed content.

    A sum of per-row hashes mod 2^256, so an upsert updates it from the rows it changes instead of
    re-reading the whole table (kept in ``meta`` in the same transaction as the rows)."""
    return digest_hex(sum(pair_hash(rid, digest) for rid, digest in pairs))
