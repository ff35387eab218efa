"""Remember (REM-01..REM-19, PROV-05/12/18, AMB-25/26/52): real day files, real sidecar and graph files,
and a real MemoryIndex with the local MiniLM embedder under tmp_path."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tempomem.recall.embedding import LocalMiniLMEmbedder
from tempomem.recall.index import MemoryIndex
from tempomem.storage import graph, replay_sidecar
from tempomem.storage.fsio import exclusive_lock
from tempomem.storage.markdown import Bullet, append_bullets, iter_bullets, read_document
from tempomem.storage.remember import RememberRejected, RememberResult, remember, remember_id
from tempomem.storage.replay_sidecar import SIDECAR_NAME, SidecarError, SupersedeInfo
from tempomem.storage.store_ref import STORE_LOCK

NOW = dt.datetime(2026, 3, 4, 12, 0, 0, 123000, tzinfo=dt.UTC)
DAY = "2026-03-04"
REC = "2026-03-04T12:00:00.123Z"


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "memory"
    path.mkdir(mode=0o700)
    return path


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under root with its bytes (files) and mode: 'nothing written' means equal snapshots."""
    out: dict[str, tuple[bytes | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            out[str(path.relative_to(root))] = (data, st.st_mode)
    return out


def day_bullets(root: Path) -> list[Bullet]:
    return [b for _day, b in iter_bullets(root)]


def bujo(root: Path, minilm: LocalMiniLMEmbedder, text: str, **kwargs: Any) -> RememberResult:
    kwargs.setdefault("conversation_id", "conv-1")
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("index", MemoryIndex(root, minilm))
    return remember(root, tier="bujo", text=text, **kwargs)


def captured(bid: str, text: str, type_: str = "note", **kw: Any) -> Bullet:
    return Bullet(
        signifier="o" if type_ == "event" else "[ ]" if type_ == "task" else "–",
        text=text,
        id=bid,
        type=type_,
        status=kw.pop("status", "open"),
        recorded="2026-03-01T09:00:00.000Z",
        src=kw.pop("src", "user"),
        source_session=kw.pop("source_session", "capture-conv"),
        **kw,
    )


# -- write, recall, idempotence ------------------------------------------------------------------------------


def test_remember_is_recallable_immediately(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    index = MemoryIndex(root, minilm)
    result = bujo(root, minilm, "Alice's sister Maria moved to Lisbon in 2025.", index=index)
    assert result == RememberResult(
        status="written", id=remember_id("Alice's sister Maria moved to Lisbon in 2025."), day=DAY
    )
    assert result.id.startswith("r-")
    doc = read_document(root / "daily" / f"{DAY}.md")
    [bullet] = doc.bullets()
    assert bullet.text == "Alice's sister Maria moved to Lisbon in 2025."
    assert (bullet.recorded, bullet.type, bullet.status, bullet.source_session) == (
        REC,
        "fact",
        "open",
        "conv-1",
    )
    assert bullet.attr is None and not bullet.replaceable  # text-only: no assistant attribution claim
    hits = index.search("Where did Maria move?")
    assert hits and hits[0].id == result.id
    assert hits[0].source_session == "conv-1"
    # A fresh index object over the same root (another process) sees it too.
    assert MemoryIndex(root, minilm).search("Lisbon sister")[0].id == result.id


def test_lite_tier_indexes_lexically(root: Path) -> None:
    result = remember(
        root,
        tier="lite",
        text="The boiler code is in the blue binder",
        conversation_id="c",
        now=NOW,
        index=MemoryIndex(root, None),
    )
    assert result.status == "written"
    assert MemoryIndex(root, None).search("blue binder")[0].id == result.id


def test_exact_repeat_is_idempotent(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    first = bujo(root, minilm, "Café opens at 7 on Sundays")
    before = snapshot(root)
    # Same text after NFC and outer-whitespace normalisation, another conversation, another day.
    later = NOW + dt.timedelta(days=3)
    again = bujo(root, minilm, "  Cafe\u0301 opens at 7 on Sundays ", conversation_id="conv-2", now=later)
    assert again == RememberResult(status="duplicate", id=first.id, day=DAY)
    assert {k: v for k, v in snapshot(root).items() if not k.startswith("index")} == {
        k: v for k, v in before.items() if not k.startswith("index")
    }
    assert len(day_bullets(root)) == 1
    assert not (root / "daily" / "2026-03-07.md").exists()


def test_day_is_the_utc_day_of_now(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    late_evening = dt.datetime(2026, 3, 4, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    result = bujo(root, minilm, "Bob runs every Thursday", now=late_evening, index=None)
    assert result.day == "2026-03-05"
    assert day_bullets(root)[0].recorded == "2026-03-05T04:30:00.000Z"
    with pytest.raises(ValueError):
        bujo(root, minilm, "Naive clocks are refused", now=dt.datetime(2026, 3, 4), index=None)


def test_missing_index_row_is_completed_not_duplicated(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    index = MemoryIndex(root, minilm)
    bujo(root, minilm, "The team offsite is in Porto", index=index)  # an active generation exists
    # A crash after the Markdown write, before indexing (REM-15).
    partial = bujo(root, minilm, "Carol's dog is named Pixel", index=None, conversation_id="conv-A")
    assert partial.status == "written"
    assert all(h.id != partial.id for h in index.search("Carol dog Pixel"))
    retry = bujo(root, minilm, "Carol's dog is named Pixel", index=index, conversation_id="conv-B")
    assert retry == RememberResult(status="completed_index", id=partial.id, day=DAY)
    assert len(day_bullets(root)) == 2
    hit = next(h for h in index.search("What is Carol's dog called?") if h.id == partial.id)
    # REM-18 / PROV-12: the retry from another conversation keeps the original session everywhere.
    assert hit.source_session == "conv-A"
    assert next(b for b in day_bullets(root) if b.id == partial.id).source_session == "conv-A"
    assert bujo(root, minilm, "Carol's dog is named Pixel", index=index).status == "duplicate"


def test_missing_index_generation_is_completed(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    result = bujo(root, minilm, "Dana's birthday is 12 May", index=None)
    assert not (root / "index").exists()
    again = bujo(root, minilm, "Dana's birthday is 12 May")
    assert again.status == "completed_index"
    assert MemoryIndex(root, minilm).search("When is Dana's birthday?")[0].id == result.id


def test_an_index_of_another_embedding_is_rebuilt_and_reported_completed(
    root: Path, minilm: LocalMiniLMEmbedder
) -> None:
    """A repeat whose upsert found the active generation built for another embedding (here lexical only)
    rebuilt it: the vectors were missing, so the line's index entry was completed, not a duplicate."""
    first = bujo(root, minilm, "Erin's train leaves at nine", index=MemoryIndex(root, None))
    lexical = MemoryIndex(root, None).active_generation()
    again = bujo(root, minilm, "Erin's train leaves at nine")
    assert again.status == "completed_index" and again.id == first.id
    assert MemoryIndex(root, minilm).active_generation() != lexical
    assert bujo(root, minilm, "Erin's train leaves at nine").status == "duplicate"


def test_legacy_line_is_not_backfilled(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    text = "Olga's flat is on the 5th floor"
    legacy = Bullet(signifier="–", text=text, id=remember_id(text), type="fact", status="open", recorded=REC)
    append_bullets(root / "daily" / f"{DAY}.md", DAY, [legacy])
    before = (root / "daily" / f"{DAY}.md").read_bytes()
    result = bujo(root, minilm, text, conversation_id="conv-new")
    assert result.status == "completed_index"
    assert (root / "daily" / f"{DAY}.md").read_bytes() == before  # PROV-18, PROV-21
    hit = next(
        h for h in MemoryIndex(root, minilm).search("Which floor is Olga's flat on?") if h.id == result.id
    )
    assert hit.source_session is None


def test_unknown_or_unstorable_session_is_unknown(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    bujo(root, minilm, "Eve likes jazz", conversation_id=None, index=None)
    bujo(root, minilm, "Frank likes rock", conversation_id="x" * 513, index=None)
    bujo(root, minilm, "Gina likes folk", conversation_id="web:thread/42 ä", index=None)
    sessions = {b.text: b.source_session for b in day_bullets(root)}
    assert sessions == {
        "Eve likes jazz": None,
        "Frank likes rock": None,
        "Gina likes folk": "web:thread/42 ä",
    }
    assert "source_session=web%3Athread%2F42%20%C3%A4-->" in (root / "daily" / f"{DAY}.md").read_text()


def test_write_holds_the_store_lock(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            bujo(root, minilm, "Hank parks on level 3", index=None)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)
        done.set()

    with exclusive_lock(root / STORE_LOCK):
        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.3)
        assert not done.is_set()
        assert not (root / "daily").exists()
    worker.join(10)
    assert done.is_set() and not errors
    assert [b.text for b in day_bullets(root)] == ["Hank parks on level 3"]


# -- rejections write nothing (REM-16, AMB-25, AMB-26, AMB-52) -----------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "My AWS key is AKIAIOSFODNN7EXAMPLE",
        "The OpenAI key is sk-abcdefghijklmnopqrstuvwx",
        "password: hunter2hunter2",
        "use ghp_" + "a" * 36 + " for the bot",
        "slack xoxb-1234-abcd",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "-----BEGIN OPENSSH PRIVATE KEY----- abc",
    ],
)
def test_credential_is_rejected_and_nothing_is_written(
    root: Path, minilm: LocalMiniLMEmbedder, text: str
) -> None:
    bujo(root, minilm, "An earlier harmless fact about tea")
    before = snapshot(root)
    with pytest.raises(RememberRejected) as err:
        bujo(root, minilm, text)
    assert err.value.reason == "credential_rejected"
    assert text not in str(err.value)
    assert snapshot(root) == before


def test_credential_on_an_empty_root_creates_nothing(root: Path) -> None:
    with pytest.raises(RememberRejected) as err:
        remember(root, tier="lite", text="token=abcdefgh", conversation_id="c", now=NOW, index=None)
    assert err.value.reason == "credential_rejected"
    assert snapshot(root) == {}


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "empty"),
        ("two\nlines", "control"),
        ("hidden \u202e override", "bidi"),
        ("a <!-- comment", "html_comment"),
        ("- looks like a bullet", "markdown_prefix"),
        ("## heading", "markdown_prefix"),
        ("x" * 1025, "too_long"),
    ],
)
def test_unsafe_text_is_rejected(root: Path, text: str, detail: str) -> None:
    with pytest.raises(RememberRejected) as err:
        remember(root, tier="journal", text=text, conversation_id="c", now=NOW, index=None)
    assert (err.value.reason, err.value.detail) == ("unsafe_text", detail)
    assert snapshot(root) == {}


@pytest.mark.parametrize("tier", ["lite", "journal"])
@pytest.mark.parametrize(
    "extra",
    [{"about": "person:alice"}, {"supersedes": "c-note"}, {"replaceable": True}],
    ids=["about", "supersedes", "replaceable"],
)
def test_text_only_tiers_reject_enhanced_arguments(root: Path, tier: Any, extra: dict[str, Any]) -> None:
    with pytest.raises(RememberRejected) as err:
        remember(
            root, tier=tier, text="Ivy drinks oat milk", conversation_id="c", now=NOW, index=None, **extra
        )
    assert err.value.reason == "unsupported_on_tier"
    assert snapshot(root) == {}
    # The same text alone is accepted on that tier (REM-10).
    ok = remember(root, tier=tier, text="Ivy drinks oat milk", conversation_id="c", now=NOW, index=None)
    assert ok.status == "written"


# -- about (REM-05, GRAPH-15) --------------------------------------------------------------------------------


def seed_graph(root: Path) -> None:
    graph.apply(
        root,
        [
            {"id": "person:alice", "name": "Alice", "type": "person", "memories": ["c-1"]},
            {"id": "org:acme", "name": "Acme", "type": "organization", "memories": ["c-1"]},
        ],
    )


@pytest.mark.parametrize(
    ("about", "outcome"),
    [
        ("person:alice", "written"),
        ("person:bob", "unknown_person"),
        ("org:acme", "not_a_person"),
        ("Alice", "unknown_person"),  # a display name is not an id
        ("person alice", "invalid_reference"),
    ],
)
def test_about_links_only_an_existing_person(
    root: Path, minilm: LocalMiniLMEmbedder, about: str, outcome: str
) -> None:
    seed_graph(root)
    bujo(root, minilm, "Unrelated earlier line", index=None)
    before = snapshot(root)
    graph_before = (root / "graph.jsonl").read_bytes()
    if outcome == "written":
        result = bujo(root, minilm, "Alice is allergic to peanuts", about=about)
        line = next(b for b in day_bullets(root) if b.id == result.id)
        assert line.entities == ("person:alice",)
        assert (line.attr, line.src, line.replaceable) == ("assistant", "assistant", False)  # REM-08
        hit = MemoryIndex(root, minilm).search("Alice peanut allergy")[0]
        assert hit.id == result.id and hit.entities == ("person:alice",) and hit.attr == "assistant"
    else:
        with pytest.raises(RememberRejected) as err:
            bujo(root, minilm, "Alice is allergic to peanuts", about=about)
        assert err.value.reason == outcome
        assert snapshot(root) == before
    # Remember never creates or changes a person (GRAPH-15).
    assert (root / "graph.jsonl").read_bytes() == graph_before


def test_about_without_a_graph_is_unknown(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    with pytest.raises(RememberRejected) as err:
        bujo(root, minilm, "Alice plays chess", about="person:alice", index=None)
    assert err.value.reason == "unknown_person"
    assert not (root / "graph.jsonl").exists() and not (root / "daily").exists()


# -- supersedes (REM-06, REM-07, REM-11, REM-13) -------------------------------------------------------------


def seed_lines(root: Path, minilm: LocalMiniLMEmbedder) -> dict[str, str]:
    append_bullets(
        root / "daily" / "2026-03-01.md",
        "2026-03-01",
        [
            captured("c-note", "The printer on floor 2 is broken"),
            captured("c-event", "Standup moved to 10:00", type_="event"),
            captured("c-fact", "Owner's blood type is O+", type_="fact"),
            captured("c-pref", "Owner prefers window seats", type_="preference"),
            captured("c-lesson", "Always book trains early", type_="lesson"),
            captured("c-owner", "Owner said the car is blue", attr="owner"),
            captured("c-labelled", "Owner likes green tea", labels="fact:drink=tea"),
            captured("c-task", "Buy milk", type_="task"),
            captured("c-dropped", "Old plan for Friday", status="dropped"),
            captured("c-invalid", "Meeting room is B12", status="invalidated"),
            captured("c-forgotten", "A migrated-away note"),
            captured("c-taken", "Lunch is at noon"),
            captured("c-ended", "Parking is free on Fridays"),
        ],
    )
    text_only = bujo(root, minilm, "Kim's phone number ends in 42", index=None).id
    enhanced = bujo(root, minilm, "A grey cat visits the garden", replaceable=True, index=None).id
    auth = {"kind": "capture", "digest": "ef" * 32}
    replay_sidecar.apply_delta(
        root,
        [
            {
                "id": "sup-seed",
                "kind": "supersede",
                "from": "c-taken",
                "to": "c-note",
                "at": REC,
                "authority": auth,
            },
            {
                "id": "ter-seed",
                "kind": "terminal",
                "from": "c-forgotten",
                "to": "forgotten",
                "at": REC,
                "authority": auth,
            },
            {
                "id": "lif-seed",
                "kind": "lifecycle",
                "from": "c-ended",
                "to": "superseded",
                "at": REC,
                "authority": auth,
            },
            # A lifecycle entry that keeps a line current does not end it.
            {
                "id": "lif-current",
                "kind": "lifecycle",
                "from": "c-event",
                "to": "current",
                "at": REC,
                "authority": auth,
            },
        ],
    )
    return {"r-text-only": text_only, "r-enhanced": enhanced}


@pytest.mark.parametrize(
    ("target", "outcome"),
    [
        ("c-note", None),
        ("c-event", None),
        ("r-enhanced", None),
        ("c-fact", "protected_target"),
        ("c-pref", "protected_target"),
        ("c-lesson", "protected_target"),
        ("c-owner", "protected_target"),
        ("c-labelled", "protected_target"),
        ("c-task", "protected_target"),
        ("r-text-only", "protected_target"),
        ("c-dropped", "not_current"),
        ("c-invalid", "not_current"),
        ("c-forgotten", "not_current"),
        ("c-taken", "not_current"),
        ("c-ended", "not_current"),
        ("c-missing", "unknown_target"),
        ("not an id", "invalid_reference"),
    ],
)
def test_supersedes_rules(root: Path, minilm: LocalMiniLMEmbedder, target: str, outcome: str | None) -> None:
    ids = seed_lines(root, minilm)
    target_id = ids.get(target, target)
    old = next((b for b in day_bullets(root) if b.id == target_id), None)
    before = snapshot(root)
    text = "The printer on floor 2 was repaired on 4 March"
    if outcome is not None:
        with pytest.raises(RememberRejected) as err:
            bujo(root, minilm, text, supersedes=target_id)
        assert err.value.reason == outcome
        assert snapshot(root) == before
        return
    result = bujo(root, minilm, text, supersedes=target_id, conversation_id="conv-S")
    assert (result.status, result.superseded) == ("written", target_id)
    new = next(b for b in day_bullets(root) if b.id == result.id)
    assert (new.attr, new.src, new.source_session) == ("assistant", "assistant", "conv-S")  # REM-08
    # The old line stays in Markdown as history, byte-identical in its own file (PROV-08).
    assert old is not None and next(b for b in day_bullets(root) if b.id == target_id) == old
    info = replay_sidecar.superseded(root)[target_id]
    assert info == SupersedeInfo(new_id=result.id, at=REC)
    entries = replay_sidecar.load(root).entries
    entry = next(e for e in entries if e.from_ == target_id and e.kind != "lifecycle")
    assert entry.kind == "supersede" and entry.authority.kind == "remember"
    # The edge is run-derived: its id and the authority's digest name the two lines and the new one's
    # instant, so a replay or an adoption of the same write yields the same entry (RPL-01).
    assert (entry.to, entry.id) == (result.id, replay_sidecar.entry_id("supersede", target_id, result.id))
    assert entry.authority.digest == replay_sidecar.authority_digest(
        "remember", target_id, result.id, new.recorded
    )
    # Replay converges: same edge, same bytes.
    sidecar = (root / SIDECAR_NAME).read_bytes()
    assert bujo(root, minilm, text, supersedes=target_id).status == "duplicate"
    assert (root / SIDECAR_NAME).read_bytes() == sidecar
    # The target is no longer current: a second replacement is refused.
    with pytest.raises(RememberRejected) as err:
        bujo(root, minilm, "The printer on floor 2 is fine again", supersedes=target_id)
    assert err.value.reason == "not_current"


def test_sidecar_never_holds_memory_text(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    append_bullets(
        root / "daily" / "2026-03-01.md", "2026-03-01", [captured("c-1", "Quartz harbour lanterns")]
    )
    first = bujo(root, minilm, "Zebra crossing outside the office was repainted", supersedes="c-1")
    bujo(root, minilm, "Zebra crossing repainted again, yellow this time", supersedes=first.id)
    assert len(replay_sidecar.superseded(root)) == 2
    data = (root / SIDECAR_NAME).read_bytes()
    texts = [b.text for b in day_bullets(root)]
    assert texts
    for text in texts:
        for word in text.split():
            if len(word) >= 4:
                assert word.encode() not in data, word
    for entry in replay_sidecar.load(root).entries:
        for value in (entry.id, entry.from_, entry.to, entry.at, entry.authority.digest):
            assert " " not in value


def test_replaceable_marker_survives_a_plain_repeat(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    first = bujo(root, minilm, "A red car is parked at gate 4", replaceable=True)
    line = next(b for b in day_bullets(root) if b.id == first.id)
    assert (line.replaceable, line.attr) == (True, "assistant")
    before = (root / "daily" / f"{DAY}.md").read_bytes()
    plain = bujo(root, minilm, "A red car is parked at gate 4")
    assert plain.status == "duplicate"  # REM-13
    assert (root / "daily" / f"{DAY}.md").read_bytes() == before
    # Still replaceable: a later change supersedes it (REM-11).
    later = bujo(root, minilm, "The red car left gate 4", supersedes=first.id)
    assert later.superseded == first.id


def test_plain_write_stays_protected_after_a_replaceable_repeat(
    root: Path, minilm: LocalMiniLMEmbedder
) -> None:
    plain = bujo(root, minilm, "Lena owns a bakery")
    assert bujo(root, minilm, "Lena owns a bakery", replaceable=True).status == "duplicate"
    assert not next(b for b in day_bullets(root) if b.id == plain.id).replaceable
    with pytest.raises(RememberRejected) as err:
        bujo(root, minilm, "Lena sold her bakery", supersedes=plain.id)
    assert err.value.reason == "protected_target"


def test_self_supersede_is_refused(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    text = "Mo parks at the back"
    bujo(root, minilm, text, replaceable=True, index=None)
    with pytest.raises(RememberRejected) as err:
        bujo(root, minilm, text, supersedes=remember_id(text), index=None)
    assert err.value.reason == "self_supersede"


def test_crash_before_the_sidecar_edge_is_completed_on_retry(
    root: Path, minilm: LocalMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_lines(root, minilm)
    real = replay_sidecar.apply_delta

    def crash(*_a: Any, **_k: Any) -> int:
        raise OSError("simulated crash")

    monkeypatch.setattr(replay_sidecar, "apply_delta", crash)
    text = "The printer on floor 2 now prints in colour"
    with pytest.raises(OSError):
        bujo(root, minilm, text, supersedes="c-note", conversation_id="conv-first")
    assert "c-note" not in replay_sidecar.superseded(root)
    monkeypatch.setattr(replay_sidecar, "apply_delta", real)
    retry = bujo(root, minilm, text, supersedes="c-note", conversation_id="conv-retry")
    assert retry.status == "completed_index" and retry.superseded == "c-note"
    assert replay_sidecar.superseded(root)["c-note"].new_id == retry.id
    assert next(b for b in day_bullets(root) if b.id == retry.id).source_session == "conv-first"
    assert sum(b.id == retry.id for b in day_bullets(root)) == 1


def test_unsafe_sidecar_fails_closed_before_any_write(root: Path, minilm: LocalMiniLMEmbedder) -> None:
    seed_lines(root, minilm)
    os.chmod(root / SIDECAR_NAME, 0o644)
    before = snapshot(root)
    with pytest.raises(SidecarError):
        bujo(root, minilm, "The printer on floor 2 is gone", supersedes="c-note")
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("👩\u200d💻 codes", None),  # a ZWJ sequence between two pictographs
        ("👩🏻\u200d💻 codes", None),  # after a skin-tone modifier (U+1F3FB)
        ("👩🏿\u200d💻 codes", None),  # after the last skin-tone modifier (U+1F3FF)
        ("❤\ufe0f\u200d🔥 hot", None),  # after an emoji presentation selector (U+FE0F)
        ("\U0001f3fc\u200da", "zero_width"),  # a modifier on one side only
        ("a\u200d👩", "zero_width"),
        ("x\u200dy", "zero_width"),
    ],
)
def test_zwj_is_allowed_only_inside_emoji_sequences(text: str, reason: str | None) -> None:
    """AMB-25: the zero-width joiner is text inside emoji and an invisible trick anywhere else."""
    from tempomem.storage.credentials import unsafe_characters

    assert unsafe_characters(text) == reason


def test_a_rejection_message_is_the_reason_and_its_detail() -> None:
    from tempomem.storage.remember import RememberRejected

    assert str(RememberRejected("unsafe_text")) == "unsafe_text"
    assert str(RememberRejected("unsafe_text", "control_character")) == "unsafe_text: control_character"
    assert RememberRejected("unsafe_text", "x").reason == "unsafe_text"


def test_CAP72_focus_and_only_never_touch_remember_or_the_host_audit(tmp_path: Path) -> None:
    """With ``capture.only: []`` (no automatic capture at all) and a focus, an explicit Remember still
    writes, and an admitted turn's compact host summary still reaches audit/."""
    from datetime import UTC, datetime

    from tempomem.storage.admission import admit_turn
    from tempomem.storage.projection import project
    from tempomem.storage.turn import CompletedTurn
    from tests.conftest import make_store

    llm = {"provider": "ollama", "model": "m"}
    store = make_store(tmp_path / "mem", None, mode="bujo", llm=llm, capture={"only": [], "focus": "travel"})
    written = store.remember("The owner's passport number ends in 42.", conversation_id="web:c1")
    assert written.status == "written"
    turn = CompletedTurn(
        run_id="r1",
        conversation_id="web:c1",
        speaker_kind="human-turn",
        user_text="I like tea.",
        final_answer="Noted: tea.",
        admitted_at=datetime(2026, 12, 1, 9, tzinfo=UTC),
    )
    result = admit_turn(
        store.intake, turn, tier="bujo", write_mode="capture", capture_cron=None, capture_webhook=None
    )
    assert result.intake_id is not None
    projected = project(store.root, store.intake.load_payload(result.intake_id))
    assert projected.folder == "audit" and projected.bullet.text == "Assistant: Noted: tea."
    store.close()


def test_remember_refusals_name_what_is_wrong_and_a_plain_line_names_no_source(
    root: Path, minilm: LocalMiniLMEmbedder
) -> None:
    """Each programming error of a caller is a typed error with its own message, and nothing is written;
    a plain text-only line carries no ``src`` (only an enhanced write is the assistant's, REM-08); the id
    is ``r-`` and the first 40 hex characters of the text's sha256 (REM-12)."""
    import datetime as dt
    import hashlib

    class NoOffset(dt.tzinfo):
        def utcoffset(self, _: object) -> None:
            return None

    before = snapshot(root)
    with pytest.raises(ValueError, match=r"^unknown tier 'diary'$"):
        remember(root, tier="diary", text="x", conversation_id="c", now=NOW, index=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^text must be a string$"):
        remember(root, tier="bujo", text=b"x", conversation_id="c", now=NOW, index=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^index belongs to another memory root$"):
        bujo(root, minilm, "A fact.", index=MemoryIndex(root.parent / "other", minilm))
    for naive in (dt.datetime(2026, 3, 4, 12, 0), dt.datetime(2026, 3, 4, 12, 0, tzinfo=NoOffset())):
        with pytest.raises(ValueError, match=r"^now must be timezone-aware$"):
            bujo(root, minilm, "A fact.", now=naive)
    assert snapshot(root) == before
    text = "The office plants are watered on Mondays."
    written = bujo(root, minilm, text)
    line = next(b for b in day_bullets(root) if b.id == written.id)
    assert line.src is None
    assert written.id == "r-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]
