"""Automatic possibly-relevant block (AUTO-03..AUTO-29, PROV-01..04/16/17, AMB-14, AMB-59, AMB-60)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tempomem.recall.auto_block import (
    HEADING,
    BackgroundScopes,
    TurnGate,
    automatic_lookup,
    conversation_bucket,
    is_short_message,
    load_block,
    select_auto_block,
)
from tempomem.recall.guidance import BACKGROUND_MAX_BYTES, NO_BACKGROUND, labelled_background
from tempomem.recall.owner_profile import NO_PROFILE, OwnerProfile
from tempomem.recall.person_card import PERSON_CARD_MAX_BYTES, person_cards
from tempomem.recall.search import Hit
from tempomem.recall.tools import memory_recall
from tempomem.storage.limits import (
    AUTO_BLOCK_BUDGET_BYTES,
    AUTO_BLOCK_FLOOR,
    AUTO_BLOCK_LINES,
    AUTO_BLOCK_WINDOW,
    AUTO_CONTEXT_MAX_BYTES,
    AUTO_LINE_MAX_BYTES,
    SHORT_MESSAGE_CODE_POINTS,
)
from tests.helpers.labelled_graph import fact, line, write

NOW = datetime(2026, 7, 10, 12, 0, tzinfo=UTC)
OWNER = TurnGate(verified_owner=True, surface="web")
QUESTION = "What does Morgan like to drink these days?"
_N = 0


def hit(score: float, text: str | None = None, **kw: Any) -> Hit:
    global _N
    _N += 1
    data: dict[str, Any] = {
        "id": f"a{_N:04d}",
        "text": text or f"memory line {_N}",
        "day": "2026-05-01",
        "recorded": f"2026-05-01T10:{_N % 60:02d}:00.000Z",
        "type": "note",
        "status": "open",
        "score": score,
        "mode": "hybrid",
        "source_session": "web:other-thread-99",
    }
    data.update(kw)
    return Hit(**data)


def block(hits: list[Hit], **kw: Any) -> Any:
    kw.setdefault("gate", OWNER)
    kw.setdefault("owner_text", QUESTION)
    return select_auto_block(hits, now=NOW, tz=UTC, **kw)


def lines(b: Any) -> list[str]:
    return [ln for ln in b.text.splitlines()[2:] if ln.startswith("- ")]


def test_constants() -> None:
    assert (AUTO_BLOCK_FLOOR, AUTO_BLOCK_WINDOW, AUTO_BLOCK_LINES) == (0.62, 0.04, 3)
    assert (AUTO_BLOCK_BUDGET_BYTES, AUTO_LINE_MAX_BYTES, AUTO_CONTEXT_MAX_BYTES) == (1536, 360, 2560)
    assert SHORT_MESSAGE_CODE_POINTS == 16


def test_AUTO03_AUTO04_AUTO11_reference_rendering_exactly() -> None:
    old = hit(
        0.70, "Morgan joined the Maple book club.", status="invalidated", recorded="2026-03-01T09:00:00.000Z"
    )
    new = hit(0.68, "Morgan prefers green tea.", attr="owner", recorded="2026-05-01T09:00:00.000Z")
    b = block([old, new])
    assert b.text == (
        "## Memory (possibly relevant — may be unrelated; verify before relying)\n"
        "\n"
        "- – Morgan joined the Maple book club. (recorded 2026-03-01; superseded)\n"
        "- – Morgan prefers green tea. (recorded 2026-05-01; current; you said)"
    )
    assert b.byte_size == len(b.text.encode()) and b.line_ids == [old.id, new.id]


def test_AUTO06_floor_exactly_062_shows_and_below_shows_nothing() -> None:
    assert len(lines(block([hit(0.62)]))) == 1
    below = block([hit(0.6199)])
    assert below.text == "" and below.suppressed == "below_floor"


def test_AUTO07_window_exactly_004_included_beyond_excluded() -> None:
    b = block([hit(0.70, "best"), hit(0.66, "edge"), hit(0.6599, "out")])
    assert sorted(ln.split(" (")[0] for ln in lines(b)) == ["- – best", "- – edge"]


def test_AUTO08_three_lines_and_identical_text_once() -> None:
    hits = [hit(0.80, "same text"), hit(0.79, "same  text"), *[hit(0.78) for _ in range(4)]]
    b = block(hits)
    assert len(lines(b)) == 3
    assert sum("same text" in ln for ln in lines(b)) == 1


def test_AMB60_current_lines_take_the_slots_before_superseded_or_ended() -> None:
    sup1 = hit(0.80, "superseded one", status="invalidated")
    sup2 = hit(0.79, "ended one", valid_to="2026-07-01")
    cur = [hit(0.77, f"current {i}") for i in range(3)]
    b = block([sup1, sup2, *cur])
    assert sorted(b.line_ids) == sorted(c.id for c in cur)
    mixed = block([sup1, sup2, *cur[:2]])
    assert set(mixed.line_ids) == {cur[0].id, cur[1].id, sup1.id}


def test_AUTO11_display_order_is_oldest_first_not_by_score() -> None:
    newest = hit(0.80, "newest", recorded="2026-06-01T00:00:00.000Z")
    oldest = hit(0.78, "oldest", recorded="2026-01-01T00:00:00.000Z")
    middle = hit(0.79, "middle", recorded="2026-03-01T00:00:00.000+05:00")
    assert block([newest, middle, oldest]).line_ids == [oldest.id, middle.id, newest.id]


def test_AUTO10_AUTO12_ended_by_date_only_valid_to_before_local_day_and_event_due() -> None:
    b = block([hit(0.8, "lease", valid_to="2026-07-09"), hit(0.8, "party", type="event", due="2026-07-10")])
    rendered = "\n".join(lines(b))
    assert "- – lease (recorded 2026-05-01; ended 2026-07-09)" in rendered
    assert "- o party (recorded 2026-05-01; current)" in rendered  # today is not yet over


def test_AUTO09_tasks_never_show_a_live_marker() -> None:
    b = block(
        [
            hit(0.8, "Book flights", type="task", status="open"),
            hit(0.8, "Renew passport", type="task", status="done", valid_to="2026-06-01"),
        ]
    )
    text = b.text
    assert "[ ]" not in text
    assert "- – Book flights (recorded 2026-05-01; task/plan recorded)" in text
    assert "- – Renew passport (recorded 2026-05-01; ended 2026-06-01)" in text


def _labels(*attributions: str) -> str:
    return json.dumps(
        [
            {"kind": "fact", "scope": "agent", "key": f"k{i}", "value": "v", "attribution": a}
            for i, a in enumerate(attributions)
        ]
    )


@pytest.mark.parametrize(
    ("attr", "labels", "expected"),
    [
        ("owner", None, "you said"),
        ("assistant", _labels("assistant"), "assistant noted"),
        (None, _labels("document", "document"), "from a document"),
        ("owner", _labels("assistant"), None),
        (None, None, None),
    ],
)
def test_AUTO13_attribution_only_when_every_label_agrees(attr: Any, labels: Any, expected: Any) -> None:
    (line,) = lines(block([hit(0.8, "fact", attr=attr, labels=labels)]))
    assert line == f"- – fact (recorded 2026-05-01; current{'; ' + expected if expected else ''})"


def test_AUTO14_line_text_capped_at_360_bytes_on_a_utf8_boundary() -> None:
    exact = "a" * AUTO_LINE_MAX_BYTES
    (line,) = lines(block([hit(0.8, exact)]))
    assert f"- – {exact} (" in line
    long = "ż" * 200 + "a"  # 401 bytes; every character before the tail is 2 bytes
    (line,) = lines(block([hit(0.8, long)]))
    text_part = line[len("- – ") : line.rindex(" (recorded")]
    assert len(text_part.encode()) <= AUTO_LINE_MAX_BYTES and text_part.endswith("…")
    assert long.startswith(text_part[:-1]) and text_part[:-1] == "ż" * 178


def test_AUTO14_block_stays_within_1536_bytes() -> None:
    b = block([hit(0.8, "x" * 400), hit(0.8, "y" * 400), hit(0.8, "z" * 400)])
    assert len(lines(b)) == 3 and b.byte_size <= AUTO_BLOCK_BUDGET_BYTES


def test_AUTO14_AUTO15_line_that_does_not_fit_is_left_out_not_truncated() -> None:
    big1, big2, small = hit(0.80, "p" * 300), hit(0.79, "q" * 300), hit(0.78, "short one")
    used = AUTO_CONTEXT_MAX_BYTES - 520  # the person card / background already took the rest
    b = block([big1, big2, small], context_bytes_used=used)
    assert set(b.line_ids) == {big1.id, small.id}
    assert b.byte_size + used <= AUTO_CONTEXT_MAX_BYTES
    assert "q" * 10 not in b.text
    full = block([hit(0.8, "a" * 100)], context_bytes_used=AUTO_CONTEXT_MAX_BYTES - 50)
    assert full.text == "" and full.suppressed == "budget"


def test_AUTO17_short_message_gate_16_vs_17_code_points_after_nfc_and_trim() -> None:
    assert is_short_message("  " + "x" * 16 + "\n")
    assert not is_short_message("x" * 17)
    decomposed = "e\u0301" * 16  # 32 code points raw, 16 after NFC
    assert is_short_message(decomposed)
    assert block([hit(0.9)], owner_text="x" * 16).suppressed == "short_message"
    assert len(lines(block([hit(0.9)], owner_text="x" * 17))) == 1


def test_AUTO18_AUTO26_standalone_load_has_no_short_or_privacy_gate_and_no_rich_attribution() -> None:
    b = load_block([hit(0.9, "tea", attr="owner")], now=NOW, tz=UTC)
    assert lines(b) == ["- – tea (recorded 2026-05-01; current)"]


def test_AUTO19_AUTO27_lexical_results_show_nothing() -> None:
    assert block([hit(0.9, mode="lexical")]).suppressed == "lexical"
    assert load_block([hit(0.9, mode="lexical")], now=NOW, tz=UTC).text == ""


@pytest.mark.parametrize(
    "gate",
    [
        None,
        TurnGate(verified_owner=False, surface="web"),
        TurnGate(verified_owner=True, surface="telegram"),
        TurnGate(verified_owner=True, surface="cron"),
        TurnGate(verified_owner=True, surface="web", process_job_wake=True),
    ],
)
def test_AUTO20_AUTO21_AUTO22_HOST07_only_verified_owner_web_tui_acp(gate: Any) -> None:
    b = select_auto_block([hit(0.9)], now=NOW, tz=UTC, owner_text=QUESTION, gate=gate)
    assert b.text == "" and b.suppressed == "not_owner_turn"


@pytest.mark.parametrize("surface", ["web", "tui", "acp"])
def test_AUTO22_owner_surfaces_get_the_block(surface: str) -> None:
    assert block([hit(0.9)], gate=TurnGate(verified_owner=True, surface=surface)).text.startswith(HEADING)


def test_AMB59_bucket_suffix_removed() -> None:
    assert conversation_bucket("web:t1#2026-07-10") == "web:t1"
    assert conversation_bucket("web:t1") == "web:t1"
    assert conversation_bucket("web:t1#2026-07") == "web:t1#2026-07"


def test_AUTO28_PROV01_PROV02_same_conversation_excluded_before_scoring() -> None:
    own_earlier_bucket = hit(0.90, "status from this chat", source_session="web:t1#2026-07-01")
    other = hit(0.70, "other chat fact", source_session="web:t10")
    unknown = hit(0.69, "legacy fact", source_session=None)
    b = block([own_earlier_bucket, other, unknown], conversation_id="web:t1#2026-07-10")
    # without the filter 0.70 would be outside the 0.04 window of 0.90
    assert set(b.line_ids) == {other.id, unknown.id}
    assert "- – legacy fact (recorded 2026-05-01; current; source conversation unknown)" in b.text
    assert "web:t10" not in b.text  # PROV-17


def test_PROV04_load_follows_the_same_conversation_rule() -> None:
    own = hit(0.9, "own", source_session="tui:abc")
    assert load_block([own], now=NOW, tz=UTC, conversation_id="tui:abc").text == ""


def test_PROV03_explicit_recall_including_original_query_is_not_filtered() -> None:
    own = hit(0.9, "own", source_session="web:t1")
    result = memory_recall(object(), use_original_query=True, original_hits=[own], now=NOW, tz=UTC)  # type: ignore[arg-type]
    assert [h.id for h in result.hits] == [own.id]


def test_AUTO29_intent_expiry_excludes_dated_and_done_notes() -> None:
    dated, done, plain = (
        hit(0.9, "dated", due="2026-12-01"),
        hit(0.9, "done", status="done"),
        hit(0.9, "plain"),
    )
    assert block([dated, done, plain], intent_expiry=True).line_ids == [plain.id]
    assert len(block([dated, done, plain]).line_ids) == 3


def test_AUTO25_only_structured_conflicting_current_facts_add_a_note() -> None:
    def fact(v: str) -> str:
        item = {"kind": "fact", "scope": "agent", "subject": "person:morgan", "key": "other:employer"}
        return json.dumps([{**item, "value": v}])

    b = block(
        [
            hit(0.8, "Morgan works at Acme.", labels=fact("Acme")),
            hit(0.8, "Morgan works at Globex.", labels=fact("Globex")),
        ]
    )
    assert b.text.splitlines()[-1] == "Conflicting values: different current values for employer; weigh them."
    plain = block([hit(0.8, "Morgan works at Acme."), hit(0.8, "Morgan works at Globex.")])
    assert "Conflicting" not in plain.text


class Backend:
    def __init__(self, hits: list[Hit] | None = None, fail: bool = False) -> None:
        self.hits, self.fail, self.calls = hits or [], fail, []  # type: ignore[var-annotated]

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        self.calls.append(limit)
        if self.fail:
            raise OSError("index gone")
        return self.hits


def test_automatic_lookup_keeps_hits_for_original_query_even_when_gated() -> None:
    backend = Backend([hit(0.9)])
    looked = automatic_lookup(backend, "hi", now=NOW, tz=UTC, gate=OWNER)
    assert backend.calls == [50] and looked.block.suppressed == "short_message" and len(looked.hits) == 1
    failed = automatic_lookup(Backend(fail=True), QUESTION, now=NOW, tz=UTC, gate=OWNER)
    assert failed.block.suppressed == "backend_unavailable" and failed.hits == []


def test_integration_real_index_block_excludes_current_conversation(tmp_path: Path) -> None:
    from tempomem.recall.embedding import LocalMiniLMEmbedder
    from tempomem.recall.index import MemoryIndex
    from tempomem.storage.markdown import Bullet, append_bullets

    def b(i: int, text: str, session: str | None, recorded: str) -> Bullet:
        return Bullet(
            signifier="–",
            text=text,
            id=f"i{i}",
            type="note",
            status="open",
            recorded=recorded,
            source_session=session,
            attr="owner",
        )

    append_bullets(
        tmp_path / "daily" / "2026-05-01.md",
        "2026-05-01",
        [
            b(1, "Morgan prefers green tea in the morning.", "web:other", "2026-05-01T08:00:00.000Z"),
            b(
                2,
                "Morgan prefers green tea in the morning now.",
                "web:this#2026-07-10",
                "2026-05-01T09:00:00.000Z",
            ),
            b(3, "The quarterly tax filing is due in April.", "web:other", "2026-05-01T10:00:00.000Z"),
        ],
    )
    index = MemoryIndex(tmp_path, LocalMiniLMEmbedder())
    looked = automatic_lookup(
        index,
        "Morgan prefers green tea in the morning",
        now=NOW,
        tz=UTC,
        gate=OWNER,
        conversation_id="web:this#2026-07-11",
    )
    assert {h.id for h in looked.hits} >= {"i1", "i2"}  # the lookup itself is unfiltered
    assert looked.block.line_ids == ["i1"]
    assert looked.block.text == (
        f"{HEADING}\n\n- – Morgan prefers green tea in the morning. (recorded 2026-05-01; current; you said)"
    )


def test_PROV06_a_bare_thread_id_is_not_guessed_to_be_the_web_conversation() -> None:
    """The web conversation is ``web:<thread-id>`` as the host sends it; a line recorded under the bare
    thread id is another conversation, never aliased to it."""
    bare = hit(0.90, "recorded under the bare id", source_session="t1")
    own = hit(0.89, "recorded in this chat", source_session="web:t1")
    b = block([bare, own], conversation_id="web:t1")
    assert b.line_ids == [bare.id]


def test_POL03_the_same_tool_query_reuses_the_turns_automatic_lookup() -> None:
    class Counting:
        def __init__(self, hits: list[Hit]) -> None:
            self.hits, self.calls = hits, 0

        def search(self, query: str, *, limit: int = 8) -> list[Hit]:
            self.calls += 1
            return list(self.hits)

    backend = Counting([hit(0.9, "the ferry leaves at nine")])
    gate = TurnGate(verified_owner=True, surface="web")
    lookup = automatic_lookup(backend, "When does the ferry leave?", now=NOW, tz=UTC, gate=gate)
    assert backend.calls == 1 and lookup.query == "When does the ferry leave?"
    same = memory_recall(backend, query="  when does the FERRY leave? ", now=NOW, tz=UTC, turn_lookup=lookup)
    assert backend.calls == 1 and [h.id for h in same.hits] == [h.id for h in lookup.hits]
    memory_recall(backend, query="ferry price", now=NOW, tz=UTC, turn_lookup=lookup)
    assert backend.calls == 2  # a different tool query searches again
    failed = automatic_lookup(object(), "When does the ferry leave?", now=NOW, tz=UTC, gate=gate)  # type: ignore[arg-type]
    assert failed.query == ""  # a failed lookup is never reused
    memory_recall(backend, query="When does the ferry leave?", now=NOW, tz=UTC, turn_lookup=failed)
    assert backend.calls == 3


def test_HOST06_AUTO02_named_content_free_diagnostics() -> None:
    from tempomem.recall.auto_block import Diagnostic
    from tempomem.recall.owner_profile import PROFILE_HEADING

    gate = TurnGate(verified_owner=True, surface="web")
    found = automatic_lookup(
        Backend([hit(0.9, "the ferry leaves at nine")]),
        "when does the ferry leave",
        now=NOW,
        tz=UTC,
        gate=gate,
    )
    assert found.block.text
    assert found.diagnostics() == [
        Diagnostic("memory_recalled", "automatic", len(found.context_text.encode()))
    ]
    profile = OwnerProfile(f"{PROFILE_HEADING}\n- I live in Lisbon.", ("- I live in Lisbon.",))
    broken = automatic_lookup(
        object(),
        "when does the ferry leave",
        now=NOW,
        tz=UTC,
        gate=gate,  # type: ignore[arg-type]
        profile=profile,
    )
    assert broken.diagnostics() == [
        Diagnostic("memory_recall_unavailable", "automatic"),
        Diagnostic("memory_recalled", "automatic", len(profile.text.encode())),
        Diagnostic("turn_context", "profile", len(profile.text.encode())),
    ]
    lexical = automatic_lookup(
        Backend([hit(0.9, "the ferry", mode="lexical")]),
        "when does the ferry leave",
        now=NOW,
        tz=UTC,
        gate=gate,
    )
    assert lexical.diagnostics() == [Diagnostic("memory_recall_lexical_only", "automatic")]
    for d in [*found.diagnostics(), *broken.diagnostics()]:
        assert "ferry" not in repr(d) and "Lisbon" not in repr(d)


def test_POL04_the_tool_query_of_a_turn_uses_the_stores_one_index_and_no_second_embedding(
    tmp_path: Path,
) -> None:
    """POL-04: a turn's automatic lookup and the same MemoryRecall query share the store's one index
    handle, and the query is embedded once (the real embedder, counted). A different query embeds again.
    (The MCP server serves the tools from this same store and the worker's config file: there is no
    separate MCP configuration to maintain.)"""
    from tempomem.store import MemoryStore
    from tests.conftest import make_config

    store = MemoryStore(make_config(tmp_path / "mem", mode="journal"))
    store.remember("The ferry to Vigo leaves at nine.", conversation_id="web:t1")
    embedder = store.embedder
    assert embedder is not None
    embedded: list[int] = []
    real_embed = embedder.embed

    def counted(texts):  # the real embedder, counting its calls
        embedded.append(len(texts))
        return real_embed(texts)

    embedder.embed = counted  # type: ignore[method-assign]
    index = store.index
    lookup = store.automatic_context_sync(
        "When does the ferry to Vigo leave?", verified_owner=True, conversation_id="web:t1"
    )
    assert embedded == [1] and lookup.hits
    result = store.recall_sync("when does the ferry to vigo leave?", turn_lookup=lookup)
    assert embedded == [1] and [h.id for h in result.hits] == [h.id for h in lookup.hits]
    assert store.index is index  # no second handle
    store.recall_sync("ferry price", turn_lookup=lookup)
    assert embedded == [1, 1]
    store.close()


def test_REM20_REM21_a_remember_write_makes_the_turns_lookup_stale(tmp_path: Path) -> None:
    """REM-21: after a nonduplicate Remember write in the turn, useOriginalQuery is no longer available
    (REC-12's error); REM-20: the same question searches again and finds the new line instead of reusing
    the turn's cached lookup. A duplicate write changes nothing, so the lookup stays usable."""
    from tempomem.recall.tools import RecallInputError
    from tempomem.store import MemoryStore
    from tests.conftest import make_config

    store = MemoryStore(make_config(tmp_path / "mem", mode="journal"))
    first = store.remember("The ferry to Vigo leaves at nine.", conversation_id="web:t1")
    question = "When does the ferry to Vigo leave?"
    lookup = store.automatic_context_sync(question, verified_owner=True, conversation_id="web:t1")
    original = store.recall_sync(use_original_query=True, original_hits=lookup.hits, turn_lookup=lookup)
    assert [h.id for h in original.hits] == [first.id]

    again = store.remember("The ferry to Vigo leaves at nine.", conversation_id="web:t1", turn_lookup=lookup)
    assert again.status == "duplicate" and not lookup.stale
    assert store.recall_sync(use_original_query=True, original_hits=lookup.hits, turn_lookup=lookup).hits

    new = store.remember("The ferry to Vigo now leaves at ten.", conversation_id="web:t1", turn_lookup=lookup)
    assert new.status == "written" and lookup.written == [new.id]
    with pytest.raises(RecallInputError) as refused:
        store.recall_sync(use_original_query=True, original_hits=lookup.hits, turn_lookup=lookup)
    assert refused.value.code == "original_query_unavailable"
    searched = store.recall_sync(question, turn_lookup=lookup)
    assert new.id in {h.id for h in searched.hits}  # searched again: the cached lookup never had it
    assert new.id not in {h.id for h in lookup.hits}
    store.close()


def test_INTENT04_each_switch_rolls_back_on_its_own_and_no_switch_removes_a_line(tmp_path: Path) -> None:
    """INTENT-04: on one BuJo store, turning the read switch (``recall.intentExpiry``) off lets an older
    reading surface the dated and completed notes again; turning the capture switch
    (``capture.intentLifecycle``) off alone keeps the reads as they were; and no switch changes a byte of
    what is stored."""
    from tempomem.storage.markdown import Bullet, append_bullets
    from tempomem.store import MemoryStore
    from tests.conftest import make_config

    root = tmp_path / "mem"
    day = "2026-06-01"
    recorded = f"{day}T09:00:00.000Z"
    append_bullets(
        root / "daily" / f"{day}.md",
        day,
        [
            Bullet(signifier="–", text="Book the ferry to Vigo by June.", id="i-dated", type="note",
                   status="scheduled", recorded=recorded, due="2026-06-30", src="user", attr="owner"),
            Bullet(signifier="–", text="Renewed the ferry pass to Vigo.", id="i-done", type="note",
                   status="done", recorded=recorded, src="user", attr="owner"),
            Bullet(signifier="–", text="The ferry to Vigo leaves at nine.", id="i-plain", type="fact",
                   status="open", recorded=recorded, src="user", attr="owner"),
        ],
    )  # fmt: skip

    def shown(*, lifecycle: bool, expiry: bool) -> set[str]:
        store = MemoryStore(
            make_config(
                root, mode="bujo", capture={"intentLifecycle": lifecycle}, recall={"intentExpiry": expiry}
            )
        )
        try:
            if not (root / "index").exists():
                store.rebuild()
            lookup = store.automatic_context_sync(
                "the ferry to Vigo", verified_owner=True, conversation_id="web:other"
            )
            return set(lookup.block.line_ids)
        finally:
            store.close()

    stored = {p: p.read_bytes() for p in (root / "daily").iterdir()}
    both = shown(lifecycle=True, expiry=True)
    assert "i-plain" in both and not {"i-dated", "i-done"} & both
    assert shown(lifecycle=False, expiry=True) == both  # the capture switch alone leaves the reads
    assert {"i-dated", "i-done"} <= shown(lifecycle=True, expiry=False)  # the read switch rolls back
    assert {p: p.read_bytes() for p in (root / "daily").iterdir()} == stored


def test_AUTO11_AMB38_a_line_without_a_usable_instant_is_placed_by_its_day() -> None:
    """Oldest first by the recording instant in UTC; an instant without an offset or none at all counts
    as its day's 00:00 UTC, and an unreadable day as the earliest; ties by id."""
    zoned = hit(0.80, "zoned", recorded="2026-05-01T05:30:00.000+05:00")  # 2026-05-01T00:30Z
    naive = hit(0.80, "naive", recorded="2026-05-01T23:00:00", day="2026-05-02")  # → 2026-05-02T00:00Z
    bare = hit(0.79, "bare", recorded="", day="2026-05-01")  # → 2026-05-01T00:00Z
    assert block([naive, zoned, bare]).line_ids == [bare.id, zoned.id, naive.id]
    undated = hit(0.80, "undated", recorded="", day="someday")
    first, second = hit(0.79, "same a", recorded=""), hit(0.79, "same b", recorded="")
    assert block([first, second, undated]).line_ids == [undated.id, first.id, second.id]


def test_AUTO26_load_applies_the_callers_expiry_supersession_and_zone() -> None:
    """``load()`` is the same selector: intentExpiry, the known supersession edges and the host's zone
    reach it (a line valid through yesterday in UTC is still current where it is earlier)."""
    dated, plain = hit(0.9, "dated", due="2026-12-01"), hit(0.9, "plain")
    assert load_block([dated, plain], now=NOW, tz=UTC).line_ids == [dated.id, plain.id]
    assert load_block([dated, plain], now=NOW, tz=UTC, intent_expiry=True).line_ids == [plain.id]
    forgotten = hit(0.9, "forgotten", status="invalidated", id="z-forgot")
    assert load_block([forgotten, plain], now=NOW, tz=UTC, superseded_ids=set()).line_ids == [plain.id]
    edge = load_block([forgotten, plain], now=NOW, tz=UTC, superseded_ids={"z-forgot"})
    assert forgotten.id in edge.line_ids
    ends = hit(0.9, "ends", valid_to="2026-07-09")  # valid through the 9th, civil dates inclusive
    late = datetime(2026, 7, 10, 5, 0, tzinfo=UTC)  # 2026-07-09 19:00 in Honolulu
    honolulu = ZoneInfo("Pacific/Honolulu")
    assert "ended" not in load_block([ends], now=late, tz=honolulu).text
    assert "ended" in load_block([ends], now=late, tz=UTC).text


# --------------------------------------------------------------------------------------------------
# automatic_lookup composes the owner profile, person cards, labelled background and block: each part
# gets the turn's zone, supersession, intent expiry and conversation, and what the parts before it took
# (plus a separator each) comes off the automatic context before the next part is sized (GUIDE-15,
# AUTO-15, PROFILE-02).

KIRITIMATI = ZoneInfo("Pacific/Kiritimati")  # UTC+14: NOW (noon UTC on 07-10) is 07-11 there
SENDER = "web-owner-7"
CHAT = "web:thread-5"
TRIP = "What should I pack for the trip with Morgan next month, and what does Morgan need?"


def _lookup_store(root: Path) -> Any:
    at = "2026-07-01T10:00:00.000Z"
    return write(
        root,
        [
            line("Morgan lives in Lisbon.", [fact("home", "Lisbon")], recorded=at),
            line("Morgan's visa.", [fact("visa", "B1")], valid_to="2026-07-10", recorded=at),
            line("Morgan will call.", [fact("call", "Friday")], type="note", due="2026-07-01", recorded=at),
            line("Morgan lived in Porto.", [fact("old home", "Porto")], id="c-sup", recorded=at),
            line(
                "Morgan liked juice.", [fact("juice", "yes")], status="invalidated", id="c-gone", recorded=at
            ),
            *(line(f"Morgan fact {i}.", [fact(f"key {i:02d}", "v" * 60)], recorded=at) for i in range(14)),
        ],
    )  # fmt: skip


def _pref(hid: str, score: float, scope: str = "agent", **kw: Any) -> Hit:
    label = [{"kind": "preference", "scope": scope, "key": f"k-{hid}", "value": hid, "attribution": "owner"}]
    return hit(score, f"Preference {hid}.", id=hid, type="preference", labels=json.dumps(label), **kw)


def _fillers() -> list[Hit]:
    return [hit(0.70, f"filler {i}") for i in range(6)]


def _block_hits() -> list[Hit]:
    """For the block: lines that the zone, supersession, intent expiry or conversation change."""
    long = "Packing list detail " * 14
    return [
        hit(0.89, "Morgan's passport ends.", id="h-visa", valid_to="2026-07-10"),
        hit(0.89, "Morgan will phone.", id="h-note", due="2026-07-01"),
        hit(0.89, "Said in this chat.", id="h-chat", source_session=f"{CHAT}#2026-07-10"),
        hit(0.88, "Morgan moved.", id="h-sup"),
        hit(0.88, "Morgan forgot.", id="h-forgot", status="invalidated"),
        *(hit(0.87, f"{long}{i}", id=f"h-long{i}") for i in range(3)),
        *_fillers(),
    ]


def _scoped_hits() -> list[Hit]:
    """For the background: lines only the owner's sender id or the conversation put in scope."""
    return [
        _pref("g-agent", 0.90),
        _pref("g-user", 0.90, scope=f"user:{SENDER}"),
        _pref("g-chat", 0.90, scope=f"conversation:{CHAT}"),
        hit(0.88, "Packing list detail " * 12, id="h-block"),
        *_fillers(),
    ]


def _dated_hits() -> list[Hit]:
    """For the background: lines the zone, supersession or intent expiry take out."""
    return [
        _pref("g-agent", 0.90),
        _pref("g-ended", 0.90, valid_to="2026-07-10"),
        _pref("g-sup", 0.90),
        _pref("g-dated", 0.90, due="2026-07-01"),  # dated: out of the pool under intent expiry
        _pref("g-forgot", 0.90, status="invalidated"),  # no supersession edge: a forget
        *_fillers(),
    ]


def _turn(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "tz": KIRITIMATI, "conversation_id": CHAT, "superseded_ids": {"h-sup", "g-sup", "c-sup"},
        "intent_expiry": True, "background": BackgroundScopes(owner_sender=SENDER),
    }  # fmt: skip
    return {**args, **kw}


def _composed(reader: Any, hits: list[Hit], profile: Any, used: int, turn: dict[str, Any]) -> dict[str, Any]:
    """The parts as the documented order and budgets make them, from the parts' own functions."""
    common = {k: turn[k] for k in ("tz", "superseded_ids", "intent_expiry") if k in turn}
    if profile.text:
        used += profile.byte_size + 2
    cards = person_cards(
        TRIP, reader, now=NOW, budget=min(PERSON_CARD_MAX_BYTES, AUTO_CONTEXT_MAX_BYTES - used), **common
    )
    if cards.text:
        used += cards.byte_size + 2
    background = NO_BACKGROUND
    if turn.get("background") is not None:
        background = labelled_background(
            hits, now=NOW, owner_sender=turn["background"].owner_sender,
            conversation_id=turn.get("conversation_id"),
            budget=min(BACKGROUND_MAX_BYTES, AUTO_CONTEXT_MAX_BYTES - used), **common,
        )  # fmt: skip
    if background.text:
        used += background.byte_size + 2
    block = select_auto_block(
        hits, now=NOW, owner_text=TRIP, gate=OWNER, conversation_id=turn.get("conversation_id"),
        context_bytes_used=used, shown_elsewhere=background.line_ids, **common,
    )  # fmt: skip
    return {"cards": cards, "background": background, "block": block}


def _lookup(reader: Any, hits: list[Hit], profile: Any, turn: dict[str, Any], **kw: Any) -> dict[str, Any]:
    found = automatic_lookup(
        Backend(hits), TRIP, now=NOW, gate=OWNER, cards_from=reader, profile=profile, **turn, **kw
    )
    assert found.profile == profile and found.hits == hits
    return {"cards": found.cards, "background": found.background, "block": found.block}


def _assert_arguments_reach(
    reader: Any, hits: list[Hit], turn: dict[str, Any], reach: dict[str, Any]
) -> None:
    """The lookup equals the composition, and each argument changes each part it should reach: a part
    that did not get the argument would differ."""
    base = _composed(reader, hits, NO_PROFILE, 0, turn)
    assert _lookup(reader, hits, NO_PROFILE, turn) == base
    for key, (default, parts) in reach.items():
        other = _composed(reader, hits, NO_PROFILE, 0, {**turn, key: default})
        assert [p for p in parts if other[p] == base[p]] == [], key


def _assert_bytes_taken(reader: Any, hits: list[Hit], turn: dict[str, Any], used_range: range) -> int:
    """At every ``context_bytes_used`` where one byte changes a part, the lookup's parts are exactly the
    composed ones: each part took its bytes and one separator from what the next one gets."""
    profile = OwnerProfile("About the owner: " + "x" * 200)
    boundaries = 0
    for used in used_range:
        want = _composed(reader, hits, profile, used, turn)
        if want == _composed(reader, hits, profile, used - 1, turn):
            continue
        boundaries += 1
        assert _lookup(reader, hits, profile, turn, context_bytes_used=used) == want, used
    return boundaries


def test_GUIDE15_AUTO15_the_cards_and_block_get_the_turn_and_the_bytes_left(tmp_path: Path) -> None:
    reader, hits = _lookup_store(tmp_path), _block_hits()
    turn = _turn(background=None)
    _assert_arguments_reach(
        reader, hits, turn,
        {
            "tz": (UTC, ("cards", "block")),
            "superseded_ids": (None, ("cards", "block")),
            "intent_expiry": (False, ("cards", "block")),
            "conversation_id": (None, ("block",)),
        },
    )  # fmt: skip
    assert _assert_bytes_taken(reader, hits, turn, range(0, 2400, 7)) >= 4


def test_GUIDE06_GUIDE15_the_background_gets_the_scopes_and_takes_its_bytes(tmp_path: Path) -> None:
    reader, hits = _lookup_store(tmp_path), _scoped_hits()
    _assert_arguments_reach(
        reader, hits, _turn(),
        {"conversation_id": (None, ("background",))},
    )  # fmt: skip
    no_sender = _composed(reader, hits, NO_PROFILE, 0, _turn(background=BackgroundScopes()))
    assert no_sender["background"] != _composed(reader, hits, NO_PROFILE, 0, _turn())["background"]
    assert _assert_bytes_taken(reader, hits, _turn(), range(740, 800)) >= 1  # the block after it


def test_GUIDE16_the_background_gets_the_zone_supersession_and_intent_expiry(tmp_path: Path) -> None:
    reader, hits = _lookup_store(tmp_path), _dated_hits()
    _assert_arguments_reach(
        reader, hits, _turn(),
        {
            "tz": (UTC, ("background",)),
            "superseded_ids": (None, ("background",)),
            "intent_expiry": (False, ("background",)),
        },
    )  # fmt: skip


def test_AUTO15_PROFILE02_the_profile_alone_counts_with_its_separator_from_zero(tmp_path: Path) -> None:
    reader, hits, turn = _lookup_store(tmp_path), _block_hits(), _turn(background=None)
    found = 0
    for pad in range(300, 2300, 5):
        profile = OwnerProfile("About the owner: " + "x" * pad)
        want = _composed(reader, hits, profile, 0, turn)
        if want == _composed(reader, hits, profile, 1, turn):
            continue
        found += 1
        assert _lookup(reader, hits, profile, turn) == want, pad  # no context_bytes_used: it starts at 0
    assert found >= 1


def test_AUTO17_PROFILE11_an_empty_message_or_a_failing_backend_keeps_what_was_shown(tmp_path: Path) -> None:
    reader, profile = _lookup_store(tmp_path), OwnerProfile("About the owner: brief answers.")
    backend = Backend(_block_hits())
    empty = automatic_lookup(backend, "  \n", now=NOW, tz=UTC, gate=OWNER, cards_from=reader, profile=profile)
    assert backend.calls == [] and empty.hits == [] and empty.profile == profile
    assert empty.block.suppressed == "no_hits" and empty.block.text == ""
    failed = automatic_lookup(
        Backend(fail=True), TRIP, now=NOW, gate=OWNER, cards_from=reader, profile=profile, **_turn()
    )
    assert failed.block.suppressed == "backend_unavailable" and failed.profile == profile
    assert failed.cards == _composed(reader, [], profile, 0, _turn())["cards"] and failed.cards.text
