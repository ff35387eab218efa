"""``import_restore`` and ``import_apply``: staged under the memory root and committed with a journal, so a
store is never left half-applied; ``recover_interrupted_import`` rolls an interrupted commit forward."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tempomem.export.layout import (
    COMMIT_NAME,
    HEX64,
    STAGING_PREFIX,
    ArchiveError,
    ImportConflictError,
    ImportRecoveryError,
    digest_file,
    is_archived_turn,
    is_canonical,
    list_canonical,
)
from tempomem.export.verify import VerifiedArchive, validate_structured, verify_archive
from tempomem.storage import graph as graph_store
from tempomem.storage import replay_sidecar
from tempomem.storage.fence import hold_fence
from tempomem.storage.fsio import UnsafePathError, atomic_write, ensure_private_dir, exclusive_lock, fsync_dir
from tempomem.storage.intake import Intake
from tempomem.storage.ledger import LedgerIntegrityError
from tempomem.storage.markdown import append_bullets, read_document
from tempomem.storage.store_ref import STORE_LOCK


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
        live = digest_file(root / rel)
        staged = digest_file(staging / rel)
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
        if digest_file(target) == want["new"]:
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
    if not all(HEX64.fullmatch(a) and HEX64.fullmatch(b) for a, b in pairs):
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
        validate_structured(verified.canonical)
        wanted = verified.manifest.canonical()
        present = list_canonical(root)
        conflicts = [
            rel for rel in present if rel not in wanted or digest_file(root / rel) != wanted[rel].sha256
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
        validate_structured(verified.canonical)
        missing = _check_commitments(root, _commitments(verified))
        out = staging / "out"
        os.mkdir(out, 0o700)
        bases: dict[str, str | None] = {}

        def stage_copy(rel: str) -> Path:
            """A private copy of the live file (if any) to merge into; remembers its digest."""
            target = out / rel
            if rel not in bases:
                ensure_private_dir(target.parent)
                bases[rel] = digest_file(root / rel)
                if bases[rel] is not None:
                    shutil.copyfile(root / rel, target, follow_symlinks=False)
                    os.chmod(target, 0o600)
            return target

        added = skipped = 0
        for folder in ("daily", "audit"):
            known = {b.id for rel in list_canonical(root) if rel.startswith(f"{folder}/")
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
        if replay_sidecar.SIDECAR_NAME in verified.canonical:
            delta = replay_sidecar.load(incoming).entries
            stage_copy(replay_sidecar.SIDECAR_NAME)
            try:
                sidecar_added = replay_sidecar.apply_delta(out, delta)
            except replay_sidecar.SidecarError as exc:
                raise ImportConflictError(f"replay sidecar entries conflict: {exc}") from None
        turns_added = 0
        for rel in sorted(r for r in verified.canonical if is_archived_turn(r)):
            # An archived turn is immutable: add it when missing, keep it when equal, refuse when it
            # differs (the same run id admitted with other bytes is another store's history).
            live = digest_file(root / rel)
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
            new_digest = digest_file(out / rel)
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
