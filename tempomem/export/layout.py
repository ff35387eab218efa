"""What an export holds and the errors of export and import: the format's names and bounds, and which
files under a memory root are canonical (day files, graph, replay sidecar, archived turns)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tarfile
import zlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tempomem.storage import graph as graph_store
from tempomem.storage import replay_sidecar
from tempomem.storage.fsio import UnsafePathError
from tempomem.storage.markdown import is_day
from tempomem.storage.turn_archive import ARCHIVE_DIR

FORMAT = "tempomem-export"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
INTAKE_META_NAME = "intake-metadata.json"
CANONICAL_PREFIX = "canonical/"
STAGING_PREFIX = ".import-staging-"
COMMIT_NAME = "COMMIT"
DEFAULT_MAX_PASSES = 20
MAX_MEMBER_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
MAX_MEMBERS = 200_000
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
CHUNK = 1 << 20

_DAY_FILE = re.compile(r"(daily|audit)/(\d{4}-\d{2}-\d{2})\.md")
# Archived turn payloads (re-curation's input, storage.turn_archive): <day>/<intake id>.json
ARCHIVED_TURN = re.compile(r"\.turn-archive/(\d{4}-\d{2}-\d{2})/([0-9a-f]{64})\.json")
TOP_FILES = (graph_store.GRAPH_NAME, replay_sidecar.SIDECAR_NAME)
HEX64 = re.compile(r"[0-9a-f]{64}")
UNSTABLE_META = b"unstable"
UNSTABLE = hashlib.sha256(UNSTABLE_META).hexdigest()
READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


class ArchiveError(Exception):
    """Export or import refused: unstable store, bad or tampered archive, conflicting store."""


class ExportUnstableError(ArchiveError):
    """The live store kept changing: no two consecutive passes agreed."""


class ImportConflictError(ArchiveError):
    """``restore`` into a store whose canonical files differ from the archive's, or a merge conflict."""


class ImportRecoveryError(ArchiveError):
    """An interrupted import cannot be rolled forward safely (a live file changed since it was staged)."""


# -- canonical file set ------------------------------------------------------------------------------------
def is_canonical(rel: str) -> bool:
    """Whether ``rel`` (a POSIX path relative to the root) names a file the archive carries: a canonical
    file, or an archived turn (kept with them so a restored store can still be re-curated)."""
    if rel in TOP_FILES:
        return True
    match = _DAY_FILE.fullmatch(rel)
    if match is not None:
        return is_day(match[2])
    turn = ARCHIVED_TURN.fullmatch(rel)
    return turn is not None and is_day(turn[1])


def is_archived_turn(rel: str) -> bool:
    return ARCHIVED_TURN.fullmatch(rel) is not None


def list_canonical(root: Path) -> list[str]:
    """Canonical files present now (no temp files, notes or misnamed files). Read-only."""
    found = [name for name in TOP_FILES if os.path.lexists(root / name)]
    for folder in ("daily", "audit"):
        try:
            names = os.listdir(root / folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        found += [f"{folder}/{n}" for n in names if is_canonical(f"{folder}/{n}")]
    try:
        days = os.listdir(root / ARCHIVE_DIR)
    except (FileNotFoundError, NotADirectoryError):
        days = []
    for day in days:
        try:
            names = os.listdir(root / ARCHIVE_DIR / day)
        except (FileNotFoundError, NotADirectoryError):
            continue
        found += [rel for n in names if is_canonical(rel := f"{ARCHIVE_DIR}/{day}/{n}")]
    return sorted(found)


def open_regular(path: Path) -> int:
    """An O_RDONLY descriptor of a regular file we own, never through a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise UnsafePathError(f"{path} cannot be opened safely ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise UnsafePathError(f"{path} is not a regular file owned by this user")
    return fd


def digest_file(path: Path) -> str | None:
    """sha256 of a file, ``None`` when it does not exist."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


class ManifestEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str
    size: int


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str
    version: int
    created_at: str
    passes: int
    files: tuple[ManifestEntry, ...]

    def canonical(self) -> dict[str, ManifestEntry]:
        return {
            e.path.removeprefix(CANONICAL_PREFIX): e
            for e in self.files
            if e.path.startswith(CANONICAL_PREFIX)
        }
