"""Reading an archive: every member checked (names, kinds, sizes, digests, nothing unlisted) before
anything is used, and the structured files validated."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from tempomem.export.layout import (
    ARCHIVED_TURN,
    CANONICAL_PREFIX,
    CHUNK,
    FORMAT,
    FORMAT_VERSION,
    HEX64,
    INTAKE_META_NAME,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MEMBERS,
    MAX_TOTAL_BYTES,
    READ_ERRORS,
    TOP_FILES,
    ArchiveError,
    Manifest,
    ManifestEntry,
    is_archived_turn,
    is_canonical,
)
from tempomem.storage import graph as graph_store
from tempomem.storage import replay_sidecar
from tempomem.storage.fsio import ensure_private_dir
from tempomem.storage.intake_records import IntakePayload, intake_id


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
        except READ_ERRORS as exc:
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
                if entry.path in listed or not HEX64.fullmatch(entry.sha256) or entry.size < 0:
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
    except READ_ERRORS as exc:
        raise ArchiveError(
            f"archive member {name!r} is corrupt or truncated ({type(exc).__name__})"
        ) from None


def _read_chunk(f: Any, name: str) -> bytes:
    try:
        return f.read(CHUNK)
    except READ_ERRORS as exc:
        raise ArchiveError(
            f"archive member {name!r} is corrupt or truncated ({type(exc).__name__})"
        ) from None


def validate_structured(files: dict[str, Path]) -> None:
    """Graph and sidecar must parse: importing bytes the store would refuse to read is refused."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in TOP_FILES:
            if name not in files:
                continue
            probe = Path(tmp) / name
            shutil.copyfile(files[name], probe)
            os.chmod(probe, 0o600)
        try:
            graph_store.load_graph(Path(tmp))
            replay_sidecar.load(Path(tmp))
        except (graph_store.GraphError, replay_sidecar.SidecarError) as exc:
            raise ArchiveError(f"archive holds an invalid graph or replay sidecar: {exc}") from None
    for rel, path in files.items():
        if is_archived_turn(rel):
            _validate_archived_turn(rel, path)


def _validate_archived_turn(rel: str, path: Path) -> None:
    """An archived turn must be the admitted payload it is named after: a valid intake payload whose id
    is the sha256 of its run id and the file name, admitted on the folder's day, not a re-curation."""
    match = ARCHIVED_TURN.fullmatch(rel)
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
