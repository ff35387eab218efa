"""``tempomem export`` and ``tempomem import apply|restore`` (WM-21, CLI-10, CLI-11, AMB-34).

Export is a backup and the one maintenance command allowed on a live store. It is strictly read-only: it
never opens the DuckDB/LanceDB index, takes no lock and creates nothing under the memory root. It reads only
canonical files — ``daily/`` and ``audit/`` day files, ``graph.jsonl``, ``.replay-projection-v1.json`` —
plus content-free intake metadata (ids, states, instants, counters, payload digests; never summaries or
capture text). A consistent snapshot is a pass whose file digests equal the previous pass's; passes repeat
until two agree (AMB-34). The archive is a ``.tar.gz``:

    manifest.json              format, creation instant, and path + sha256 + size of every other member
    canonical/daily/<day>.md   canonical files, byte for byte
    canonical/audit/<day>.md
    canonical/graph.jsonl
    canonical/.replay-projection-v1.json
    canonical/.turn-archive/<day>/<id>.json   archived turn payloads (storage.turn_archive), so a
                               restored store can still be re-curated; they hold turn text, like the
                               Markdown does
    intake-metadata.json       content-free: record views and receipts (informational), and the ledger's
                               commitments (id, payload hash), which import merges into the store's
                               ledger so a restored store never admits a curated run id again

Import needs a stopped agent: it takes the liveness fence (``AgentRunningError`` otherwise) and the store
lock. Both verbs verify the whole archive first — only regular files and directories, no absolute paths,
``..``, links or devices, only canonical names, every digest and size as listed, nothing unlisted — then
stage the new files under ``<root>/.import-staging-<hex>/`` and commit with a journal: a ``COMMIT`` file
naming every staged file and the digest the live file had when staged; renames follow. A crash before
``COMMIT`` leaves the store untouched (the staging folder is discarded later); a crash after it is rolled
forward by ``recover_interrupted_import`` (run by every import, and meant for worker start), which refuses
to overwrite a live file that changed since. So a store is never left half-applied.

* ``restore`` puts the archive's canonical files in place into an empty store, or a *matching* one: every
  canonical file already present equals the archive's (re-running an interrupted restore completes it).
* ``apply`` merges: daily/audit bullets idempotently by id (``storage.markdown.append_bullets``; an id
  already anywhere in the store's folder is kept as is), graph rows via ``storage.graph.apply`` (attesting
  memories unioned) and replay-sidecar entries via ``storage.replay_projection.merge`` (a conflicting
  entry refuses the whole import); archived turns the store lacks are added, equal ones kept, and one
  that differs refuses the import. Applying the same archive twice changes nothing the second time.
* Every archived turn must parse as an intake payload named by its own id (sha256 of its run id) in the
  folder of its admission day; anything else refuses the import before anything is staged.

The recall index is not part of the archive: rebuild it from canonical Markdown after an import.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tempomem.storage import graph as graph_store
from tempomem.storage import replay_projection
from tempomem.storage.fence import hold_fence
from tempomem.storage.fsio import UnsafePathError, atomic_write, ensure_private_dir, exclusive_lock, fsync_dir
from tempomem.storage.intake import INTAKE_DIR, Intake, IntakeError, IntakePayload, RecordState, intake_id
from tempomem.storage.ledger import LedgerIntegrityError
from tempomem.storage.markdown import append_bullets, read_document
from tempomem.storage.store_ref import STORE_LOCK
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
_CHUNK = 1 << 20

_DAY_FILE = re.compile(r"(daily|audit)/(\d{4}-\d{2}-\d{2})\.md")
# Archived turn payloads (re-curation's input, storage.turn_archive): <day>/<intake id>.json
_ARCHIVED_TURN = re.compile(r"\.turn-archive/(\d{4}-\d{2}-\d{2})/([0-9a-f]{64})\.json")
_TOP_FILES = (graph_store.GRAPH_NAME, replay_projection.SIDECAR_NAME)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_UNSTABLE_META = b"unstable"
_UNSTABLE = hashlib.sha256(_UNSTABLE_META).hexdigest()
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


class ArchiveError(Exception):
    """Export or import refused: unstable store, bad or tampered archive, conflicting store."""


class ExportUnstableError(ArchiveError):
    """The live store kept changing: no two consecutive passes agreed."""


class ImportConflictError(ArchiveError):
    """``restore`` into a store whose canonical files differ from the archive's, or a merge conflict."""


class ImportRecoveryError(ArchiveError):
    """An interrupted import cannot be rolled forward safely (a live file changed since it was staged)."""


# -- canonical file set ------------------------------------------------------------------------------------
def _is_day(day: str) -> bool:
    try:
        dt.date.fromisoformat(day)
    except ValueError:
        return False
    return True


def is_canonical(rel: str) -> bool:
    """Whether ``rel`` (a POSIX path relative to the root) names a file the archive carries: a canonical
    file, or an archived turn (kept with them so a restored store can still be re-curated)."""
    if rel in _TOP_FILES:
        return True
    match = _DAY_FILE.fullmatch(rel)
    if match is not None:
        return _is_day(match[2])
    turn = _ARCHIVED_TURN.fullmatch(rel)
    return turn is not None and _is_day(turn[1])


def is_archived_turn(rel: str) -> bool:
    return _ARCHIVED_TURN.fullmatch(rel) is not None


def _list_canonical(root: Path) -> list[str]:
    """Canonical files present now (no temp files, notes or misnamed files). Read-only."""
    found = [name for name in _TOP_FILES if os.path.lexists(root / name)]
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


def _open_regular(path: Path) -> int:
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


def _digest_file(path: Path) -> str | None:
    """sha256 of a file, ``None`` when it does not exist."""
    try:
        fd = _open_regular(path)
    except FileNotFoundError:
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# -- export ------------------------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class ExportReport:
    path: Path
    files: int
    bytes: int
    passes: int
    intake_records: int
    sha256: str  # of the archive itself


def _intake_metadata(root: Path, now: dt.datetime) -> bytes:
    """Content-free intake metadata: views of pending/dead records (+ payload digests) and receipts."""
    intake = Intake(root)
    records: list[dict[str, Any]] = []
    for state in (RecordState.PENDING, RecordState.DEAD):
        folder = intake.pending_dir if state is RecordState.PENDING else intake.dead_dir
        for record_id in intake.list_ids(state):
            view = intake.view(record_id, now=now).model_dump(mode="json", exclude={"due"})
            view["payload_sha256"] = _digest_file(folder / record_id)
            records.append(view)
    receipts: list[dict[str, Any]] = []
    for record_id in intake.list_ids(RecordState.RESOLVED):
        path = intake.resolved_dir / f"{record_id}.receipt.json"
        fd = _open_regular(path)
        with os.fdopen(fd, "rb") as f:
            receipts.append(json.loads(f.read(1 << 16)))
    # The permanent ledger's commitments (ids and payload hashes only): imported, so a restored store
    # keeps refusing run ids it has already curated (INTAKE-28).
    commitments = sorted(intake.ledger.entries(intake.has_receipt))
    data = {"records": records, "receipts": receipts, "commitments": commitments}
    return (json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _copy_pass(root: Path, dest: Path, now: dt.datetime) -> dict[str, tuple[str, int]]:
    """Copy every canonical file into ``dest`` (plus the intake metadata); ``{rel: (sha256, size)}``."""
    digests: dict[str, tuple[str, int]] = {}
    for rel in _list_canonical(root):
        try:
            src = _open_regular(root / rel)
        except FileNotFoundError:
            continue  # gone since the listing: the next pass will differ and settle it
        target = dest / CANONICAL_PREFIX / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        h = hashlib.sha256()
        size = 0
        with os.fdopen(src, "rb") as fin, open(target, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                h.update(chunk)
                size += len(chunk)
                fout.write(chunk)
        digests[CANONICAL_PREFIX + rel] = (h.hexdigest(), size)
    if (root / INTAKE_DIR).is_dir():
        try:
            meta = _intake_metadata(root, now)
        except (IntakeError, FileNotFoundError, UnsafePathError, ValueError):
            meta = _UNSTABLE_META  # a record moved mid-read: never equal to a real pass, so retry
        (dest / INTAKE_META_NAME).write_bytes(meta)
        digests[INTAKE_META_NAME] = (hashlib.sha256(meta).hexdigest(), len(meta))
    return digests


def _tar_add(tar: tarfile.TarFile, name: str, data_path: Path | None, data: bytes | None, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.mode = 0o600
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        assert data_path is not None
        info.size = data_path.stat().st_size
        with open(data_path, "rb") as f:
            tar.addfile(info, f)


def export_store(
    root: Path,
    out: Path,
    *,
    max_passes: int = DEFAULT_MAX_PASSES,
    pause_seconds: float = 0.05,
    now: dt.datetime | None = None,
) -> ExportReport:
    """Write a consistent ``.tar.gz`` backup of the store at ``root`` to ``out`` (atomically).

    Safe on a live store (read-only, no locks). Raises ``ExportUnstableError`` when no two consecutive
    passes of ``max_passes`` agree, ``ArchiveError`` for a missing root, an unsafe canonical file (a
    symlink, another owner) or an ``out`` inside the root.
    """
    root = Path(root)
    out = Path(out).absolute()
    if not root.is_dir():
        raise ArchiveError(f"no memory store at {root}")
    if out.resolve().is_relative_to(root.resolve()):
        raise ArchiveError("the export archive must be written outside the memory root (export is read-only)")
    if max_passes < 2:
        raise ValueError("max_passes must be at least 2: a snapshot needs two agreeing passes")
    now = now or dt.datetime.now(dt.UTC)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tempomem-export-", dir=out.parent) as tmp:
        previous: tuple[Path, dict[str, tuple[str, int]]] | None = None
        snapshot: tuple[Path, dict[str, tuple[str, int]]] | None = None
        passes = 0
        for n in range(max_passes):
            passes = n + 1
            dest = Path(tmp) / f"pass-{n}"
            dest.mkdir(mode=0o700)
            try:
                digests = _copy_pass(root, dest, now)
            except UnsafePathError as exc:
                raise ArchiveError(f"unsafe canonical file: {exc}") from None
            if previous is not None:
                if digests == previous[1] and digests.get(INTAKE_META_NAME, ("",))[0] != _UNSTABLE:
                    snapshot = (dest, digests)
                    shutil.rmtree(previous[0])
                    break
                shutil.rmtree(previous[0])
            previous = (dest, digests)
            time.sleep(pause_seconds)
        if snapshot is None:
            raise ExportUnstableError(
                f"the store at {root} kept changing: no two consecutive passes of {max_passes} agreed"
            )
        dest, digests = snapshot
        manifest = Manifest(
            format=FORMAT,
            version=FORMAT_VERSION,
            created_at=now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            passes=passes,
            files=tuple(ManifestEntry(path=p, sha256=d, size=s) for p, (d, s) in sorted(digests.items())),
        )
        manifest_bytes = (manifest.model_dump_json(indent=1) + "\n").encode("utf-8")
        part = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        mtime = int(now.timestamp())
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as raw:
                with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                    _tar_add(tar, MANIFEST_NAME, None, manifest_bytes, mtime)
                    for entry in manifest.files:
                        _tar_add(tar, entry.path, dest / entry.path, None, mtime)
                raw.flush()
                os.fsync(raw.fileno())
            os.rename(part, out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)
            raise
        fsync_dir(out.parent)
    verified = verify_archive(out)  # proves the archive reads back before we report success
    n_records = len(json.loads(verified.intake_metadata or b"{}").get("records", []))
    return ExportReport(
        path=out,
        files=len(verified.manifest.canonical()),
        bytes=sum(e.size for e in verified.manifest.files),
        passes=passes,
        intake_records=n_records,
        sha256=_digest_file(out) or "",
    )


# -- reading and verifying an archive -------------------------------------------------------------------
@dataclass
class VerifiedArchive:
    manifest: Manifest
    canonical: dict[str, Path] = field(default_factory=dict)  # rel → spooled file (only when spooled)
    intake_metadata: bytes | None = None


def _check_member_name(name: str) -> str:
    if not name or "\\" in name or "\x00" in name:
        raise ArchiveError(f"archive member {name!r} has an unsafe name")
    if name.startswith("/") or PurePosixPath(name).is_absolute():
        raise ArchiveError(f"archive member {name!r} is an absolute path")
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ArchiveError(f"archive member {name!r} contains '..', '.' or an empty path segment")
    return "/".join(parts)


def _iter_members(path: Path) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo, str]]:
    try:
        tar = tarfile.open(path, mode="r:gz")  # noqa: SIM115 - closed by the `with tar:` below
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{path} is not a readable .tar.gz archive ({type(exc).__name__})") from None
    with tar:
        count = 0
        try:
            for member in tar:
                count += 1
                if count > MAX_MEMBERS:
                    raise ArchiveError(f"archive has more than {MAX_MEMBERS} members")
                name = _check_member_name(member.name)
                if member.issym() or member.islnk():
                    raise ArchiveError(f"archive member {name!r} is a link; links are never imported")
                if not (member.isreg() or member.isdir()):
                    raise ArchiveError(f"archive member {name!r} is not a regular file or directory")
                yield tar, member, name
        except _READ_ERRORS as exc:
            raise ArchiveError(f"{path} is corrupt or truncated ({type(exc).__name__})") from None


def verify_archive(path: Path, *, spool_to: Path | None = None) -> VerifiedArchive:
    """Check every member of an export archive; optionally spool canonical files under ``spool_to``.

    Raises ``ArchiveError`` on anything unexpected; nothing is written outside ``spool_to``.
    """
    manifest: Manifest | None = None
    seen: set[str] = set()
    total = 0
    result: VerifiedArchive | None = None
    for tar, member, name in _iter_members(Path(path)):
        if member.isdir():
            continue
        if name in seen:
            raise ArchiveError(f"archive member {name!r} appears twice")
        seen.add(name)
        if member.size > MAX_MEMBER_BYTES:
            raise ArchiveError(f"archive member {name!r} is larger than {MAX_MEMBER_BYTES} bytes")
        total += member.size
        if total > MAX_TOTAL_BYTES:
            raise ArchiveError(f"archive is larger than {MAX_TOTAL_BYTES} bytes")
        f = tar.extractfile(member)
        assert f is not None
        if manifest is None:
            if name != MANIFEST_NAME:
                raise ArchiveError(f"{MANIFEST_NAME} must be the first member of an export archive")
            if member.size > MAX_MANIFEST_BYTES:
                raise ArchiveError(f"{MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES} bytes")
            try:
                manifest = Manifest.model_validate_json(_read_all(f, name))
            except ValidationError as exc:
                raise ArchiveError(f"{MANIFEST_NAME} is malformed ({exc.errors()[0]['type']})") from None
            if manifest.format != FORMAT or manifest.version != FORMAT_VERSION:
                raise ArchiveError(f"unsupported archive format {manifest.format!r} v{manifest.version}")
            listed: dict[str, ManifestEntry] = {}
            for entry in manifest.files:
                _check_member_name(entry.path)
                rel = entry.path.removeprefix(CANONICAL_PREFIX)
                if entry.path != INTAKE_META_NAME and not (
                    entry.path.startswith(CANONICAL_PREFIX) and is_canonical(rel)
                ):
                    raise ArchiveError(f"manifest lists {entry.path!r}, which is not a canonical file")
                if entry.path in listed or not _HEX64.fullmatch(entry.sha256) or entry.size < 0:
                    raise ArchiveError(f"manifest entry {entry.path!r} is duplicated or malformed")
                listed[entry.path] = entry
            result = VerifiedArchive(manifest=manifest)
            continue
        assert result is not None
        entry = listed.get(name)
        if entry is None:
            raise ArchiveError(f"archive member {name!r} is not listed in the manifest")
        h = hashlib.sha256()
        size = 0
        sink: Any = None
        buffer = bytearray()
        rel = name.removeprefix(CANONICAL_PREFIX)
        if spool_to is not None and name != INTAKE_META_NAME:
            target = spool_to / rel
            ensure_private_dir(target.parent)
            sink = os.fdopen(
                os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb"
            )
        try:
            while chunk := _read_chunk(f, name):
                h.update(chunk)
                size += len(chunk)
                if sink is not None:
                    sink.write(chunk)
                elif name == INTAKE_META_NAME:
                    buffer += chunk
            if sink is not None:
                sink.flush()
                os.fsync(sink.fileno())
        finally:
            if sink is not None:
                sink.close()
        if h.hexdigest() != entry.sha256 or size != entry.size:
            raise ArchiveError(
                f"archive member {name!r} does not match its manifest digest (tampered or corrupt)"
            )
        if name == INTAKE_META_NAME:
            result.intake_metadata = bytes(buffer)
        elif spool_to is not None:
            result.canonical[rel] = spool_to / rel
    if manifest is None or result is None:
        raise ArchiveError(f"{path} holds no {MANIFEST_NAME}")
    missing = sorted({e.path for e in manifest.files} - seen)
    if missing:
        raise ArchiveError(f"archive lacks {len(missing)} file(s) its manifest lists, e.g. {missing[0]!r}")
    return result


def _read_all(f: Any, name: str) -> bytes:
    try:
        return f.read()
    except _READ_ERRORS as exc:
        raise ArchiveError(
            f"archive member {name!r} is corrupt or truncated ({type(exc).__name__})"
        ) from None


def _read_chunk(f: Any, name: str) -> bytes:
    try:
        return f.read(_CHUNK)
    except _READ_ERRORS as exc:
        raise ArchiveError(
            f"archive member {name!r} is corrupt or truncated ({type(exc).__name__})"
        ) from None


def _validate_structured(files: dict[str, Path]) -> None:
    """Graph and sidecar must parse: importing bytes the store would refuse to read is refused."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in _TOP_FILES:
            if name not in files:
                continue
            probe = Path(tmp) / name
            shutil.copyfile(files[name], probe)
            os.chmod(probe, 0o600)
        try:
            graph_store.load_graph(Path(tmp))
            replay_projection.load(Path(tmp))
        except (graph_store.GraphError, replay_projection.SidecarError) as exc:
            raise ArchiveError(f"archive holds an invalid graph or replay sidecar: {exc}") from None
    for rel, path in files.items():
        if is_archived_turn(rel):
            _validate_archived_turn(rel, path)


def _validate_archived_turn(rel: str, path: Path) -> None:
    """An archived turn must be the admitted payload it is named after: a valid intake payload whose id
    is the sha256 of its run id and the file name, admitted on the folder's day, not a re-curation."""
    match = _ARCHIVED_TURN.fullmatch(rel)
    assert match is not None
    try:
        payload = IntakePayload.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"archive holds an archived turn that is not an intake payload ({rel})") from exc
    if (
        payload.id != match[2]
        or intake_id(payload.run_id) != payload.id
        or payload.admitted_at[:10] != match[1]
        or payload.recurate_of is not None
    ):
        raise ArchiveError(f"archive holds an archived turn that does not match its name ({rel})")


# -- staged, journalled commit ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImportReport:
    mode: str  # "restore" | "apply"
    files_written: int
    bullets_added: int = 0
    bullets_skipped: int = 0
    graph_rows_changed: int = 0
    sidecar_entries_added: int = 0
    archived_turns_added: int = 0
    recovered: int = 0
    changed_paths: tuple[str, ...] = ()
    commitments_added: int = 0  # ledger commitments the store lacked (duplicate protection kept)


def _commit(root: Path, staging: Path, files: dict[str, tuple[str | None, str]]) -> None:
    """``files``: rel → (live digest when staged or None, staged digest). Journal, then roll forward."""
    journal = {"files": {rel: {"base": base, "new": new} for rel, (base, new) in sorted(files.items())}}
    atomic_write(staging / COMMIT_NAME, json.dumps(journal, sort_keys=True).encode("utf-8"))
    _roll_forward(root, staging)


def _roll_forward(root: Path, staging: Path) -> int:
    try:
        journal = json.loads((staging / COMMIT_NAME).read_bytes())
        files: dict[str, dict[str, str | None]] = journal["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ImportRecoveryError(f"unreadable import journal in {staging} ({type(exc).__name__})") from None
    # Check everything before moving anything: a changed live file means someone wrote since staging.
    for rel, want in files.items():
        if not is_canonical(rel):
            raise ImportRecoveryError(f"import journal in {staging} names a non-canonical path {rel!r}")
        live = _digest_file(root / rel)
        staged = _digest_file(staging / rel)
        if live == want["new"]:
            continue
        if live != want["base"] or staged != want["new"]:
            raise ImportRecoveryError(
                f"cannot finish the interrupted import in {staging.name}: {rel} changed since it was staged; "
                f"inspect the store, then delete {staging} to abandon it"
            )
    moved = 0
    for rel, want in files.items():
        target = root / rel
        if _digest_file(target) == want["new"]:
            continue
        ensure_private_dir(target.parent)
        os.rename(staging / rel, target)
        fsync_dir(target.parent)
        moved += 1
    shutil.rmtree(staging)
    fsync_dir(root)
    return moved


def recover_interrupted_import(root: Path) -> int:
    """Finish committed imports and discard uncommitted staging under ``root``; files moved.

    The caller holds the fence (an import, or a worker at start before it touches the store).
    """
    root = Path(root)
    moved = 0
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return 0
    for name in names:
        path = root / name
        if not name.startswith(STAGING_PREFIX) or path.is_symlink() or not path.is_dir():
            continue
        if (path / COMMIT_NAME).exists():
            moved += _roll_forward(root, path)
        else:
            shutil.rmtree(path)
            fsync_dir(root)
    return moved


@contextlib.contextmanager
def _stopped_store(root: Path, what: str) -> Iterator[tuple[Path, int]]:
    """Fence + store lock + a fresh staging folder (removed unless committed); also files recovered."""
    root = Path(root)
    with hold_fence(root, what=what), exclusive_lock(root / STORE_LOCK):
        recovered = recover_interrupted_import(root)
        staging = root / f"{STAGING_PREFIX}{secrets.token_hex(8)}"
        os.mkdir(staging, 0o700)
        try:
            yield staging, recovered
        except UnsafePathError as exc:  # a symlinked or foreign canonical file in the live store
            raise ArchiveError(f"unsafe file in the store: {exc}") from None
        finally:
            if staging.exists() and not (staging / COMMIT_NAME).exists():
                shutil.rmtree(staging, ignore_errors=True)


def _commitments(verified: VerifiedArchive) -> list[tuple[str, str]]:
    """The ledger commitments an archive carries (none in archives from before they were exported)."""
    if not verified.intake_metadata:
        return []
    try:
        raw = json.loads(verified.intake_metadata).get("commitments", [])
        pairs = [(str(a), str(b)) for a, b in raw]
    except (ValueError, TypeError, AttributeError):
        raise ArchiveError("intake metadata commitments are malformed") from None
    if not all(_HEX64.fullmatch(a) and _HEX64.fullmatch(b) for a, b in pairs):
        raise ArchiveError("intake metadata commitments are malformed")
    return pairs


def _check_commitments(root: Path, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The commitments the store lacks; ``ImportConflictError`` (nothing changed) when the store commits
    one of the ids with another payload hash (another store's history under the same run id)."""
    if not pairs:
        return []
    intake = Intake(root)
    known: dict[str, str] = {}
    if intake.base.exists():  # a check creates nothing: a refused import leaves the store untouched
        with intake.lock():
            try:
                known = dict(intake.ledger.entries(intake.has_receipt))
            except LedgerIntegrityError as exc:
                raise ArchiveError(f"the store's ledger fails its integrity check: {exc}") from None
    conflicts = [a for a, b in pairs if a in known and known[a] != b]
    if conflicts:
        raise ImportConflictError(
            f"the archive commits {len(conflicts)} run id(s) the store committed with other bytes "
            f"(e.g. intake id {conflicts[0]})"
        )
    return [(a, b) for a, b in pairs if a not in known]


def _append_commitments(root: Path, missing: list[tuple[str, str]]) -> int:
    if not missing:
        return 0
    intake = Intake(root)
    with intake.lock():
        intake.add_imported(missing)  # vouches for them first: a kill mid-append never wedges the ledger
        return sum(1 for a, b in missing if intake.ledger.append(a, b, intake.has_receipt))


def import_restore(root: Path, archive: Path) -> ImportReport:
    """Replace the canonical files of a stopped, empty (or matching) store with the archive's."""
    root = Path(root)
    with _stopped_store(root, "import restore") as (staging, recovered):
        verified = verify_archive(archive, spool_to=staging)
        _validate_structured(verified.canonical)
        wanted = verified.manifest.canonical()
        present = _list_canonical(root)
        conflicts = [
            rel for rel in present if rel not in wanted or _digest_file(root / rel) != wanted[rel].sha256
        ]
        if conflicts:
            raise ImportConflictError(
                f"restore needs an empty store or one matching the archive; {len(conflicts)} canonical "
                f"file(s) differ (e.g. {conflicts[0]}). Use `import apply` to merge instead."
            )
        missing = _check_commitments(root, _commitments(verified))
        todo = {rel: (None, wanted[rel].sha256) for rel in wanted if rel not in present}
        for rel in set(wanted) - set(todo):
            (staging / rel).unlink()
        if todo:
            _commit(root, staging, todo)
        # After the files: a kill in between leaves commitments to add, which re-running the import adds.
        committed = _append_commitments(root, missing)
        return ImportReport(
            mode="restore",
            files_written=len(todo),
            recovered=recovered,
            changed_paths=tuple(sorted(todo)),
            commitments_added=committed,
        )


def import_apply(root: Path, archive: Path) -> ImportReport:
    """Merge an archive into a stopped store: bullets by id, graph rows, sidecar entries. Idempotent."""
    root = Path(root)
    with _stopped_store(root, "import apply") as (staging, recovered):
        incoming = staging / "incoming"
        os.mkdir(incoming, 0o700)
        verified = verify_archive(archive, spool_to=incoming)
        _validate_structured(verified.canonical)
        missing = _check_commitments(root, _commitments(verified))
        out = staging / "out"
        os.mkdir(out, 0o700)
        bases: dict[str, str | None] = {}

        def stage_copy(rel: str) -> Path:
            """A private copy of the live file (if any) to merge into; remembers its digest."""
            target = out / rel
            if rel not in bases:
                ensure_private_dir(target.parent)
                bases[rel] = _digest_file(root / rel)
                if bases[rel] is not None:
                    shutil.copyfile(root / rel, target, follow_symlinks=False)
                    os.chmod(target, 0o600)
            return target

        added = skipped = 0
        for folder in ("daily", "audit"):
            known = {b.id for rel in _list_canonical(root) if rel.startswith(f"{folder}/")
                     for b in read_document(root / rel).bullets()}  # fmt: skip
            for rel in sorted(r for r in verified.canonical if r.startswith(f"{folder}/")):
                day = rel.split("/")[1][:-3]
                new = []
                for bullet in read_document(verified.canonical[rel]).bullets():
                    if bullet.id in known:
                        skipped += 1
                    else:
                        known.add(bullet.id)
                        new.append(bullet)
                if new:
                    added += append_bullets(stage_copy(rel), day, new)
        graph_changed = 0
        if graph_store.GRAPH_NAME in verified.canonical:
            incoming_graph = graph_store.load_graph(incoming)
            stage_copy(graph_store.GRAPH_NAME)
            try:
                graph_changed = graph_store.apply(
                    out, incoming_graph.entities.values(), incoming_graph.relations.values()
                )
            except graph_store.GraphError as exc:
                raise ImportConflictError(f"graph rows cannot be merged: {exc}") from None
        sidecar_added = 0
        if replay_projection.SIDECAR_NAME in verified.canonical:
            delta = replay_projection.load(incoming).entries
            stage_copy(replay_projection.SIDECAR_NAME)
            try:
                sidecar_added = replay_projection.apply_delta(out, delta)
            except replay_projection.SidecarError as exc:
                raise ImportConflictError(f"replay sidecar entries conflict: {exc}") from None
        turns_added = 0
        for rel in sorted(r for r in verified.canonical if is_archived_turn(r)):
            # An archived turn is immutable: add it when missing, keep it when equal, refuse when it
            # differs (the same run id admitted with other bytes is another store's history).
            live = _digest_file(root / rel)
            incoming_digest = verified.manifest.canonical()[rel].sha256
            if live == incoming_digest:
                continue
            if live is not None:
                raise ImportConflictError(f"archived turn {rel} differs from the store's")
            target = stage_copy(rel)
            shutil.copyfile(verified.canonical[rel], target, follow_symlinks=False)
            os.chmod(target, 0o600)
            turns_added += 1
        changed: dict[str, tuple[str | None, str]] = {}
        for rel, base in bases.items():
            new_digest = _digest_file(out / rel)
            if new_digest is not None and new_digest != base:
                changed[rel] = (base, new_digest)
        if changed:
            # Only files that change are journalled; move them to the staging top level the journal names.
            for rel in changed:
                ensure_private_dir((staging / rel).parent)
                os.rename(out / rel, staging / rel)
            shutil.rmtree(incoming)
            shutil.rmtree(out)
            _commit(root, staging, changed)
        committed = _append_commitments(root, missing)
        return ImportReport(
            mode="apply",
            commitments_added=committed,
            files_written=len(changed),
            bullets_added=added,
            bullets_skipped=skipped,
            graph_rows_changed=graph_changed,
            sidecar_entries_added=sidecar_added,
            archived_turns_added=turns_added,
            recovered=recovered,
            changed_paths=tuple(sorted(changed)),
        )
