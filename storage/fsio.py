"""Atomic, owner-only filesystem writes: temp → fsync → rename → fsync dir (STYLE, INTAKE-10)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from tempomem.storage.limits import DIR_MODE, FILE_MODE


class UnsafePathError(Exception):
    """A path that must be a private directory or regular file is something else (symlink, foreign, …)."""


# Threads of one process share the pid in a temp name (``.name.tmp-<pid>``), so two writers of one path
# would truncate and rename each other's temp file: two snapshot publishers of one intake left a torn
# snapshot.json. Writers of the same path take turns; writers of different paths never wait.
_WRITERS_GUARD = threading.Lock()
_WRITERS: dict[str, tuple[threading.Lock, int]] = {}


@contextlib.contextmanager
def one_writer(path: Path) -> Iterator[None]:
    """Hold while using ``path``'s temp name: one thread of this process at a time per path."""
    key = os.fspath(path)
    with _WRITERS_GUARD:
        lock, users = _WRITERS.get(key) or (threading.Lock(), 0)
        _WRITERS[key] = (lock, users + 1)
    try:
        with lock:
            yield
    finally:
        with _WRITERS_GUARD:
            users = _WRITERS[key][1] - 1
            if users:
                _WRITERS[key] = (lock, users)
            else:
                del _WRITERS[key]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def foreign_owner(st: os.stat_result) -> str | None:
    """``owned by uid N, not M`` when this process's user does not own the file; else None. Inspects
    only, so a scan that must never write (``fleet``) and the checks before a write share it."""
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    return None


def wrong_mode(st: os.stat_result, expected: int) -> str | None:
    """``mode 755, expected 700`` when the permission bits are not ``expected``; else None."""
    if stat.S_IMODE(st.st_mode) != expected:
        return f"mode {stat.S_IMODE(st.st_mode):o}, expected {expected:o}"
    return None


def ensure_private_dir(path: Path, *, strict: bool = False) -> Path:
    """Create ``path`` (and parents) as 0700 dirs; refuse symlinks and foreign owners.

    ``strict`` refuses an existing directory with another mode instead of tightening it: the intake
    fails closed on state it did not write itself.
    """
    path = Path(path)
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symlink")
    if not path.exists():
        parent = path.parent
        if parent != path and not parent.exists():
            ensure_private_dir(parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, DIR_MODE)
            os.chmod(path, DIR_MODE)  # made here: owner-only whatever the umask, so strict never refuses it
            fsync_dir(path.parent)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory")
    if owner := foreign_owner(st):
        raise UnsafePathError(f"{path} is {owner}")
    if mode := wrong_mode(st, DIR_MODE):
        if strict:
            raise UnsafePathError(f"{path} has {mode}")
        os.chmod(path, DIR_MODE)
    return path


def atomic_write(path: Path, data: bytes, *, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new bytes, never a mix."""
    path = Path(path)
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symlink")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with one_writer(tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.rename(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    fsync_dir(path.parent)


def read_private_file(path: Path, *, max_bytes: int | None = None, strict: bool = False) -> bytes:
    """Read a regular, owner-owned file without following symlinks.

    ``strict`` also requires a single link and mode 0600 (intake records, INTAKE-09/10).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise UnsafePathError(f"{path} is a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path} is not a regular file")
        if owner := foreign_owner(st):
            raise UnsafePathError(f"{path} is {owner}")
        if strict and st.st_nlink != 1:
            raise UnsafePathError(f"{path} has {st.st_nlink} links")
        if strict and (mode := wrong_mode(st, FILE_MODE)):
            raise UnsafePathError(f"{path} has {mode}")
        if max_bytes is not None and st.st_size > max_bytes:
            raise UnsafePathError(f"{path} is {st.st_size} bytes, more than {max_bytes}")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, blocking: bool = True) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created 0600) for the block.

    Raises ``BlockingIOError`` when ``blocking`` is false and another process holds it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
