"""The text guards (AMB-25, AMB-26) and the exact reason and content-free detail of every replay-sidecar
and graph.jsonl rejection (mutation survivors, #13).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tempomem.storage import graph, replay_sidecar
from tempomem.storage.credentials import contains_credential, unsafe_reason
from tempomem.storage.replay_sidecar import (
    SIDECAR_NAME,
    SidecarError,
    apply_delta,
    canonical_bytes,
    entry_id,
    load,
)
from tests.helpers.sidecar_entries import (
    AT,
    canonical_doc,
    raw_entry,
    sup,
    write_raw,
)

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


def test_a_delta_may_fill_the_sidecar_exactly_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RPL-05 on the write side: a delta whose merged document is exactly the byte bound is written;
    one byte over is refused with the measured size and nothing is written."""
    from tests.helpers.sidecar_entries import sup

    delta = [sup("c-old", "c-new")]
    size = len(replay_sidecar.canonical_bytes(replay_sidecar.merge(replay_sidecar.load(tmp_path), delta)[0]))
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", size - 1)
    with pytest.raises(SidecarError) as err:
        replay_sidecar.apply_delta(tmp_path, delta)
    assert (err.value.reason, err.value.detail) == ("too_large", f"{size} bytes")
    assert not (tmp_path / SIDECAR_NAME).exists()
    monkeypatch.setattr(replay_sidecar, "MAX_BYTES", size)
    assert replay_sidecar.apply_delta(tmp_path, delta) == 1
    assert len((tmp_path / SIDECAR_NAME).read_bytes()) == size


def test_an_entity_name_is_bounded_by_its_own_limit() -> None:
    """GRAPH-*: an entity name may be 1,024 UTF-8 bytes (graph.MAX_NAME_BYTES, the bound of a memory line
    too); a longer one is refused by name, without its text."""
    ok = graph.EntityRow(id="person:a", name="a" * graph.MAX_NAME_BYTES, type="person", memories=())
    assert len(ok.name) == graph.MAX_NAME_BYTES
    with pytest.raises(ValueError, match="unsafe name") as err:
        graph.EntityRow(id="person:a", name="a" * (graph.MAX_NAME_BYTES + 1), type="person", memories=())
    assert "aaaa" not in str(err.value)
