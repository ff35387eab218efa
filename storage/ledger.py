"""The permanent ledger and its integrity catalog (INTAKE-22..INTAKE-28, AMB-09).

One content-free commitment per distinct run id, forever: 64 hex of the intake id, 64 hex of the payload
hash and a newline — 129 bytes — appended to ``ledger/shard-XX`` (XX = first two hex of the id; 256
shards, created lazily). The sibling ``catalog`` commits each shard's byte high-water mark and the
SHA-256 of the shard up to it, written only after the shard append is fsynced. The schema marker at the
memory root proves a catalog has existed, so deleting ledger and catalog together fails closed.

Every check fails closed with a typed error naming the problem; nothing is overwritten to "repair" a
shard whose contents the catalog does not vouch for.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

from tempomem.storage.fsio import (
    atomic_write,
    ensure_private_dir,
    foreign_owner,
    fsync_dir,
    read_private_file,
    wrong_mode,
)
from tempomem.storage.limits import CATALOG_SLOTS, DIR_MODE, FILE_MODE, LEDGER_ENTRY_BYTES, LEDGER_SHARDS

SCHEMA_MARKER = ".capture-intake-schema"
SCHEMA_VERSION = b"tempomem-intake-v1\n"
CATALOG_MAGIC = b"TMEMCAT\x00"
CATALOG_VERSION = 1
CATALOG_HEADER = struct.Struct(">8sII")  # magic, version, slot count → 16 bytes
CATALOG_SLOT = struct.Struct(">Q32s")  # high-water mark, sha256 of the shard prefix → 40 bytes
CATALOG_BYTES = CATALOG_HEADER.size + CATALOG_SLOTS * CATALOG_SLOT.size
EMPTY_DIGEST = hashlib.sha256(b"").digest()


class LedgerIntegrityError(Exception):
    """The ledger, catalog or schema marker is not what the catalog and marker vouch for."""


def entry_bytes(record_id: str, payload_sha256: str) -> bytes:
    data = f"{record_id}{payload_sha256}\n".encode("ascii")
    if len(data) != LEDGER_ENTRY_BYTES:
        raise ValueError("ledger entries are exactly 129 bytes")
    return data


def shard_index(record_id: str) -> int:
    return int(record_id[:2], 16)


class Ledger:
    """The ledger of one intake folder. Callers hold the intake lock around every method."""

    def __init__(self, root: Path, intake_dir: Path) -> None:
        self.marker = Path(root) / SCHEMA_MARKER
        self.dir = intake_dir / "ledger"
        self.catalog_path = intake_dir / "catalog"

    # -- reading ------------------------------------------------------------------------------------
    def exists(self) -> bool:
        """Fail closed on any partial combination of marker, catalog and ledger folder."""
        parts = {
            "schema marker": _present(self.marker),
            "catalog": _present(self.catalog_path),
        }
        if all(parts.values()):
            return True
        if parts["catalog"] and self._interrupted_creation():
            # A kill between the empty catalog and the marker (``_ensure_created``): nothing was ever
            # committed, so finishing the creation loses nothing and vouches for nothing new.
            atomic_write(self.marker, SCHEMA_VERSION)
            return True
        folder = _present(self.dir)
        if folder:  # a file or symlink in its place is named, never a raw OSError
            _check_dir(os.lstat(self.dir), "ledger folder")
        if not any(parts.values()):
            if folder and any(os.scandir(self.dir)):
                raise LedgerIntegrityError("ledger shards exist without a catalog or schema marker")
            return False
        missing = [name for name, present in parts.items() if not present]
        raise LedgerIntegrityError(
            f"{' and '.join(missing)} missing while the other exists: refusing to continue"
        )

    def _interrupted_creation(self) -> bool:
        """Catalog present, marker absent, every slot empty and no shard bytes: a first creation that
        was killed before its marker. A catalog that commits anything never qualifies (fail closed)."""
        try:
            slots = self._read_catalog()
        except LedgerIntegrityError:
            return False
        if any(slot != (0, EMPTY_DIGEST) for slot in slots):
            return False
        if _present(self.dir):
            return all(entry.is_file() and entry.stat().st_size == 0 for entry in os.scandir(self.dir))
        return True

    def _read_catalog(self) -> list[tuple[int, bytes]]:
        data = self._read_strict(self.catalog_path, "catalog")
        if len(data) != CATALOG_BYTES:
            raise LedgerIntegrityError(f"catalog is {len(data)} bytes, expected {CATALOG_BYTES}")
        magic, version, slots = CATALOG_HEADER.unpack_from(data, 0)
        if magic != CATALOG_MAGIC or version != CATALOG_VERSION or slots != CATALOG_SLOTS:
            raise LedgerIntegrityError("catalog header is not a tempomem v1 catalog")
        return [
            CATALOG_SLOT.unpack_from(data, CATALOG_HEADER.size + i * CATALOG_SLOT.size)
            for i in range(CATALOG_SLOTS)
        ]

    def _read_strict(self, path: Path, what: str) -> bytes:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise LedgerIntegrityError(f"{what} is missing") from None
        _check_file(st, what)
        data = read_private_file(path)
        return data

    def _shard_path(self, index: int) -> Path:
        return self.dir / f"shard-{index:02x}"

    def _verified_shard(
        self, index: int, slot: tuple[int, bytes], has_receipt: Callable[[str, str], bool]
    ) -> tuple[bytes, bool]:
        """Shard bytes the catalog vouches for, and whether the catalog must advance over a suffix.

        INTAKE-25: a missing, truncated or replaced shard fails closed. INTAKE-26: bytes beyond the
        high-water mark are accepted only when every whole suffix entry has an exact intake receipt.
        """
        mark, digest = slot
        path = self._shard_path(index)
        if not _present(path):
            if mark:
                raise LedgerIntegrityError(
                    f"ledger shard {index:02x} is missing (catalog records {mark} bytes)"
                )
            if digest != EMPTY_DIGEST:  # an unused slot must be exactly empty: anything else is tampering
                raise LedgerIntegrityError(f"catalog slot {index:02x} is unused but not empty")
            return b"", False
        data = self._read_strict(path, f"ledger shard {index:02x}")
        if len(data) < mark:
            raise LedgerIntegrityError(f"ledger shard {index:02x} is truncated ({len(data)} < {mark} bytes)")
        if hashlib.sha256(data[:mark]).digest() != digest:
            raise LedgerIntegrityError(f"ledger shard {index:02x} does not match its catalog digest")
        suffix = data[mark:]
        if not suffix:
            return data, False
        if len(suffix) % LEDGER_ENTRY_BYTES:
            raise LedgerIntegrityError(f"ledger shard {index:02x} ends in a partial entry")
        for offset in range(0, len(suffix), LEDGER_ENTRY_BYTES):
            entry = suffix[offset : offset + LEDGER_ENTRY_BYTES].decode("ascii", "replace")
            record_id, payload_hash = entry[:64], entry[64:128]
            if entry[128] != "\n" or entry[:2] != f"{index:02x}" or not has_receipt(record_id, payload_hash):
                raise LedgerIntegrityError(
                    f"ledger shard {index:02x} has an uncatalogued entry without an exact intake receipt"
                )
        return data, True

    def lookup(self, record_id: str, has_receipt: Callable[[str, str], bool]) -> str | None:
        """The payload hash committed for ``record_id``, or None. Verifies that shard first."""
        if not self.exists():
            return None
        index = shard_index(record_id)
        slots = self._read_catalog()
        data, advance = self._verified_shard(index, slots[index], has_receipt)
        if advance:
            self._fsync_shard(index)  # INTAKE-26: the exact inode again, before the catalog moves
            slots[index] = (len(data), hashlib.sha256(data).digest())
            self._write_catalog(slots)
        prefix = record_id.encode("ascii")
        for offset in range(0, len(data), LEDGER_ENTRY_BYTES):
            if data[offset : offset + 64] == prefix:
                return data[offset + 64 : offset + 128].decode("ascii")
        return None

    def entries(self, has_receipt: Callable[[str, str], bool]) -> list[tuple[str, str]]:
        """Every commitment (intake id, payload hash), each shard verified against the catalog first.
        Content-free: what an export carries so a restored store keeps its duplicate protection."""
        if not self.exists():
            return []
        slots = self._read_catalog()
        out = []
        for index in range(CATALOG_SLOTS):
            data, _ = self._verified_shard(index, slots[index], has_receipt)
            for offset in range(0, len(data), LEDGER_ENTRY_BYTES):
                out.append(
                    (
                        data[offset : offset + 64].decode("ascii"),
                        data[offset + 64 : offset + 128].decode("ascii"),
                    )
                )
        return out

    def verify_all(self, has_receipt: Callable[[str, str], bool]) -> int:
        """Check every shard against the catalog (health). Returns the number of entries."""
        if not self.exists():
            return 0
        slots = self._read_catalog()
        total = 0
        for index in range(LEDGER_SHARDS):
            data, _ = self._verified_shard(index, slots[index], has_receipt)
            total += len(data) // LEDGER_ENTRY_BYTES
        return total

    # -- writing ------------------------------------------------------------------------------------
    def append(
        self,
        record_id: str,
        payload_sha256: str,
        has_receipt: Callable[[str, str], bool],
        *,
        looked_up: bool = False,
    ) -> bool:
        """Commit ``record_id`` once. False when it was already there with that hash.

        ``looked_up``: the caller's ``lookup`` found no commitment for ``record_id`` under the same
        intake lock (admission), so its shard was verified then and is not read and hashed again."""
        existing = None if looked_up else self.lookup(record_id, has_receipt)
        if existing == payload_sha256:
            return False
        if existing is not None:
            raise LedgerIntegrityError("ledger already commits this run id with another payload hash")
        created = self._ensure_created()
        index = shard_index(record_id)
        slots = [(0, EMPTY_DIGEST)] * CATALOG_SLOTS if created else self._read_catalog()
        path = self._shard_path(index)
        new_shard = not _present(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            if new_shard:
                os.fchmod(fd, FILE_MODE)  # whatever the umask (an existing shard was checked by lookup)
            _check_file(os.fstat(fd), f"ledger shard {index:02x}")
            os.write(fd, entry_bytes(record_id, payload_sha256))
            os.fsync(fd)
        finally:
            os.close(fd)
        if new_shard:
            fsync_dir(self.dir)
        self.before_catalog_commit()
        data = read_private_file(path)
        slots[index] = (len(data), hashlib.sha256(data).digest())
        self._write_catalog(slots)
        return True

    def before_catalog_commit(self) -> None:
        """Seam for crash tests: a SIGKILL here leaves a fsynced append with an uncommitted catalog."""

    def _ensure_created(self) -> bool:
        """Create marker, ledger folder and an empty catalog on first use. True when created now."""
        if self.exists():
            return False
        ensure_private_dir(self.dir)  # 0700 whatever the umask; one already there was checked by exists()
        self._write_catalog([(0, EMPTY_DIGEST)] * CATALOG_SLOTS)
        atomic_write(self.marker, SCHEMA_VERSION)
        return True

    def _write_catalog(self, slots: list[tuple[int, bytes]]) -> None:
        body = b"".join(CATALOG_SLOT.pack(mark, digest) for mark, digest in slots)
        atomic_write(
            self.catalog_path, CATALOG_HEADER.pack(CATALOG_MAGIC, CATALOG_VERSION, CATALOG_SLOTS) + body
        )

    def _fsync_shard(self, index: int) -> None:
        fd = os.open(self._shard_path(index), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _present(path: Path) -> bool:
    return os.path.lexists(path)


def _check_file(st: os.stat_result, what: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise LedgerIntegrityError(f"{what} is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise LedgerIntegrityError(f"{what} is not a regular file")
    if owner := foreign_owner(st):
        raise LedgerIntegrityError(f"{what} is {owner}")
    if st.st_nlink != 1:
        raise LedgerIntegrityError(f"{what} has {st.st_nlink} links")
    if mode := wrong_mode(st, FILE_MODE):
        raise LedgerIntegrityError(f"{what} has {mode}")


def _check_dir(st: os.stat_result, what: str) -> None:
    if not stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
        raise LedgerIntegrityError(f"{what} is not a directory")
    if owner := foreign_owner(st):
        raise LedgerIntegrityError(f"{what} is {owner}")
    if mode := wrong_mode(st, DIR_MODE):
        raise LedgerIntegrityError(f"{what} has {mode}")
