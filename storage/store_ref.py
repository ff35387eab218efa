"""Stable, content-free names of a memory root: its store id and its Temporal task queue.

The store id is written into the store at creation (``<root>/.store-id``, 16 lowercase hex), so it
survives a move or a restore: workflow ids (``capture-<store id>-<intake id>``), the task queue and the
search attributes keep naming the same store. A store created before ids were written keeps the name it
had, the hash of its path, so its open workflows and task queue stay valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from pathlib import Path

from tempomem.storage.fsio import (
    UnsafePathError,
    ensure_private_dir,
    fsync_dir,
    one_writer,
    read_private_file,
)
from tempomem.storage.limits import FILE_MODE

STORE_LOCK = ".store.lock"
STORE_ID_FILE = ".store-id"
_STORE_ID = re.compile(r"[0-9a-f]{16}")
# What a store created before ids were written already holds.
_STORE_CONTENT = (".capture-intake", "daily", "audit", "index", ".capture-intake-schema")


class StoreIdError(Exception):
    """``.store-id`` exists but does not hold a store id (named, never echoed)."""


def path_store_id(root: Path) -> str:
    """The name a store had before ids were written: 16 hex of sha256(realpath(root))."""
    return hashlib.sha256(os.path.realpath(root).encode("utf-8")).hexdigest()[:16]


def read_store_id(root: Path) -> str | None:
    """The id written in the store, or None when it has none yet."""
    path = Path(root) / STORE_ID_FILE
    try:
        data = read_private_file(path, max_bytes=64)
    except FileNotFoundError:
        return None
    except UnsafePathError as exc:
        raise StoreIdError(f"{path} is not a private regular file ({exc})") from None
    text = data.decode("ascii", "replace").strip()
    if not _STORE_ID.fullmatch(text):
        raise StoreIdError(f"{path} does not hold a 16-hex store id")
    return text


def store_id(root: Path) -> str:
    """The store's stable id, written on first use (creating the root, owner-only, if needed)."""
    root = Path(root)
    existing = read_store_id(root)
    if existing is not None:
        return existing
    ensure_private_dir(root)
    legacy = any(os.path.lexists(root / name) for name in _STORE_CONTENT)
    new = path_store_id(root) if legacy else secrets.token_hex(8)
    tmp = root / f"{STORE_ID_FILE}.tmp-{os.getpid()}"  # the atomic_write temp form: tidy removes a leftover
    with one_writer(tmp):  # another thread of this process would truncate and unlink the same temp name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.write(fd, f"{new}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, root / STORE_ID_FILE)  # never replaces: two first users agree on the first id
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    fsync_dir(root)
    found = read_store_id(root)
    assert found is not None
    return found


def looks_like_store(root: Path) -> bool:
    """Whether ``root`` is a memory store: it holds a store id, or what a store made before ids held.

    Never writes; a ``.store-id`` that does not hold an id raises ``StoreIdError``.
    """
    if read_store_id(root) is not None:
        return True
    return any(os.path.lexists(Path(root) / name) for name in _STORE_CONTENT)


def is_path_named(root: Path, sid: str) -> bool:
    """Whether ``sid`` is a store's pre-id name (its capture workflows may still use the old id form)."""
    return sid == path_store_id(root)


def task_queue_name(sid: str) -> str:
    """One task queue per store, so one worker host owns each store (ARCHITECTURE.md §5)."""
    return f"tempomem-{sid}"
