"""Canonical Markdown format (AMB-03, PROV-07, PROV-13, PROV-15, PROV-21, PROV-22, AMB-55)."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempomem.storage.limits import SOURCE_SESSION_MAX_BYTES
from tempomem.storage.markdown import (
    SIGNIFIERS,
    Bullet,
    MarkdownDocument,
    MarkdownFormatError,
    RawLine,
    append_bullets,
    decode_session,
    encode_session,
    iter_bullets,
    new_document,
    parse_document,
    read_document,
    serialize_bullet,
    serialize_document,
)

TS = "2026-12-03T05:30:00.000Z"
META = "id=a1 type=note status=open recorded=2026-12-03T05:30:00.000Z"


def bullet(id: str = "a1", text: str = "Buy milk", **kw: object) -> Bullet:
    fields: dict[str, object] = {"signifier": "–", "type": "note", "status": "open", "recorded": TS}
    fields.update(kw)
    return Bullet(text=text, id=id, **fields)  # type: ignore[arg-type]


# --- hypothesis strategies -------------------------------------------------------------------------

_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=_BREAKS)
_line_text = st.text(_chars, min_size=1, max_size=40).filter(lambda t: "<!--" not in t and "-->" not in t)
_value = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)  # values may hold anything
_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}\Z")
_sessions = st.one_of(
    st.none(),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.sampled_from(["web:thread 7#2026-12-03", "100%", "unknown", "é" * 256, "é" * 257, "a" * 513]),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=520, max_size=600),
)

bullets = st.builds(
    Bullet,
    signifier=st.sampled_from(SIGNIFIERS),
    text=_line_text,
    id=_ids,
    type=st.sampled_from(["note", "event", "task", "fact", "preference", "lesson", "observation"]),
    status=st.sampled_from(["open", "done", "scheduled", "migrated", "dropped", "invalidated"]),
    recorded=st.just(TS),
    due=st.none() | _value,
    valid_from=st.none() | _value,
    valid_to=st.none() | _value,
    labels=st.none() | _value,
    entities=st.lists(_value, max_size=3).map(tuple),
    src=st.none() | st.sampled_from(["user", "assistant", "tool", "document"]),
    attr=st.none() | st.sampled_from(["owner", "assistant", "document"]),
    replaceable=st.booleans(),
    insight=st.booleans(),
    source_session=_sessions,
)
# Raw lines as they appear in day files; "<!--mem" is excluded because such a line could be a bullet.
raw_lines = st.one_of(
    st.sampled_from(["", "# 2026-12-03", "## Notes", "- plain item", "- – no metadata", "  indented"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=30),
).filter(lambda t: "<!--mem" not in t)
documents = st.builds(
    MarkdownDocument, st.lists(st.one_of(bullets, raw_lines.map(RawLine)), max_size=8), st.booleans()
)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_serialized_documents_round_trip_byte_for_byte(doc: MarkdownDocument) -> None:
    text = serialize_document(doc)
    parsed = parse_document(text)
    assert serialize_document(parsed) == text
    assert parsed.bullets() == doc.bullets()
    # Only a trailing blank line of a file without a final newline is indistinguishable from none.
    if doc.trailing_newline or not doc.items or doc.items[-1] != RawLine(""):
        assert parsed.items == doc.items


@settings(max_examples=300, deadline=None)
@given(bullets)
def test_bullet_metadata_is_canonical(b: Bullet) -> None:
    head, meta, end = serialize_bullet(b).split("\n")
    assert end == "" and head == f"- {b.signifier} {b.text}"
    assert meta.startswith("  <!--mem id=") and meta.endswith("-->")
    tokens = meta[len("  <!--mem ") : -len("-->")].split(" ")
    keys = [t.split("=", 1)[0] for t in tokens]
    assert keys[:4] == ["id", "type", "status", "recorded"] and keys[-1] == "source_session"
    assert len(keys) == len(set(keys))
    assert "-->" not in meta[:-3] and "<" not in meta[4:]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(raw_lines, st.sampled_from([f"- – x <!--mem {META}-->", f"  <!--mem {META}-->",
                                                       "- [x] y", "  <!--mem id=a1-->"])), max_size=8),
       st.booleans())  # fmt: skip
def test_parse_never_raises_and_normalisation_is_stable(lines: list[str], newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if newline else "")
    once = serialize_document(parse_document(text))
    assert serialize_document(parse_document(once)) == once
    if "<!--mem" not in text:
        assert once == text  # nothing bullet-like: every byte kept verbatim


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parse_any_text_never_raises(text: str) -> None:
    parse_document(text)


# --- format details ----------------------------------------------------------------------------------


def test_exact_two_line_form_with_all_keys() -> None:
    b = bullet(
        signifier="[ ]",
        text="Call Ana",
        type="task",
        due="2026-12-05",
        valid_from="2026-12-01T00:00:00.000+02:00",
        valid_to=TS,
        labels="a b=c",
        entities=("person:ana", "x,y"),
        src="user",
        attr="owner",
        replaceable=True,
        insight=True,
        source_session="web:t 1",
    )
    assert serialize_bullet(b) == (
        "- [ ] Call Ana\n"
        "  <!--mem id=a1 type=task status=open recorded=2026-12-03T05:30:00.000Z due=2026-12-05 "
        "valid_from=2026-12-01T00:00:00.000+02:00 valid_to=2026-12-03T05:30:00.000Z labels=a%20b%3Dc "
        "entities=person:ana,x%2Cy src=user attr=owner replaceable=1 insight=1 "
        "source_session=web%3At%201-->\n"
    )
    assert parse_document(serialize_bullet(b)).items == [b]


def test_new_document_and_trailing_newline_preserved() -> None:
    assert serialize_document(new_document("2026-12-03")) == "# 2026-12-03\n\n"
    for text in [
        "",
        "\n",
        "# d",
        "# d\n",
        "# d\n\n\n",
        "x\r\ny",
        "- – a\n  <!--mem " + META + " source_session=s-->",
    ]:
        assert serialize_document(parse_document(text)) == text
    with pytest.raises(MarkdownFormatError):
        new_document("2026-02-30")


def test_legacy_one_line_bullet_parses_and_normalises() -> None:
    legacy = f"# 2026-12-03\n\n- – Buy milk <!--mem {META} src=user-->\nprose\n"
    doc = parse_document(legacy)
    assert doc.bullets() == [bullet(src="user")]
    assert doc.bullets()[0].source_session is None  # written before PROV-07 existed: unknown
    assert serialize_document(doc) == (
        f"# 2026-12-03\n\n- – Buy milk\n  <!--mem {META} src=user source_session=unknown-->\nprose\n"
    )


def test_plain_and_malformed_lines_stay_raw() -> None:
    text = (
        "- just a list item\n"
        "- – no id\n  <!--mem type=note status=open recorded=x source_session=unknown-->\n"
        f"- – dup key\n  <!--mem {META} type=fact-->\n"
        f"- – unknown key\n  <!--mem {META} color=red-->\n"
        f"- – bad status\n  <!--mem {META.replace('open', 'maybe')}-->\n"
        f"- – bad flag\n  <!--mem {META} insight=yes-->\n"
        f"- – bad utf8\n  <!--mem {META} labels=%FF-->\n"
        f"- * bad signifier\n  <!--mem {META}-->\n"
        f"  <!--mem {META}-->\n"  # orphan metadata line
    )
    doc = parse_document(text)
    assert doc.bullets() == []
    assert all(isinstance(item, RawLine) for item in doc.items)
    assert serialize_document(doc) == text


@pytest.mark.parametrize(
    "session",
    [
        "",  # missing value
        "unknown",
        "a%2",  # truncated escape
        "a%zz",  # not hex
        "%FF%FE",  # not UTF-8
        "a b",  # raw space cannot appear, but a hand edit could
        "%C3%A9" * 257,  # decodes to 514 bytes
    ],
)
def test_malformed_or_unstorable_session_reads_unknown(session: str) -> None:
    assert decode_session(session) is None
    doc = parse_document(f"- – Buy milk\n  <!--mem {META} source_session={session}-->\n")
    assert [b.source_session for b in doc.bullets()] in ([None], [])  # "a b" breaks the token list
    if session != "a b":
        assert doc.bullets() == [bullet()]  # still a bullet: stays eligible for recall (PROV-15)


def test_duplicated_or_missing_session_is_unknown() -> None:
    dup = parse_document(f"- – Buy milk\n  <!--mem {META} source_session=s1 source_session=s1-->\n")
    missing = parse_document(f"- – Buy milk\n  <!--mem {META}-->\n")
    assert dup.bullets() == missing.bullets() == [bullet(source_session=None)]


def test_session_encoding_limits() -> None:
    at_limit = "é" * (SOURCE_SESSION_MAX_BYTES // 2)
    over = at_limit + "a"
    assert encode_session(None) == encode_session(over) == "unknown"
    assert decode_session(encode_session(at_limit)) == at_limit
    assert encode_session("web:t 7#x%") == "web%3At%207%23x%25"
    assert encode_session("a-b._~") == "a-b._~"  # unreserved characters kept (RFC 3986)
    assert decode_session(encode_session("unknown")) == "unknown"  # a real id, not the marker
    assert bullet(source_session=over).source_session is None  # PROV-13: unknown in index too
    assert "source_session=unknown-->" in serialize_bullet(bullet(source_session=over))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"text": "two\nlines"}, "text must be one non-empty line"),
        ({"text": "cr\rline"}, "text must be one non-empty line"),
        ({"text": "ends -->"}, "text must not open or close an HTML comment"),
        ({"text": "opens <!-- here"}, "text must not open or close an HTML comment"),
        ({"text": ""}, "text must be one non-empty line"),
        ({"id": "-leading-dash"}, "invalid id '-leading-dash'"),
        ({"id": "has space"}, "invalid id 'has space'"),
        ({"id": "x" * 129}, f"invalid id {'x' * 129!r}"),
        ({"signifier": "*"}, "unknown signifier '*'"),
        ({"status": "maybe"}, "unknown status 'maybe'"),
        ({"src": "model"}, "unknown src 'model'"),
        ({"text": "lone \udc80 surrogate"}, "text is not valid UTF-8 text"),
        ({"recorded": ""}, "type and recorded are required"),
        ({"type": ""}, "type and recorded are required"),
        ({"attr": "robot"}, "unknown attr 'robot'"),
        ({"labels": "a\udc80"}, "labels is not valid UTF-8 text"),
        ({"entities": ("ok", "b\udc80")}, "entities is not valid UTF-8 text"),
    ],
)
def test_unserializable_bullets_raise_typed_error(kw: dict[str, str], message: str) -> None:
    with pytest.raises(MarkdownFormatError) as err:
        bullet(**kw)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_a_raw_line_with_a_line_break_is_refused_by_name() -> None:
    from tempomem.storage.markdown import RawLine

    with pytest.raises(MarkdownFormatError) as err:
        RawLine("one\ntwo")
    assert str(err.value) == "a raw line cannot contain a newline"


def test_serialize_rejects_tampered_raw_line() -> None:
    with pytest.raises(MarkdownFormatError):
        RawLine("a\nb")


# --- files ---------------------------------------------------------------------------------------------


def test_append_creates_private_file_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "mem" / "daily" / "2026-12-03.md"
    assert append_bullets(path, "2026-12-03", [bullet("a1"), bullet("a2", "Second"), bullet("a1")]) == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    assert before.startswith(b"# 2026-12-03\n\n- \xe2\x80\x93 Buy milk\n  <!--mem id=a1 ")
    assert append_bullets(path, "2026-12-03", [bullet("a2", "changed text"), bullet("a1")]) == 0
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime  # PROV-21
    assert [b.id for b in read_document(path).bullets()] == ["a1", "a2"]


def test_append_nothing_to_missing_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "daily" / "2026-12-03.md"
    assert append_bullets(path, "2026-12-03", []) == 0
    assert not path.exists()


def test_append_rewrites_whole_file_normalising_legacy(tmp_path: Path) -> None:
    path = tmp_path / "2026-12-03.md"
    original = f"# 2026-12-03\n\n- – Buy milk <!--mem {META}-->\n".encode() + b"\xff prose"
    path.write_bytes(original)
    os.chmod(path, 0o600)
    assert append_bullets(path, "2026-12-03", [bullet("a1")]) == 0
    assert path.read_bytes() == original  # not rewritten: legacy line stays as it was (PROV-21)
    assert append_bullets(path, "2026-12-03", [bullet("b2", "New")]) == 1
    assert path.read_bytes() == (
        b"# 2026-12-03\n\n- \xe2\x80\x93 Buy milk\n"
        + f"  <!--mem {META} source_session=unknown-->\n".encode()
        + b"\xff prose\n"  # undecodable byte survives the rewrite
        + serialize_bullet(bullet("b2", "New")).encode()
    )


def test_read_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_document(tmp_path / "nope.md")


def test_iter_bullets_date_order_and_skips_non_day_files(tmp_path: Path) -> None:
    daily = tmp_path / "daily"
    append_bullets(daily / "2026-12-10.md", "2026-12-10", [bullet("c1"), bullet("c2")])
    append_bullets(daily / "2026-01-02.md", "2026-01-02", [bullet("b1")])
    append_bullets(daily / "2025-12-31.md", "2025-12-31", [bullet("a1")])
    for junk in ["notes.md", "2026-02-30.md", "2026-12-11.md.bak", ".2026-12-12.md.tmp-1", "2026-1-1.md"]:
        (daily / junk).write_text(f"- – x\n  <!--mem {META.replace('a1', 'junk')}-->\n")
    append_bullets(tmp_path / "audit" / "2026-12-01.md", "2026-12-01", [bullet("z1")])
    got = [(day, b.id) for day, b in iter_bullets(tmp_path)]
    assert got == [("2025-12-31", "a1"), ("2026-01-02", "b1"), ("2026-12-10", "c1"), ("2026-12-10", "c2")]
    assert [b.id for _, b in iter_bullets(tmp_path, "audit")] == ["z1"]
    assert list(iter_bullets(tmp_path, "missing")) == []


def test_document_helpers() -> None:
    doc = parse_document(serialize_document(MarkdownDocument([RawLine("# d"), bullet("a1"), bullet("b2")])))
    assert [b.id for b in doc.bullets()] == ["a1", "b2"] and doc.ids() == {"a1", "b2"}
    assert dataclasses.replace(bullet(), insight=True) != bullet()


def test_a_day_file_for_a_day_that_is_not_one_is_refused_by_name() -> None:
    from tempomem.storage.markdown import new_document

    assert serialize_document(new_document("2026-12-01")).startswith("# 2026-12-01\n")
    with pytest.raises(MarkdownFormatError) as err:
        new_document("2026-13-01")
    assert str(err.value) == "invalid day '2026-13-01', expected YYYY-MM-DD"


def test_entities_are_kept_as_a_tuple() -> None:
    assert bullet(entities=["person:ana", "place:porto"]).entities == ("person:ana", "place:porto")
