"""The store id written at creation (#13 store identity): Temporal-free, real files under tmp_path."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tempomem.storage.store_ref import (
    STORE_ID_FILE,
    StoreIdError,
    path_store_id,
    read_store_id,
    store_id,
)


def test_a_new_store_gets_a_random_id_that_survives_a_move(tmp_path: Path) -> None:
    first = store_id(tmp_path / "a")
    other = store_id(tmp_path / "b")
    assert first != other
    assert first != path_store_id(tmp_path / "a")  # not derived from where it was created
    (tmp_path / "a").rename(tmp_path / "moved")
    assert store_id(tmp_path / "moved") == first
    assert read_store_id(tmp_path / "moved") == first


def test_a_store_from_before_ids_keeps_its_path_name(tmp_path: Path) -> None:
    root = tmp_path / "old"
    (root / "daily").mkdir(parents=True)
    assert read_store_id(root) is None
    assert store_id(root) == path_store_id(root)
    assert read_store_id(root) == path_store_id(root)


def test_the_id_file_is_owner_only_and_no_temp_is_left(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    old = os.umask(0o022)  # a permissive umask must not loosen the file
    try:
        store_id(root)
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / STORE_ID_FILE).stat().st_mode) == 0o600
    assert sorted(p.name for p in root.iterdir()) == [STORE_ID_FILE]


def test_a_symlink_at_the_temp_name_is_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    root.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"untouched")
    (root / f"{STORE_ID_FILE}.tmp-{os.getpid()}").symlink_to(target)
    with pytest.raises(OSError):
        store_id(root)
    assert target.read_bytes() == b"untouched"
    assert not (root / STORE_ID_FILE).exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"0123456789abcdef" + b" " * 48 + b"\n",
            "is not a private regular file",
        ),  # 65 bytes: over the bound
        (b"\xff" * 16 + b"\n", "does not hold a 16-hex store id"),
        (b"0123456789ABCDEF\n", "does not hold a 16-hex store id"),
    ],
)
def test_a_bad_id_file_is_refused_by_name(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / STORE_ID_FILE
    path.write_bytes(data)
    path.chmod(0o600)
    with pytest.raises(StoreIdError) as err:
        read_store_id(tmp_path)
    assert str(err.value).startswith(f"{path} {message}")
    with pytest.raises(StoreIdError):
        store_id(tmp_path)  # never replaced by a fresh id
    assert path.read_bytes() == data


def test_an_id_with_surrounding_whitespace_within_the_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / STORE_ID_FILE
    path.write_bytes(b"0123456789abcdef" + b" " * 47 + b"\n")  # exactly 64 bytes
    path.chmod(0o600)
    assert read_store_id(tmp_path) == "0123456789abcdef"


def test_a_folder_is_a_store_when_it_holds_an_id_or_what_an_older_store_held(tmp_path: Path) -> None:
    from tempomem.storage.store_ref import looks_like_store

    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    assert not looks_like_store(tmp_path / "empty") and not looks_like_store(tmp_path / "other")
    store_id(tmp_path / "new")
    assert looks_like_store(tmp_path / "new")
    for name in ("daily", "audit", "index", ".capture-intake", ".capture-intake-schema"):
        (tmp_path / f"old{name}").mkdir()
        (tmp_path / f"old{name}" / name).mkdir()  # any one of them, without an id file
        assert looks_like_store(tmp_path / f"old{name}"), name
        assert read_store_id(tmp_path / f"old{name}") is None  # and looking never writes one


def test_reading_an_existing_id_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    first = store_id(root)
    os.chmod(root, 0o500)  # a store mounted read-only, say: its id is still known
    try:
        before = os.stat(root)
        assert store_id(root) == first
        after = os.stat(root)
    finally:
        os.chmod(root, 0o700)
    assert (after.st_mtime_ns, stat.S_IMODE(after.st_mode)) == (before.st_mtime_ns, 0o500)


def test_threads_creating_one_store_agree_on_its_id(tmp_path: Path) -> None:
    """The id's temp name carries the pid, which threads share: one thread's unlink made another's link
    fail with FileNotFoundError before the writers of one temp name took turns."""
    with ThreadPoolExecutor(4) as pool:
        for i in range(30):
            root, start = tmp_path / f"s{i}", threading.Barrier(4)
            futures = [pool.submit(_together, start, store_id, root) for _ in range(4)]
            ids = {f.result() for f in futures}  # .result() re-raises a thread's error
            assert ids == {read_store_id(root)}


def _together(start: threading.Barrier, fn: Callable[[Path], str], root: Path) -> str:
    start.wait()
    return fn(root)
