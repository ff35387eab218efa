"""The atomic, owner-only write primitives every durable file goes through (STYLE, INTAKE-10, issue #13).

The durable order is observed, not assumed: the real ``os`` calls are wrapped to record what they did
(each still runs), so a missing directory fsync or a rename before the data fsync fails a test even
though the bytes on disk look the same after a clean run.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tempomem.storage.fsio import (
    UnsafePathError,
    atomic_write,
    ensure_private_dir,
    exclusive_lock,
    fsync_dir,
    read_private_file,
)


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Durable calls as ``(call, what)``: fsync names the file or ``dir:<path>`` it synced. Only this
    thread's calls count (a background thread of another test's object must not add to the trace)."""
    calls: list[tuple[str, str]] = []
    me = threading.get_ident()
    real_open, real_fsync, real_rename, real_mkdir = os.open, os.fsync, os.rename, os.mkdir
    names: dict[int, str] = {}

    def open_(path, flags, *args, **kw):
        fd = real_open(path, flags, *args, **kw)
        names[fd] = str(path)
        if flags & os.O_CREAT and threading.get_ident() == me:
            calls.append(("create", Path(path).name))
        return fd

    def fsync(fd: int) -> None:
        kind = "dir:" if stat.S_ISDIR(os.fstat(fd).st_mode) else ""
        if threading.get_ident() == me:
            calls.append(("fsync", kind + (names.get(fd, "?") if kind else Path(names.get(fd, "?")).name)))
        real_fsync(fd)

    def rename(src, dst) -> None:
        if threading.get_ident() == me:
            calls.append(("rename", f"{Path(src).name}->{Path(dst).name}"))
        real_rename(src, dst)

    def mkdir(path, mode=0o777) -> None:
        if threading.get_ident() == me:
            calls.append(("mkdir", str(path)))
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "mkdir", mkdir)
    return calls


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_atomic_write_syncs_data_then_renames_then_syncs_the_directory(tmp_path: Path, trace) -> None:
    target = tmp_path / "note.md"
    target.write_bytes(b"old")
    atomic_write(target, b"new bytes")
    tmp = f".note.md.tmp-{os.getpid()}"
    assert trace == [
        ("create", tmp),
        ("fsync", tmp),
        ("rename", f"{tmp}->note.md"),
        ("fsync", f"dir:{tmp_path}"),
    ]
    assert target.read_bytes() == b"new bytes"
    assert mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.md"]


def test_atomic_write_writes_everything_and_applies_the_mode(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40_000  # ~10 MB: more than one write call may take
    atomic_write(tmp_path / "big", data)
    assert (tmp_path / "big").read_bytes() == data
    old = os.umask(0o077)  # the mode is set on the file itself, whatever the umask would allow
    try:
        atomic_write(tmp_path / "shared", b"x", mode=0o640)
    finally:
        os.umask(old)
    assert mode(tmp_path / "shared") == 0o640
    atomic_write(tmp_path / "empty", b"")
    assert (tmp_path / "empty").read_bytes() == b""


def test_atomic_write_refuses_a_symlink_and_cleans_up_a_failed_rename(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePathError, match="symlink"):
        atomic_write(tmp_path / "link", b"x")
    assert (tmp_path / "real").read_bytes() == b"keep"
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir" / "child").write_bytes(b"")
    with pytest.raises(OSError):
        atomic_write(tmp_path / "adir", b"x")  # rename onto a non-empty directory fails
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "link", "real"]  # no temp file left


def test_ensure_private_dir_creates_parents_owner_only_and_syncs_each_parent(tmp_path: Path, trace) -> None:
    deep = tmp_path / "a" / "b"
    assert ensure_private_dir(deep) == deep
    assert trace == [
        ("mkdir", str(tmp_path / "a")),
        ("fsync", f"dir:{tmp_path}"),
        ("mkdir", str(deep)),
        ("fsync", f"dir:{tmp_path / 'a'}"),
    ]
    assert mode(tmp_path / "a") == 0o700 and mode(deep) == 0o700
    trace.clear()
    ensure_private_dir(deep)  # already there: nothing to create or sync
    assert trace == []


def test_ensure_private_dir_tightens_an_existing_open_directory_unless_strict(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    with pytest.raises(UnsafePathError, match="mode 755, expected 700"):
        ensure_private_dir(loose, strict=True)
    assert mode(loose) == 0o755  # strict changes nothing
    ensure_private_dir(loose)
    assert mode(loose) == 0o700


def test_ensure_private_dir_refuses_symlinks_and_files(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    (tmp_path / "ln").symlink_to(tmp_path / "d")
    with pytest.raises(UnsafePathError, match="is a symlink"):
        ensure_private_dir(tmp_path / "ln")
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(UnsafePathError, match="is not a directory"):
        ensure_private_dir(tmp_path / "f")


def test_fsync_dir_syncs_the_directory_itself(tmp_path: Path, trace) -> None:
    fsync_dir(tmp_path)
    assert trace == [("fsync", f"dir:{tmp_path}")]


def private(path: Path, data: bytes, file_mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(file_mode)
    return path


def test_read_private_file_reads_all_and_checks_what_it_reads(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)  # three read chunks
    assert read_private_file(private(tmp_path / "r", data)) == data
    assert read_private_file(private(tmp_path / "e", b"")) == b""

    (tmp_path / "ln").symlink_to(tmp_path / "r")
    with pytest.raises(UnsafePathError, match="is a symlink"):
        read_private_file(tmp_path / "ln")
    os.mkfifo(tmp_path / "fifo", 0o600)
    fd = os.open(tmp_path / "fifo", os.O_RDWR | os.O_NONBLOCK)  # a writer, so opening for read returns
    try:
        with pytest.raises(UnsafePathError, match="is not a regular file"):
            read_private_file(tmp_path / "fifo")
    finally:
        os.close(fd)
    with pytest.raises(FileNotFoundError):
        read_private_file(tmp_path / "missing")

    small = private(tmp_path / "s", b"12345")
    assert read_private_file(small, max_bytes=5) == b"12345"
    with pytest.raises(UnsafePathError, match="6 bytes, more than 5"):
        read_private_file(private(tmp_path / "six", b"123456"), max_bytes=5)


def test_read_private_file_strict_wants_one_link_and_mode_0600(tmp_path: Path) -> None:
    record = private(tmp_path / "rec", b"x")
    assert read_private_file(record, strict=True) == b"x"
    assert read_private_file(private(tmp_path / "open", b"x", 0o644)) == b"x"  # not strict: any mode
    with pytest.raises(UnsafePathError, match="mode 644, expected 600"):
        read_private_file(tmp_path / "open", strict=True)
    os.link(record, tmp_path / "hard")
    assert read_private_file(record) == b"x"
    with pytest.raises(UnsafePathError, match="has 2 links"):
        read_private_file(record, strict=True)


def test_exclusive_lock_excludes_another_holder_and_releases(tmp_path: Path) -> None:
    lock = tmp_path / "store.lock"
    with exclusive_lock(lock):
        assert mode(lock) == 0o600
        # flock is per open file description: a second open of the same file is another holder.
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        with pytest.raises(BlockingIOError), exclusive_lock(lock, blocking=False):
            pass
    with exclusive_lock(lock, blocking=False):  # released: free again
        pass
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it after the block
    finally:
        os.close(fd)


def test_the_liveness_fence_excludes_a_second_holder_and_names_what_waits(tmp_path: Path) -> None:
    """AMB-02: the worker holds the fence; an operator command probing it is refused, by name."""
    from tempomem.storage.fence import FENCE_FILE, AgentRunningError, fence_is_held, hold_fence

    root = tmp_path / "mem"
    assert fence_is_held(root) is False  # nobody holds it (and probing creates the store folder 0700)
    assert mode(root) == 0o700
    with hold_fence(root, what="worker"):
        assert mode(root / FENCE_FILE) == 0o600
        assert fence_is_held(root) is True
        with (
            pytest.raises(
                AgentRunningError,
                match=f"the agent or worker of {root} is running; stop it before this rebuild",
            ),
            hold_fence(root, what="rebuild"),
        ):
            pass
    assert fence_is_held(root) is False
    # Only a held fence is AgentRunningError: the same error raised by the work under it stays itself.
    with pytest.raises(BlockingIOError), hold_fence(root):
        raise BlockingIOError("from the work")
    assert fence_is_held(root) is False


def test_a_store_is_path_named_only_while_its_id_is_its_path_hash(tmp_path: Path) -> None:
    from tempomem.storage.store_ref import is_path_named, path_store_id, store_id

    root = tmp_path / "mem"
    root.mkdir(mode=0o700)
    assert is_path_named(root, path_store_id(root)) is True
    assert is_path_named(root, store_id(root)) is (store_id(root) == path_store_id(root))
    assert is_path_named(root, "0" * 16) is False


def test_the_owner_and_mode_checks_only_inspect(tmp_path: Path) -> None:
    """fsio.foreign_owner and fsio.wrong_mode: the checks ensure_private_dir, read_private_file, the ledger
    and the fleet's scan share; they name what is wrong and change nothing."""
    from tempomem.storage.fsio import foreign_owner, wrong_mode

    d = tmp_path / "d"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    st = os.lstat(d)
    assert foreign_owner(st) is None
    assert wrong_mode(st, 0o700) == "mode 755, expected 700"
    assert wrong_mode(st, 0o755) is None
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o755  # nothing tightened
    with pytest.raises(UnsafePathError, match=r"has mode 755, expected 700$"):
        ensure_private_dir(d, strict=True)


def test_a_private_dir_made_under_a_restrictive_umask_is_owner_only_and_accepted_strictly(
    tmp_path: Path,
) -> None:
    old = os.umask(0o177)  # mkdir alone would give 0600: not even listable by its owner
    try:
        made = ensure_private_dir(tmp_path / "a" / "b", strict=True)
    finally:
        os.umask(old)
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (made, made.parent)} == {0o700}


def test_making_a_private_dir_never_touches_a_parent_that_exists(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)  # a user's folder: the store lives inside it, but it is not ours to tighten
    ensure_private_dir(shared / "mem" / "daily")
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(shared / "mem").st_mode) == 0o700


def test_a_folder_another_process_creates_first_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first users of a store race between the existence check and mkdir: the loser goes on."""
    from tempomem.storage import fsio

    real_mkdir = os.mkdir

    def raced(path: Path, mode: int = 0o777) -> None:  # os.mkdir's shape
        real_mkdir(path, 0o700)  # the other process wins the race
        return real_mkdir(path, mode)

    monkeypatch.setattr(fsio.os, "mkdir", raced)
    made = fsio.ensure_private_dir(tmp_path / "mem")
    assert made.is_dir() and stat.S_IMODE(os.stat(made).st_mode) == 0o700


def test_a_folder_owned_by_someone_else_is_refused_by_name(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 12345, 12345)
    with pytest.raises(UnsafePathError) as err:
        ensure_private_dir(theirs)
    assert str(err.value) == f"{theirs} is owned by uid 12345, not {os.geteuid()}"


def test_an_atomic_write_truncates_a_temp_file_a_killed_writer_left(tmp_path: Path) -> None:
    path = tmp_path / "f"
    stale = tmp_path / f".f.tmp-{os.getpid()}"
    stale.write_bytes(b"x" * 100)  # a killed writer of this pid's name, longer than the new bytes
    atomic_write(path, b"short")
    assert path.read_bytes() == b"short" and not stale.exists()


def test_an_atomic_write_never_follows_a_symlink_at_its_temp_name(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    (tmp_path / f".f.tmp-{os.getpid()}").symlink_to(outside)
    with pytest.raises(OSError):
        atomic_write(tmp_path / "f", b"data")
    assert outside.read_bytes() == b"keep" and not (tmp_path / "f").exists()


def test_a_file_owned_by_someone_else_is_refused_by_name(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"x")
    os.chown(theirs, 12345, 12345)
    with pytest.raises(UnsafePathError) as err:
        read_private_file(theirs)
    assert str(err.value) == f"{theirs} is owned by uid 12345, not {os.geteuid()}"


def test_threads_writing_one_path_never_tear_it(tmp_path: Path) -> None:
    """Threads of one process share the pid in the temp name. Two snapshot publishers of one intake (the
    host's Store and its worker) truncated and renamed each other's temp file: snapshot.json came out
    as one body's bytes over the other's, or the later rename failed with FileNotFoundError."""
    path = tmp_path / "snapshot.json"
    bodies = [b'{"pending": "' + b"a" * 40 + b'"}', b'{"pending": 7}']

    def write(start: threading.Barrier, body: bytes) -> None:
        start.wait()
        atomic_write(path, body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        for _ in range(40):
            start = threading.Barrier(len(bodies))
            for future in [pool.submit(write, start, body) for body in bodies]:
                future.result()  # re-raises a thread's error
            assert path.read_bytes() in bodies
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]
