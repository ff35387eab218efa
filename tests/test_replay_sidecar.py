"""The replay sidecar (RPL-02..RPL-05, AMB-24) and the entity graph file (GRAPH-*): reading, writing and
strict reading on real files under tmp_path, no mocks except shrunken bounds.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tempomem.storage import graph, replay_sidecar
from tempomem.storage.replay_sidecar import (
    SIDECAR_NAME,
    Projection,
    SidecarError,
    SupersedeInfo,
    apply_delta,
    canonical_bytes,
    entry_id,
    load,
    superseded,
    threads,
)
from tests.helpers.sidecar_entries import (
    AT,
    DIGEST,
    canonical_doc,
    raw_entry,
    sup,
    thread,
    write_raw,
)

# -- sidecar: reading and writing ------------------------------------------------------------------------


def test_missing_sidecar_is_empty(tmp_path: Path) -> None:
    assert load(tmp_path) == Projection(version=1, entries=())
    assert superseded(tmp_path) == {}
    assert threads(tmp_path) == {}
    assert not (tmp_path / SIDECAR_NAME).exists()


def test_apply_writes_exact_canonical_bytes_owner_only(tmp_path: Path) -> None:
    added = apply_delta(tmp_path, [sup("c-old", "c-new"), thread("c-a", "c-b", 3)])
    assert added == 2
    path = tmp_path / SIDECAR_NAME
    data = path.read_bytes()
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1 and stat.S_ISREG(st.st_mode)
    # Sorted keys, no whitespace, entries sorted by id, weight only on the thread edge.
    entries = sorted(
        [
            raw_entry(id=entry_id("supersede", "c-old", "c-new")),
            {
                "at": AT,
                "authority": {"digest": DIGEST, "kind": "capture"},
                "from": "c-a",
                "id": entry_id("thread", "c-a", "c-b"),
                "kind": "thread",
                "to": "c-b",
                "weight": 3,
            },
        ],
        key=lambda e: e["id"],
    )
    assert data == canonical_doc(entries)
    assert b" " not in data and b"\n" not in data
    assert superseded(tmp_path) == {"c-old": SupersedeInfo(new_id="c-new", at=AT)}
    assert threads(tmp_path) == {("c-a", "c-b"): 3}
    assert canonical_bytes(load(tmp_path)) == data


def test_apply_is_idempotent_bytes_unchanged(tmp_path: Path) -> None:
    delta = [sup("c-old", "c-new"), thread("c-a", "c-b", 2)]
    assert apply_delta(tmp_path, delta) == 2
    path = tmp_path / SIDECAR_NAME
    before = path.read_bytes()
    inode = os.lstat(path).st_ino
    assert apply_delta(tmp_path, delta) == 0
    assert apply_delta(tmp_path, list(reversed(delta))) == 0
    assert apply_delta(tmp_path, [e.as_json() for e in delta]) == 0  # dict form, same entries
    assert path.read_bytes() == before
    assert os.lstat(path).st_ino == inode  # not even rewritten
    # A partly new delta adds only the new entry.
    assert apply_delta(tmp_path, [*delta, sup("c-x", "c-y")]) == 1


@pytest.mark.parametrize(
    "conflict",
    [
        pytest.param(lambda: sup("c-old", "c-new", at="2026-03-04T05:06:08.000Z"), id="other-at"),
        pytest.param(lambda: sup("c-old", "c-new", digest="cd" * 32), id="other-digest"),
        pytest.param(lambda: sup("c-old", "c-other"), id="second-replacement"),
    ],
)
def test_conflicting_entry_is_rejected_and_nothing_written(tmp_path: Path, conflict: Any) -> None:
    apply_delta(tmp_path, [sup("c-old", "c-new")])
    before = (tmp_path / SIDECAR_NAME).read_bytes()
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [sup("c-q", "c-r"), conflict()])
    assert err.value.reason == "conflict"
    assert (tmp_path / SIDECAR_NAME).read_bytes() == before


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (raw_entry(to="the new note text"), "text in an id field"),
        (raw_entry(extra="x"), "extra field"),
        (raw_entry(kind="edge"), "unknown kind"),
        (raw_entry(at="2026-03-04T05:06:07Z"), "timestamp without ms"),
        (raw_entry(authority={"digest": "ab" * 31, "kind": "capture"}), "short digest"),
        (raw_entry(authority={"digest": DIGEST, "kind": "model"}), "unknown authority"),
        (raw_entry(authority={"digest": DIGEST, "kind": "capture", "text": "x"}), "authority extra field"),
        (raw_entry(weight=2), "weight on a supersede edge"),
        (raw_entry(kind="thread"), "thread without weight"),
        (raw_entry(kind="thread", weight=True), "bool weight"),
        (raw_entry(kind="thread", weight="2"), "string weight"),
        (raw_entry(kind="thread", weight=0), "zero weight"),
        (raw_entry(to="c-old"), "self edge"),
        (raw_entry(kind="lifecycle", to="c-new"), "lifecycle to a non-state"),
        (raw_entry(kind="terminal", to="superseded"), "terminal to a non-terminal state"),
    ],
)
def test_delta_schema_is_strict(tmp_path: Path, entry: dict[str, Any], why: str) -> None:
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [entry])
    assert err.value.reason == "schema", why
    assert not (tmp_path / SIDECAR_NAME).exists()


def test_lifecycle_and_terminal_entries_round_trip(tmp_path: Path) -> None:
    auth = {"digest": DIGEST, "kind": "migration"}
    apply_delta(
        tmp_path,
        [
            {
                "id": "lif-1",
                "kind": "lifecycle",
                "from": "c-a",
                "to": "superseded",
                "at": AT,
                "authority": auth,
            },
            {
                "id": "ter-1",
                "kind": "terminal",
                "from": "c-b",
                "to": "forgotten",
                "at": AT,
                "authority": auth,
            },
        ],
    )
    assert replay_sidecar.terminal(tmp_path) == {"c-b": AT}
    assert [e.kind for e in load(tmp_path).entries] == ["lifecycle", "terminal"]


# -- sidecar: strict reading (RPL-04, AMB-24) ----------------------------------------------------------------


GOOD = canonical_doc([raw_entry()])


def test_good_fixture_is_accepted(tmp_path: Path) -> None:
    write_raw(tmp_path, GOOD)
    assert superseded(tmp_path) == {"c-old": SupersedeInfo("c-new", AT)}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (json.dumps({"entries": [raw_entry()], "version": 1}).encode(), "non_canonical"),  # whitespace
        (GOOD + b"\n", "non_canonical"),
        (
            GOOD.replace(b'{"entries"', b'{"version":1,"entries"').replace(b',"version":1}', b"}"),
            "non_canonical",
        ),
        (GOOD.replace(b'"version":1', b'"version":1.0'), "non_canonical"),
        (GOOD.replace(b'"version":1', b'"version":NaN'), "non_canonical"),
        (GOOD.replace(b'"version":1', b'"version":Infinity'), "non_canonical"),
        (GOOD.replace(b'"kind":"supersede"', b'"kind":"supersede","kind":"supersede"'), "non_canonical"),
        (GOOD.replace(b'"c-new"', b'"c-\\u006eew"'), "non_canonical"),  # escaped but equal string
        (GOOD.replace(b'"version":1', b'"version":2'), "schema"),
        (GOOD.replace(b'"version":1', b'"version":true'), "schema"),
        (GOOD.replace(b'"version":1', b'"extra":0,"version":1'), "schema"),
        (canonical_doc([raw_entry(id="b"), raw_entry(id="a", **{"from": "c-x"})]), "schema"),  # unsorted
        (canonical_doc([raw_entry(id="a"), raw_entry(id="a")]), "schema"),  # duplicate id
        (canonical_doc([raw_entry(to="some memory text")]), "schema"),
        (b"\xff\xfe", "not_utf8"),
        (b"", "not_json"),
        (b'{"entries":[', "not_json"),
        (b"[]", "schema"),
    ],
)
def test_non_canonical_or_invalid_bytes_are_rejected(tmp_path: Path, data: bytes, reason: str) -> None:
    write_raw(tmp_path, data)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == reason
    # A bad sidecar is never overwritten by a delta either (fail closed).
    with pytest.raises(SidecarError):
        apply_delta(tmp_path, [sup("c-q", "c-r")])
    assert (tmp_path / SIDECAR_NAME).read_bytes() == data


def test_symlink_is_rejected(tmp_path: Path) -> None:  # LIM-26: a regular file, one link, 0600
    real = tmp_path / "elsewhere.json"
    real.write_bytes(GOOD)
    os.chmod(real, 0o600)
    (tmp_path / SIDECAR_NAME).symlink_to(real)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "unsafe_file"
    with pytest.raises(SidecarError):
        apply_delta(tmp_path, [sup("c-q", "c-r")])
    assert real.read_bytes() == GOOD and (tmp_path / SIDECAR_NAME).is_symlink()


def test_hard_link_is_rejected(tmp_path: Path) -> None:
    path = write_raw(tmp_path, GOOD)
    os.link(path, tmp_path / "second-name")
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "unsafe_file"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o400, 0o700])
def test_wrong_mode_is_rejected(tmp_path: Path, mode: int) -> None:
    write_raw(tmp_path, GOOD, mode=mode)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "unsafe_file"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_foreign_owner_is_rejected(tmp_path: Path) -> None:
    path = write_raw(tmp_path, GOOD)
    os.chown(path, 12345, 12345)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "unsafe_file"


def test_directory_or_fifo_is_rejected(tmp_path: Path) -> None:
    (tmp_path / SIDECAR_NAME).mkdir(mode=0o700)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "unsafe_file"


def test_entry_bound_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_sidecar, "MAX_ENTRIES", 3)
    apply_delta(tmp_path, [sup(f"c-{i}", f"c-n{i}") for i in range(3)])
    before = (tmp_path / SIDECAR_NAME).read_bytes()
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [sup("c-9", "c-n9")])
    assert err.value.reason == "too_many_entries"
    assert (tmp_path / SIDECAR_NAME).read_bytes() == before
    # A file that already holds more than the bound is refused on read.
    monkeypatch.setattr(replay_sidecar, "MAX_ENTRIES", 2)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "too_many_entries"


def test_byte_bound_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apply_delta(tmp_path, [sup("c-1", "c-n1")])
    size = (tmp_path / SIDECAR_NAME).stat().st_size
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", size + 10)
    before = (tmp_path / SIDECAR_NAME).read_bytes()
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [sup("c-2", "c-n2")])
    assert err.value.reason == "too_large"
    assert (tmp_path / SIDECAR_NAME).read_bytes() == before
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", size - 1)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "too_large"


def test_real_bounds_are_the_reference_values() -> None:
    assert replay_sidecar.MAX_BYTES == 32 * 1024 * 1024
    assert replay_sidecar.MAX_ENTRIES == 131_072


# -- graph.jsonl ---------------------------------------------------------------------------------------------


def test_graph_apply_is_idempotent_and_canonical(tmp_path: Path) -> None:
    alice = graph.EntityRow(id="person:alice", name="Alice Smith", type="person", memories=("c-2", "c-1"))
    acme = {"id": "org:acme", "name": "Acme", "type": "organization", "memories": ["c-1"]}
    works = graph.relation("person:alice", "works at", "org:acme", ["c-1"])
    assert graph.apply(tmp_path, [alice, acme], [works]) == 3
    path = tmp_path / "graph.jsonl"
    data = path.read_bytes()
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    lines = data.decode().splitlines()
    assert lines[0] == (
        '{"id":"org:acme","memories":["c-1"],"name":"Acme","row":"entity","type":"organization"}'
    )
    assert json.loads(lines[1])["memories"] == ["c-1", "c-2"]
    assert json.loads(lines[2])["relation"] == "works at"
    assert graph.apply(tmp_path, [alice, acme], [works]) == 0
    assert path.read_bytes() == data
    # A second attestation is a union, never a loss.
    assert graph.apply(tmp_path, [{**acme, "memories": ["c-9"]}]) == 1
    assert graph.entities_by_id(tmp_path)["org:acme"].memories == ("c-1", "c-9")
    assert graph.person(tmp_path, "person:alice") is not None
    assert graph.person(tmp_path, "org:acme") is None


@pytest.mark.parametrize(
    ("entities", "relations"),
    [
        ([{"id": "person:a", "name": "A", "type": "robot"}], []),
        ([{"id": "person:a", "name": "A", "type": "person", "text": "x"}], []),
        ([{"id": "person a", "name": "A", "type": "person"}], []),
        ([{"id": "person:a", "name": "line\nbreak", "type": "person"}], []),
        (
            [{"id": "person:a", "name": "A", "type": "person"}],
            [graph.relation("person:a", "knows", "person:b")],
        ),
        (
            [
                {"id": "person:a", "name": "A", "type": "person"},
                {"id": "person:b", "name": "B", "type": "person"},
            ],
            [{"id": "rel-x", "from": "person:a", "relation": "Knows", "to": "person:b"}],
        ),
        (
            [
                {"id": "person:a", "name": "A", "type": "person"},
                {"id": "person:b", "name": "B", "type": "person"},
            ],
            [{"id": "rel-x", "from": "person:a", "relation": "knows", "to": "person:b"}],
        ),
    ],
    ids=["type", "extra", "id", "name", "dangling", "uppercase-relation", "foreign-row-id"],
)
def test_graph_rejects_bad_rows_and_writes_nothing(
    tmp_path: Path, entities: list[Any], relations: list[Any]
) -> None:
    with pytest.raises(graph.GraphError):
        graph.apply(tmp_path, entities, relations)
    assert not (tmp_path / "graph.jsonl").exists()


def test_graph_rejects_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "graph.jsonl"
    path.write_text('{"id":"person:a","name":"A","row":"entity","type":"person"}\nnot json\n')
    os.chmod(path, 0o600)
    with pytest.raises(graph.GraphError):
        graph.load_graph(tmp_path)
