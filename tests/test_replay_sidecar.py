"""The replay sidecar (RPL-02..RPL-05, AMB-24), the entity graph file (GRAPH-*) and the text guards
(AMB-25, AMB-26): real files under tmp_path, no mocks except shrunken bounds."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tempomem.storage import graph, replay_sidecar
from tempomem.storage.credentials import contains_credential, unsafe_reason
from tempomem.storage.replay_sidecar import (
    SIDECAR_NAME,
    Authority,
    Entry,
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

AT = "2026-03-04T05:06:07.089Z"
DIGEST = "ab" * 32


def sup(old: str, new: str, *, at: str = AT, digest: str = DIGEST) -> Entry:
    return Entry(
        id=entry_id("supersede", old, new),
        kind="supersede",
        from_=old,
        to=new,
        at=at,
        authority=Authority(kind="capture", digest=digest),
    )


def thread(a: str, b: str, weight: int) -> Entry:
    return Entry(
        id=entry_id("thread", a, b),
        kind="thread",
        from_=a,
        to=b,
        weight=weight,
        at=AT,
        authority=Authority(kind="capture", digest=DIGEST),
    )


def raw_entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "at": AT,
        "authority": {"digest": DIGEST, "kind": "capture"},
        "from": "c-old",
        "id": "sup-1",
        "kind": "supersede",
        "to": "c-new",
    }
    entry.update(overrides)
    return entry


def write_raw(root: Path, data: bytes, mode: int = 0o600) -> Path:
    path = root / SIDECAR_NAME
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def canonical_doc(entries: list[dict[str, Any]]) -> bytes:
    return json.dumps({"entries": entries, "version": 1}, sort_keys=True, separators=(",", ":")).encode()


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


# -- text guards (AMB-25, AMB-26) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-----BEGIN RSA PRIVATE KEY-----", True),
        ("-----BEGIN PRIVATE KEY-----", True),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", True),
        ("-----BEGIN PUBLIC KEY-----", False),
        ("key AKIAIOSFODNN7EXAMPLE in use", True),
        ("AKIAshort", False),
        ("sk-abcdefghijklmnopqrstuvwx", True),
        ("sk-short", False),
        ("ghp_" + "a" * 36, True),
        ("gho_" + "B" * 40, True),
        ("ghp_" + "a" * 35, False),
        ("xoxb-123-456", True),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", True),
        ("version 1.2.3 of abc.def.ghi", False),
        ("password: hunter22", True),
        ("Password=correcthorse", True),
        ("api_key = 0123456789", True),
        ("apikey:abcdef", True),
        ("token: abc", False),
        ("the password is long", False),
        ("Alice prefers tea over coffee", False),
    ],
)
def test_contains_credential(text: str, expected: bool) -> None:
    assert contains_credential(text) is expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Alice prefers tea", None),
        ("Zoë lives in Kraków 🇵🇱", None),
        ("family 👨\u200d👩\u200d👧", None),  # ZWJ inside an emoji sequence
        ("", "empty"),
        ("   ", "empty"),
        ("x" * 1025, "too_long"),
        ("ż" * 513, "too_long"),  # 1,026 UTF-8 bytes
        ("ż" * 512, None),
        ("line\nbreak", "control"),
        ("tab\there", "control"),
        ("nel\x85", "control"),
        ("sep\u2028", "control"),
        ("evil \u202e txt", "bidi"),
        ("isolate \u2067x", "bidi"),
        ("zero\u200bwidth", "zero_width"),
        ("a\u200db", "zero_width"),  # ZWJ between letters
        ("bom\ufeff", "zero_width"),
        ("lone \ud800", "surrogate"),
        ("x <!-- y", "html_comment"),
        ("y --> z", "html_comment"),
        ("- a bullet", "markdown_prefix"),
        ("* star", "markdown_prefix"),
        ("1. first", "markdown_prefix"),
        ("# heading", "markdown_prefix"),
        ("#hashtag is fine", None),
        ("-5 degrees outside", None),
        ("my token: abcdefgh", "credential"),
    ],
)
def test_unsafe_reason(text: str, reason: str | None) -> None:
    assert unsafe_reason(text) == reason


@pytest.mark.parametrize(
    ("data", "reason", "detail"),
    [
        (b'{"entries":[],"version":NaN}', "non_canonical", "NaN or Infinity"),
        (b'{"entries":[],"version":1.5}', "non_canonical", "non-integer number"),
        (b'{"entries":[],"version":1}\xff', "not_utf8", ""),
    ],
)
def test_sidecar_errors_carry_a_reason_and_a_content_free_detail(
    data: bytes, reason: str, detail: str
) -> None:
    from tempomem.storage.replay_sidecar import SidecarError, parse

    with pytest.raises(SidecarError) as err:
        parse(data)
    assert (err.value.reason, err.value.detail) == (reason, detail)
    assert str(err.value) == (f"{reason}: {detail}" if detail else reason)


# -- every rejection names its reason and a content-free detail (mutation survivors, #13) ----------------

_ONE = canonical_doc([raw_entry()])


@pytest.mark.parametrize(
    ("data", "reason", "detail"),
    [
        (b"", "not_json", "at offset 0"),
        (b'{"entries":[', "not_json", "at offset 12"),
        (_ONE + b" ", "non_canonical", "trailing bytes"),
        (
            _ONE.replace(b'"kind":"supersede"', b'"kind":"supersede","kind":"supersede"'),
            "non_canonical",
            "duplicate key",
        ),
        (_ONE.replace(b'"version":1', b'"version":2'), "schema", "literal_error at version"),
        (
            canonical_doc([raw_entry(to="some memory text")]),
            "schema",
            "string_pattern_mismatch at entries.0.to",
        ),
        (
            _ONE.replace(b'"c-new"', b'"c-\\u006eew"'),
            "non_canonical",
            "bytes differ from the canonical serialisation",
        ),
    ],
)
def test_each_rejection_carries_its_exact_detail(data: bytes, reason: str, detail: str) -> None:
    with pytest.raises(SidecarError) as err:
        replay_sidecar.parse(data)
    assert (err.value.reason, err.value.detail) == (reason, detail)


def test_a_sidecar_error_without_detail_prints_only_its_reason() -> None:
    assert str(SidecarError("conflict")) == "conflict"
    assert SidecarError("conflict").detail == ""


def test_bounds_are_inclusive_and_name_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # Exactly at a bound is allowed; one over is refused with the measured figure as detail (RPL-05).
    two = canonical_doc([raw_entry(id="a"), raw_entry(id="b", **{"from": "c-x"})])
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", len(two))
    monkeypatch.setattr(replay_sidecar, "MAX_ENTRIES", 2)
    assert len(replay_sidecar.parse(two).entries) == 2
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", len(two) - 1)
    with pytest.raises(SidecarError) as err:
        replay_sidecar.parse(two)
    assert (err.value.reason, err.value.detail) == ("too_large", f"{len(two)} bytes")
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", len(two))
    monkeypatch.setattr(replay_sidecar, "MAX_ENTRIES", 1)
    with pytest.raises(SidecarError) as err:
        replay_sidecar.parse(two)
    assert (err.value.reason, err.value.detail) == ("too_many_entries", "2 entries")


def test_authority_digest_is_stable_across_versions() -> None:
    # Digests are stored in existing sidecars; a change of the formula would make every replayed
    # authority disagree with what is on disk. Known answer for the v1 formula.
    # sha256(b"tempomem-authority-v1\0capture\0run-1\0" + AT), recorded once.
    assert replay_sidecar.authority_digest("capture", "run-1", AT) == (
        "ab8a152eb05ea79518246fe7b1b787a5e6b3b4764e63ac1d863298c40ca416c7"
    )


@pytest.mark.parametrize(
    ("second_line", "message"),
    [
        ("not json", "line 2: not JSON"),
        ("[1, 2]", "line 2: not an object"),
        ('{"id":"person:b","name":"B","row":"entity","type":"person","extra":1}', "line 2: extra_forbidden"),
    ],
)
def test_graph_errors_name_the_line_and_the_reason_only(
    tmp_path: Path, second_line: str, message: str
) -> None:
    path = tmp_path / "graph.jsonl"
    path.write_text('{"id":"person:a","name":"A","row":"entity","type":"person"}\n' + second_line + "\n")
    os.chmod(path, 0o600)
    with pytest.raises(graph.GraphError) as err:
        graph.load_graph(tmp_path)
    assert str(err.value) == message


def test_relation_ids_are_stable_across_versions() -> None:
    # Row ids are stored in graph.jsonl and replayed plans must name the same row.
    # Known answer, recorded once.
    known = "rel-459bce2b48c22e863591bdf6cb11c558411c019f"
    assert graph.relation_id("person:a", "knows", "person:b") == known


def test_conflicts_name_the_entry_or_the_superseded_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_delta(tmp_path, [sup("c-old", "c-new")])
    changed = sup("c-old", "c-new", digest="cd" * 32)
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [changed])
    assert err.value.detail == f"entry {changed.id} already holds other values"
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [sup("c-old", "c-other")])
    assert err.value.detail == "c-old is already superseded"
    one = (tmp_path / SIDECAR_NAME).stat().st_size
    monkeypatch.setattr(replay_sidecar, "MAX_ENTRIES", 1)
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [sup("c-2", "c-n2")])
    assert (err.value.reason, err.value.detail) == ("too_many_entries", "2 entries")
    monkeypatch.setattr(replay_sidecar, "MAX_ENTRIES", 10)
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", one + 10)
    merged, _ = replay_sidecar.merge(load(tmp_path), [sup("c-2", "c-n2")])
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [sup("c-2", "c-n2")])
    assert (err.value.reason, err.value.detail) == ("too_large", f"{len(canonical_bytes(merged))} bytes")


def test_entry_ids_are_stable_across_versions() -> None:
    # Entry ids are stored in sidecars; a replayed edge must name the same entry. Known answer.
    assert entry_id("supersede", "c-old", "c-new") == "sup-f36ac34bddef2bed0ec11ba8b7a28afb0e352d32"


def test_load_names_why_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_raw(tmp_path, _ONE, mode=0o644)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert (err.value.reason, err.value.detail) == ("unsafe_file", "has mode 644, expected 600")
    # Exactly at the byte bound the file is not too large: the other reason is the one reported.
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", len(_ONE))
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert err.value.reason == "unsafe_file"
    os.chmod(path, 0o600)
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", len(_ONE) - 1)
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert (err.value.reason, err.value.detail) == ("too_large", f"{len(_ONE)} bytes")
    path.unlink()
    (tmp_path / "real.json").write_bytes(_ONE)
    path.symlink_to(tmp_path / "real.json")
    with pytest.raises(SidecarError) as err:
        load(tmp_path)
    assert (err.value.reason, err.value.detail) == ("unsafe_file", "is a symlink")


def test_a_bad_delta_entry_names_the_nested_field(tmp_path: Path) -> None:
    bad = raw_entry(authority={"digest": "not-a-digest", "kind": "capture"})
    with pytest.raises(SidecarError) as err:
        apply_delta(tmp_path, [bad])
    assert (err.value.reason, err.value.detail) == ("schema", "string_pattern_mismatch at authority.digest")
    assert not (tmp_path / SIDECAR_NAME).exists()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a\x7fb", "control"),  # DEL, the first C1-range boundary
        ("a\x9fb", "control"),  # the last C1 control
        ("a\xa0b", None),  # no-break space is text
        ("a\udfffb", "surrogate"),  # the last surrogate
        ("a\ue000b", None),  # the first private-use code point after them is text
        ("\u200d😀😀", "zero_width"),  # a joiner at the start has no left side
        ("😀\u200d", "zero_width"),  # nor at the end a right side
        ("😀\u200d😀", None),
    ],
)
def test_character_class_boundaries(text: str, reason: str | None) -> None:
    assert unsafe_reason(text) == reason


def _graph_file(root: Path, text: str) -> None:
    path = root / "graph.jsonl"
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o600)


_ENT_A = '{"id":"person:a","name":"A","row":"entity","type":"person"}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_ENT_A + "\n" + _ENT_A + "\n", "line 2: duplicate row id"),
        ("\xff", None),  # not UTF-8: written as bytes below
    ],
)
def test_graph_file_errors_are_exact(tmp_path: Path, text: str, message: str | None) -> None:
    if message is None:
        (tmp_path / "graph.jsonl").write_bytes(b"\xff\n")
        os.chmod(tmp_path / "graph.jsonl", 0o600)
        message = "graph.jsonl is not UTF-8"
    else:
        _graph_file(tmp_path, text)
    with pytest.raises(graph.GraphError) as err:
        graph.load_graph(tmp_path)
    assert str(err.value) == message


def test_graph_blank_lines_are_skipped_not_the_end(tmp_path: Path) -> None:
    b = '{"id":"person:b","name":"B","row":"entity","type":"person"}'
    _graph_file(tmp_path, _ENT_A + "\n\n" + b + "\n")
    assert sorted(graph.load_graph(tmp_path).entities) == ["person:a", "person:b"]


def test_graph_file_over_its_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _graph_file(tmp_path, _ENT_A + "\n")
    monkeypatch.setattr(graph, "GRAPH_MAX_BYTES", len(_ENT_A))
    with pytest.raises(graph.GraphError) as err:
        graph.load_graph(tmp_path)
    assert str(err.value) == "unsafe graph file (UnsafePathError)"
    monkeypatch.setattr(graph, "GRAPH_MAX_BYTES", len(_ENT_A) + 1)
    assert list(graph.load_graph(tmp_path).entities) == ["person:a"]


def test_graph_rows_are_refused_with_exact_messages(tmp_path: Path) -> None:
    a = graph.EntityRow(id="person:a", name="A", type="person")
    b = graph.EntityRow(id="person:b", name="B", type="person")
    graph.apply(tmp_path, entities=[a, b])
    before = (tmp_path / "graph.jsonl").read_bytes()
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {
                "relations": [
                    graph.relation("person:a", "knows", "person:b").model_copy(update={"id": "rel-x"})
                ]
            },
            "relation row id does not match its triple",
        ),
        (
            {"relations": [graph.relation("person:a", "knows", "person:zz")]},
            "relation endpoint is not a known entity",
        ),
        ({"entities": [graph.relation("person:a", "knows", "person:b")]}, "expected a EntityRow"),
        (
            {"entities": [{"id": "person:c", "name": "C", "type": "planet"}]},
            "invalid EntityRow: literal_error",
        ),
        (
            {"entities": [{"id": "person:c", "name": "x" * 1025, "type": "person"}]},
            "invalid EntityRow: value_error",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(graph.GraphError) as err:
            graph.apply(tmp_path, **kwargs)
        assert str(err.value) == message
        assert (tmp_path / "graph.jsonl").read_bytes() == before
    # A name of exactly MAX_NAME_BYTES is accepted.
    assert graph.apply(tmp_path, entities=[{"id": "person:c", "name": "x" * 1024, "type": "person"}]) == 1


def test_graph_file_bytes_use_aliases_and_raw_utf8(tmp_path: Path) -> None:
    a = graph.EntityRow(id="person:a", name="José", type="person")
    b = graph.EntityRow(id="person:b", name="B", type="person")
    graph.apply(
        tmp_path, entities=[a, b], relations=[graph.relation("person:a", "knows", "person:b", ["c-1"])]
    )
    text = (tmp_path / "graph.jsonl").read_bytes().decode("utf-8")
    assert '"name":"José"' in text
    assert '"from":"person:a"' in text and "from_" not in text


def test_relation_attestations_are_the_union_of_every_plan(tmp_path: Path) -> None:
    a = graph.EntityRow(id="person:a", name="A", type="person")
    b = graph.EntityRow(id="person:b", name="B", type="person")
    graph.apply(
        tmp_path, entities=[a, b], relations=[graph.relation("person:a", "knows", "person:b", ["c-1"])]
    )
    assert graph.apply(tmp_path, relations=[graph.relation("person:a", "knows", "person:b", ["c-2"])]) == 1
    (rel,) = graph.load_graph(tmp_path).relations.values()
    assert rel.memories == ("c-1", "c-2")
