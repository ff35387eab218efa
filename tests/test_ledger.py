"""The permanent ledger, catalog and schema marker: every fail-closed case, and crash recovery with
SIGKILLed admissions (INTAKE-09, INTAKE-22..INTAKE-28, AMB-09)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tempomem.storage import intake as intake_module
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import (
    IntakeConflictError,
    IntakeCorruptError,
    IntakeIntegrityError,
    build_payload,
    intake_id,
)
from tempomem.storage.ledger import CATALOG_BYTES, SCHEMA_MARKER
from tempomem.storage.limits import LEDGER_ENTRY_BYTES
from tests.helpers.crash_admit import crash_turn

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 3, 13, 0, tzinfo=UTC)


def run_in_shard(prefix: str, start: int = 0) -> str:
    """A run id whose intake id lands in ledger shard ``prefix``."""
    i = start
    while not intake_id(f"run-{i}").startswith(prefix):
        i += 1
    return f"run-{i}"


def admit(root: Path, run_id: str, answer: str | None = None) -> str:
    turn = crash_turn(run_id)
    if answer is not None:
        turn = turn.model_copy(update={"final_answer": answer})
    return Intake(root).admit(build_payload(turn, write_mode="append-host-summary", tier="lite"))


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.name == ".lock":
            continue
        st = os.lstat(p)
        out[str(p.relative_to(root))] = (
            p.read_bytes() if p.is_file() and not p.is_symlink() else None,
            st.st_mode,
        )
    return out


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str, Path]:
    """A store with two admitted runs in shard ``ab``; returns (root, a third run id for ab, shard path)."""
    root = tmp_path / "mem"
    first = run_in_shard("ab")
    second = run_in_shard("ab", int(first.split("-")[1]) + 1)
    third = run_in_shard("ab", int(second.split("-")[1]) + 1)
    admit(root, first)
    admit(root, second)
    return root, third, root / ".capture-intake" / "ledger" / "shard-ab"


def test_entries_are_129_bytes_and_catalog_is_fixed_size(store: tuple[Path, str, Path]) -> None:
    root, _, shard = store
    data = shard.read_bytes()
    assert len(data) == 2 * LEDGER_ENTRY_BYTES == 258
    assert data[128:129] == b"\n" and data[:64].decode() == intake_id(run_in_shard("ab"))
    catalog = root / ".capture-intake" / "catalog"
    assert catalog.stat().st_size == CATALOG_BYTES == 16 + 256 * 40
    assert (root / SCHEMA_MARKER).is_file()
    for path in (shard, catalog, root / SCHEMA_MARKER):
        assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in shard.parent.iterdir()) == ["shard-ab"]  # lazily created


def _tamper_cases():
    def missing(root: Path, shard: Path) -> None:
        shard.unlink()

    def truncated(root: Path, shard: Path) -> None:
        shard.write_bytes(shard.read_bytes()[:LEDGER_ENTRY_BYTES])

    def replaced(root: Path, shard: Path) -> None:
        data = bytearray(shard.read_bytes())
        data[64:128] = hashlib.sha256(b"forged").hexdigest().encode()  # valid-looking, same length
        shard.write_bytes(bytes(data))

    def ledger_and_catalog_deleted(root: Path, shard: Path) -> None:
        shard.unlink()
        shard.parent.rmdir()
        (root / ".capture-intake" / "catalog").unlink()

    def marker_deleted(root: Path, shard: Path) -> None:
        (root / SCHEMA_MARKER).unlink()

    def symlinked_shard(root: Path, shard: Path) -> None:
        copy = root.parent / "elsewhere"
        copy.write_bytes(shard.read_bytes())
        shard.unlink()
        shard.symlink_to(copy)

    def foreign_owner(root: Path, shard: Path) -> None:
        os.chown(shard, 12345, 12345)

    def wrong_mode(root: Path, shard: Path) -> None:
        shard.chmod(0o644)

    def wrong_dir_mode(root: Path, shard: Path) -> None:
        (root / ".capture-intake" / "pending").chmod(0o755)

    def catalog_wrong_size(root: Path, shard: Path) -> None:
        catalog = root / ".capture-intake" / "catalog"
        catalog.write_bytes(catalog.read_bytes()[:-40])

    def uncatalogued_entry_without_receipt(root: Path, shard: Path) -> None:
        forged = intake_id(run_in_shard("ab", 10**6)) + hashlib.sha256(b"x").hexdigest() + "\n"
        with open(shard, "ab") as f:
            f.write(forged.encode())

    def partial_entry(root: Path, shard: Path) -> None:
        with open(shard, "ab") as f:
            f.write(b"ab" * 10)

    def hard_linked_shard(root: Path, shard: Path) -> None:
        os.link(shard, root.parent / "second-link")

    return [
        missing,
        truncated,
        replaced,
        ledger_and_catalog_deleted,
        marker_deleted,
        symlinked_shard,
        foreign_owner,
        wrong_mode,
        wrong_dir_mode,
        catalog_wrong_size,
        uncatalogued_entry_without_receipt,
        partial_entry,
        hard_linked_shard,
    ]


FAIL_CLOSED_CASES = _tamper_cases()


@pytest.mark.parametrize("tamper", FAIL_CLOSED_CASES, ids=[f.__name__ for f in FAIL_CLOSED_CASES])
def test_fail_closed_and_nothing_overwritten(store: tuple[Path, str, Path], tamper) -> None:
    root, new_run, shard = store
    tamper(root, shard)
    before = snapshot(root)
    with pytest.raises(IntakeCorruptError) as err:
        admit(root, new_run)
    assert str(err.value)  # the error names the problem
    assert snapshot(root) == before


def test_integrity_errors_are_typed(store: tuple[Path, str, Path]) -> None:
    root, new_run, shard = store
    shard.unlink()
    with pytest.raises(IntakeIntegrityError, match="shard ab is missing"):
        admit(root, new_run)


def test_malformed_record_fails_closed(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    admit(root, "run-x")
    record = root / ".capture-intake" / "pending" / intake_id("run-x")
    record.write_bytes(b'{"not": "a record"}')
    with pytest.raises(IntakeCorruptError):
        Intake(root).load_payload(intake_id("run-x"))


def test_pruned_receipts_never_readmit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake_module, "MAX_RESOLVED_RECEIPTS", 3)
    root = tmp_path / "mem"
    intake = Intake(root)
    runs = [f"prune-{i}" for i in range(5)]
    for i, run in enumerate(runs):
        admit(root, run)
        os.utime(root / ".capture-intake" / "pending" / intake_id(run))
        intake.resolve(intake_id(run), outcome="success", now=NOW)
        receipt = root / ".capture-intake" / "resolved" / f"{intake_id(run)}.receipt.json"
        os.utime(receipt, ns=(i * 10**9, i * 10**9))  # strictly ordered resolution instants
    remaining = sorted(p.name.split(".")[0] for p in (root / ".capture-intake" / "resolved").iterdir())
    assert remaining == sorted(intake_id(r) for r in runs[2:])
    # INTAKE-28: the pruned runs are still known to the ledger.
    assert admit(root, runs[0]) == "duplicate"
    with pytest.raises(IntakeConflictError):
        admit(root, runs[0], answer="other bytes")
    assert not list((root / ".capture-intake" / "pending").iterdir())


def crash(root: Path, run_id: str, point: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.crash_admit", str(root), run_id, point],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
    )
    return proc.returncode


@pytest.mark.parametrize("point", ["after_record", "before_catalog"])
def test_sigkill_inside_admission_loses_nothing_and_admits_once(tmp_path: Path, point: str) -> None:
    root = tmp_path / "mem"
    assert crash(root, "warm-up", "none") == 0  # an existing catalog, so the crash is mid-life
    run = "crashing-run"
    assert crash(root, run, point) == -9
    record = root / ".capture-intake" / "pending" / intake_id(run)
    assert record.is_file()  # the turn was admitted durably before the crash
    # Restart: the host retries the same turn. It must be a duplicate, and the ledger must now commit it.
    assert admit(root, run) == "duplicate"
    intake = Intake(root)
    assert (
        intake.ledger.lookup(intake_id(run), intake.has_receipt)
        == hashlib.sha256(record.read_bytes()).hexdigest()
    )
    assert intake.ledger.verify_all(intake.has_receipt) == 2
    shard = root / ".capture-intake" / "ledger" / f"shard-{intake_id(run)[:2]}"
    entries = shard.read_bytes()
    assert entries.count(intake_id(run).encode()) == 1  # admitted exactly once
    assert admit(root, run) == "duplicate"
    with pytest.raises(IntakeConflictError):
        admit(root, run, answer="different")


def test_sigkill_before_catalog_then_other_run_in_same_shard_recovers(tmp_path: Path) -> None:
    """INTAKE-26: the catalog advances over the suffix because its entry has an exact receipt."""
    root = tmp_path / "mem"
    first = run_in_shard("cd")
    second = run_in_shard("cd", int(first.split("-")[1]) + 1)
    assert crash(root, first, "before_catalog") == -9
    assert admit(root, second) == "admitted"
    intake = Intake(root)
    assert intake.ledger.verify_all(intake.has_receipt) == 2


def empty_catalog() -> bytes:
    from tempomem.storage.ledger import (
        CATALOG_HEADER,
        CATALOG_MAGIC,
        CATALOG_SLOT,
        CATALOG_VERSION,
        EMPTY_DIGEST,
    )
    from tempomem.storage.limits import CATALOG_SLOTS

    header = CATALOG_HEADER.pack(CATALOG_MAGIC, CATALOG_VERSION, CATALOG_SLOTS)
    return header + CATALOG_SLOT.pack(0, EMPTY_DIGEST) * CATALOG_SLOTS


@pytest.mark.parametrize(
    ("shards", "repaired"),
    [
        ({}, True),  # catalog written, killed before the ledger folder and the marker
        ({"shard-00": b""}, True),  # an empty shard file: nothing was ever committed
        ({"shard-00": b"x"}, False),  # bytes no catalog vouches for
        ({"shard-00/": b""}, False),  # something that is not a shard file
    ],
)
def test_an_interrupted_first_creation_is_finished_only_when_nothing_was_committed(
    tmp_path: Path, shards: dict[str, bytes], repaired: bool
) -> None:
    """INTAKE-25 and issue #13 item 1, in-process: the exact states a kill inside the first admission
    can leave, and the ones it cannot (which stay fail-closed)."""
    from tempomem.storage.ledger import SCHEMA_MARKER, SCHEMA_VERSION, LedgerIntegrityError

    intake = Intake(tmp_path / "mem")
    intake.ensure_layout()
    catalog = intake.base / "catalog"
    catalog.write_bytes(empty_catalog())
    catalog.chmod(0o600)
    if shards:
        (intake.base / "ledger").mkdir(mode=0o700)
    for name, data in shards.items():
        path = intake.base / "ledger" / name.rstrip("/")
        if name.endswith("/"):
            path.mkdir()
        else:
            path.write_bytes(data)
            path.chmod(0o600)
    marker = intake.root / SCHEMA_MARKER
    if repaired:
        assert intake.ledger.exists() is True
        assert marker.read_bytes() == SCHEMA_VERSION
    else:
        with pytest.raises(LedgerIntegrityError, match="schema marker missing while the other exists"):
            intake.ledger.exists()
        assert not marker.exists()


@pytest.mark.parametrize("damage", ["committed_slot", "wrong_size"])
def test_a_catalog_that_commits_anything_is_never_treated_as_an_interrupted_creation(
    tmp_path: Path, damage: str
) -> None:
    from tempomem.storage.ledger import SCHEMA_MARKER, LedgerIntegrityError

    admit(tmp_path / "mem", "r1")  # a real catalog with one committed slot
    intake = Intake(tmp_path / "mem")
    (intake.root / SCHEMA_MARKER).unlink()
    if damage == "wrong_size":
        (intake.base / "catalog").write_bytes(empty_catalog()[:-1])
    with pytest.raises(LedgerIntegrityError, match="schema marker missing while the other exists"):
        intake.ledger.exists()


def test_a_suffix_beyond_the_catalog_is_listed_and_counted_before_any_repair(tmp_path: Path) -> None:
    """INTAKE-26 on the read paths: export's ``entries`` and health's ``verify_all`` accept an uncatalogued
    suffix exactly as admission does (each entry vouched for by its receipt), and count in whole entries."""
    root = tmp_path / "mem"
    first = run_in_shard("cd")
    second = run_in_shard("ab")
    assert admit(root, second) == "admitted"
    assert crash(root, first, "before_catalog") == -9
    intake = Intake(root)
    listed = intake.ledger.entries(intake.has_receipt)
    assert sorted(rid for rid, _ in listed) == sorted([intake_id(first), intake_id(second)])
    assert all(len(h) == 64 for _, h in listed)
    count = intake.ledger.verify_all(intake.has_receipt)
    assert count == 2 and type(count) is int


# -- exact, content-free reasons and the catalog's movements (mutation survivors, #13) ------------------

_UID = os.geteuid()
EXPECTED_REASON = {
    "missing": "ledger shard ab is missing (catalog records 258 bytes)",
    "truncated": "ledger shard ab is truncated (129 < 258 bytes)",
    "replaced": "ledger shard ab does not match its catalog digest",
    "ledger_and_catalog_deleted": "catalog missing while the other exists: refusing to continue",
    "marker_deleted": "schema marker missing while the other exists: refusing to continue",
    "symlinked_shard": "ledger shard ab is a symlink",
    "foreign_owner": f"ledger shard ab is owned by uid 12345, not {_UID}",
    "wrong_mode": "ledger shard ab has mode 644, expected 600",
    "catalog_wrong_size": f"catalog is {CATALOG_BYTES - 40} bytes, expected {CATALOG_BYTES}",
    "uncatalogued_entry_without_receipt": (
        "ledger shard ab has an uncatalogued entry without an exact intake receipt"
    ),
    "partial_entry": "ledger shard ab ends in a partial entry",
    "hard_linked_shard": "ledger shard ab has 2 links",
}


def _header(magic: bytes = b"TMEMCAT\x00", version: int = 1, slots: int = 256) -> bytes:
    from tempomem.storage.ledger import CATALOG_HEADER

    return CATALOG_HEADER.pack(magic, version, slots)


def _rewrite_header(root: Path, header: bytes) -> None:
    catalog = root / ".capture-intake" / "catalog"
    catalog.write_bytes(header + catalog.read_bytes()[len(header) :])


def _more_cases():
    def bad_magic(root: Path, shard: Path) -> None:
        _rewrite_header(root, _header(magic=b"NOTACAT\x00"))

    def bad_version(root: Path, shard: Path) -> None:
        _rewrite_header(root, _header(version=2))

    def bad_slot_count(root: Path, shard: Path) -> None:
        _rewrite_header(root, _header(slots=255))

    def catalog_mode(root: Path, shard: Path) -> None:
        (root / ".capture-intake" / "catalog").chmod(0o644)

    def shards_without_catalog_or_marker(root: Path, shard: Path) -> None:
        (root / ".capture-intake" / "catalog").unlink()
        (root / SCHEMA_MARKER).unlink()

    def shard_is_a_folder(root: Path, shard: Path) -> None:
        shard.unlink()
        shard.mkdir(mode=0o700)

    def non_ascii_suffix(root: Path, shard: Path) -> None:
        with open(shard, "ab") as f:
            f.write(b"\xff" * LEDGER_ENTRY_BYTES)

    return {
        non_ascii_suffix: "ledger shard ab has an uncatalogued entry without an exact intake receipt",
        bad_magic: "catalog header is not a tempomem v1 catalog",
        bad_version: "catalog header is not a tempomem v1 catalog",
        bad_slot_count: "catalog header is not a tempomem v1 catalog",
        catalog_mode: "catalog has mode 644, expected 600",
        shards_without_catalog_or_marker: "ledger shards exist without a catalog or schema marker",
        shard_is_a_folder: "ledger shard ab is not a regular file",
    }


REASON_CASES = [(f, EXPECTED_REASON[f.__name__]) for f in FAIL_CLOSED_CASES if f.__name__ in EXPECTED_REASON]
REASON_CASES += list(_more_cases().items())


@pytest.mark.parametrize(("tamper", "reason"), REASON_CASES, ids=[f.__name__ for f, _ in REASON_CASES])
def test_each_ledger_failure_names_its_exact_reason(
    store: tuple[Path, str, Path], tamper, reason: str
) -> None:
    root, new_run, shard = store
    tamper(root, shard)
    before = snapshot(root)
    with pytest.raises(IntakeIntegrityError) as err:
        admit(root, new_run)
    assert str(err.value) == reason
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda d: d.chmod(0o755), "ledger folder has mode 755, expected 700"),
        (lambda d: os.chown(d, 12345, 12345), f"ledger folder is owned by uid 12345, not {_UID}"),
        (
            lambda d: (
                d.rmdir(),
                d.parent.joinpath("real").mkdir(mode=0o700),
                d.symlink_to(d.parent / "real"),
            ),
            "ledger folder is not a directory",
        ),
        (lambda d: (d.rmdir(), d.touch(mode=0o700)), "ledger folder is not a directory"),
    ],
    ids=["open_mode", "foreign_owner", "symlink", "file"],
)
def test_the_ledger_folder_is_checked_before_the_first_commit(tmp_path: Path, tamper, reason: str) -> None:
    from tempomem.storage.ledger import Ledger, LedgerIntegrityError

    base = tmp_path / "mem" / ".capture-intake"
    base.mkdir(parents=True, mode=0o700)
    (base / "ledger").mkdir(mode=0o700)
    tamper(base / "ledger")
    ledger = Ledger(tmp_path / "mem", base)
    with pytest.raises(LedgerIntegrityError) as err:
        ledger.append(intake_id("run-x"), "0" * 64, lambda *_: False)
    assert str(err.value) == reason
    assert not (base / "catalog").exists()


def test_a_lookup_finds_every_entry_and_moves_the_catalog_only_over_a_suffix(tmp_path: Path) -> None:
    from tempomem.storage.ledger import CATALOG_HEADER, CATALOG_SLOT

    root = tmp_path / "mem"
    first = run_in_shard("cd")
    second = run_in_shard("cd", int(first.split("-")[1]) + 1)
    third = run_in_shard("cd", int(second.split("-")[1]) + 1)
    admit(root, first)
    catalog = root / ".capture-intake" / "catalog"
    shard = root / ".capture-intake" / "ledger" / "shard-cd"
    intake = Intake(root)
    # A lookup of a clean shard leaves the catalog file itself alone.
    inode = catalog.stat().st_ino
    assert intake.ledger.lookup(intake_id(first), intake.has_receipt) is not None
    assert catalog.stat().st_ino == inode
    # A commit killed before its catalog: the next lookup advances the catalog over the vouched suffix.
    assert crash(root, second, "before_catalog") == -9
    intake = Intake(root)
    assert intake.ledger.lookup(intake_id(second), intake.has_receipt) is not None  # the second entry
    index = int("cd", 16)
    mark, digest = CATALOG_SLOT.unpack_from(
        catalog.read_bytes(), CATALOG_HEADER.size + index * CATALOG_SLOT.size
    )
    assert (mark, digest) == (2 * LEDGER_ENTRY_BYTES, hashlib.sha256(shard.read_bytes()).digest())
    # append() over a fresh suffix vouches for it the same way.
    assert crash(root, third, "before_catalog") == -9
    intake = Intake(root)
    assert intake.ledger.append(intake_id(run_in_shard("cd", 10**5)), "0" * 64, intake.has_receipt) is True


def test_a_first_commit_to_a_shard_syncs_the_ledger_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempomem.storage.ledger as ledger_module

    synced: list[str] = []
    real = ledger_module.fsync_dir
    monkeypatch.setattr(ledger_module, "fsync_dir", lambda p: (synced.append(Path(p).name), real(p))[1])
    root = tmp_path / "mem"
    admit(root, run_in_shard("ab"))
    assert synced.count("ledger") == 1  # the new shard-ab entry
    admit(root, run_in_shard("ab", 10**5))
    assert synced.count("ledger") == 1  # an existing shard: its name is already durable


def test_a_vouched_suffix_entry_must_end_its_line(tmp_path: Path) -> None:
    from tempomem.storage.ledger import LedgerIntegrityError

    root = tmp_path / "mem"
    first = run_in_shard("cd")
    admit(root, first)
    second = run_in_shard("cd", int(first.split("-")[1]) + 1)
    assert crash(root, second, "before_catalog") == -9
    shard = root / ".capture-intake" / "ledger" / "shard-cd"
    intake = Intake(root)
    whole = shard.read_bytes()
    assert intake.ledger.entries(intake.has_receipt)[-1][0] == intake_id(second)  # vouched as written
    shard.write_bytes(whole[:-1] + b"x")  # a receipt vouches for the id and hash, not this
    with pytest.raises(LedgerIntegrityError, match="uncatalogued entry without an exact intake receipt"):
        intake.ledger.verify_all(intake.has_receipt)


def test_an_empty_ledger_folder_without_catalog_is_a_fresh_store(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    (root / ".capture-intake" / "ledger").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    os.chmod(root / ".capture-intake", 0o700)
    assert admit(root, "run-1") == "admitted"


def test_a_first_creation_writes_an_empty_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creation and the first commit are separate durable steps: the catalog on disk between them must
    vouch for nothing (every slot empty), or every other shard would read as missing."""
    from tempomem.storage.ledger import Ledger

    def stop(self: Ledger) -> None:
        raise RuntimeError("stopped before the catalog commit")

    monkeypatch.setattr(Ledger, "before_catalog_commit", stop)
    root = tmp_path / "mem"
    with pytest.raises(RuntimeError):
        admit(root, "run-1")
    monkeypatch.undo()
    intake = Intake(root)
    assert intake.ledger.verify_all(intake.has_receipt) == 1


def test_an_entry_of_the_wrong_size_is_refused_by_name() -> None:
    from tempomem.storage.ledger import entry_bytes

    assert len(entry_bytes("a" * 64, "b" * 64)) == LEDGER_ENTRY_BYTES
    with pytest.raises(ValueError) as err:
        entry_bytes("a" * 63, "b" * 64)
    assert str(err.value) == "ledger entries are exactly 129 bytes"


def test_a_restrictive_umask_still_makes_a_usable_ledger_folder(tmp_path: Path) -> None:
    old = os.umask(0o277)  # alone, mkdir would make the folder 0500 and open the shard 0400
    try:
        admit(tmp_path / "mem", "run-u")
    finally:
        os.umask(old)
    ledger_dir = tmp_path / "mem" / ".capture-intake" / "ledger"
    assert stat.S_IMODE(os.stat(ledger_dir).st_mode) == 0o700
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in ledger_dir.iterdir()} == {0o600}
    assert Intake(tmp_path / "mem").ledger.lookup(intake_id("run-u"), lambda *_: False) is not None


def test_a_second_payload_hash_for_one_id_is_refused_by_the_ledger_itself(tmp_path: Path) -> None:
    from tempomem.storage.ledger import LedgerIntegrityError

    intake = Intake(tmp_path / "mem")
    intake.ensure_layout()
    record = intake_id("run-l")
    assert intake.ledger.append(record, "1" * 64, lambda *_: False)
    assert not intake.ledger.append(record, "1" * 64, lambda *_: False)  # the same commitment: no-op
    with pytest.raises(LedgerIntegrityError) as err:
        intake.ledger.append(record, "2" * 64, lambda *_: False)
    assert str(err.value) == "ledger already commits this run id with another payload hash"
