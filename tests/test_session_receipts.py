"""Retained-session receipts (PROFILE-12..16, PROFILE-18..22, REM-20, LIM-58, LIM-59, AMB-48) over
lookups the real ``automatic_lookup`` builds, and through a real BuJo store's ``session_receipts``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tempomem.recall.auto_block import HEADING, TurnGate, automatic_lookup
from tempomem.recall.owner_profile import PROFILE_HEADING, OwnerProfile
from tempomem.recall.search import Hit
from tempomem.recall.session_receipts import (
    MAX_CONVERSATIONS,
    MAX_FINGERPRINTS,
    PROFILE_CLEARED,
    SessionReceiptCache,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GATE = TurnGate(verified_owner=True, surface="web")
PROFILE = OwnerProfile(f"{PROFILE_HEADING}\n- I live in Lisbon.", ("- I live in Lisbon.",))


def hit(mid: str, text: str, score: float = 0.9) -> Hit:
    return Hit(
        id=mid,
        text=text,
        day="2026-11-30",
        recorded="2026-11-30T10:00:00.000Z",
        type="fact",
        status="open",
        score=score,
        mode="hybrid",
        source_session="web:other",
    )


class Backend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, query: str, *, limit: int = 8) -> list[Hit]:
        return list(self.hits)


def lookup(hits: list[Hit], profile: OwnerProfile | None = PROFILE) -> Any:
    return automatic_lookup(
        Backend(hits), "what do you remember about my home", now=NOW, tz=UTC, gate=GATE, profile=profile
    )


A, B = hit("m-a", "The owner lives in Lisbon near the river."), hit("m-b", "The owner lives in a flat.", 0.89)


def served(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith("- ")]


def test_PROFILE13_a_cold_turn_injects_everything() -> None:
    cache = SessionReceiptCache()
    first = lookup([A, B])
    inj = cache.prepare("c1", first, retained_session=False)
    assert inj.text == first.context_text and inj.cold and len(inj.pending) == 2


def test_PROFILE12_a_warm_turn_leaves_out_unchanged_served_lines() -> None:
    cache = SessionReceiptCache()
    cold = cache.prepare("c1", lookup([A]), retained_session=False)
    cache.confirm(cold, invocation_ok=True, retained=True)
    warm = cache.prepare("c1", lookup([A, B]), retained_session=True)
    assert PROFILE_HEADING not in warm.text  # unchanged profile: not sent again
    assert warm.text.startswith(HEADING) and len(served(warm.text)) == 1 and "a flat" in warm.text
    cache.confirm(warm, invocation_ok=True, retained=True)
    assert cache.prepare("c1", lookup([A, B]), retained_session=True).text == ""  # all held already


def test_PROFILE14_only_a_successful_retained_invocation_creates_receipts() -> None:
    cache = SessionReceiptCache()
    cold = cache.prepare("c1", lookup([A]), retained_session=False)
    cache.confirm(cold, invocation_ok=False, retained=True)  # the call failed
    cache.confirm(cold, invocation_ok=True, retained=False)  # the session was not kept
    assert len(cache) == 0  # preparation alone counts for nothing
    assert cache.prepare("c1", lookup([A]), retained_session=True).suppressed == "receipts_unknown"


def test_PROFILE15_isolated_turns_never_replace_shared_receipts() -> None:
    cache = SessionReceiptCache()
    cache.confirm(cache.prepare("c1", lookup([A]), retained_session=False), invocation_ok=True, retained=True)
    isolated = cache.prepare("c1", lookup([B], profile=None), retained_session=False)
    cache.confirm(isolated, invocation_ok=True, retained=True, isolated=True)
    warm = cache.prepare("c1", lookup([A, B]), retained_session=True)
    assert "a flat" in warm.text and "near the river" not in warm.text  # the shared receipts stand


def test_PROFILE16_REM20_a_write_between_prepare_and_confirm_keeps_pending_receipts(tmp_path: Path) -> None:
    from tests.conftest import make_store

    store = make_store(tmp_path / "mem", None, mode="bujo", llm={"provider": "ollama", "model": "m"})
    cache = store.session_receipts
    assert store.session_receipts is cache  # one cache per store, in memory only
    inj = cache.prepare("c1", lookup([A]), retained_session=False)
    store.remember("The owner's flat has a balcony.", conversation_id="web:c1")
    cache.confirm(inj, invocation_ok=True, retained=True)
    assert cache.prepare("c1", lookup([A]), retained_session=True).text == ""
    store.close()


def test_PROFILE18_PROFILE20_bounded_lru_and_lost_knowledge_suppresses_until_reseed() -> None:
    cache = SessionReceiptCache()
    for i in range(MAX_CONVERSATIONS + 1):
        cache.confirm(
            cache.prepare(f"c{i}", lookup([A]), retained_session=False), invocation_ok=True, retained=True
        )
    assert len(cache) == MAX_CONVERSATIONS == 256
    evicted = cache.prepare("c0", lookup([A, B]), retained_session=True)  # the least recently used went
    assert (evicted.text, evicted.suppressed) == ("", "receipts_unknown")
    assert cache.prepare("c1", lookup([A]), retained_session=True).suppressed is None
    reseed = cache.prepare("c0", lookup([A, B]), retained_session=False)
    assert reseed.text  # a cold reseed injects again and re-establishes receipts
    cache.confirm(reseed, invocation_ok=True, retained=True)
    assert cache.prepare("c0", lookup([A, B]), retained_session=True).suppressed is None


def test_PROFILE19_reset_and_dispose_forget() -> None:
    cache = SessionReceiptCache()
    cache.confirm(cache.prepare("c1", lookup([A]), retained_session=False), invocation_ok=True, retained=True)
    cache.reset("c1")
    assert cache.prepare("c1", lookup([A]), retained_session=True).suppressed == "receipts_unknown"
    cache.confirm(cache.prepare("c2", lookup([A]), retained_session=False), invocation_ok=True, retained=True)
    cache.dispose()
    assert len(cache) == 0


def test_PROFILE21_a_full_set_suppresses_warm_injection_and_evicts_nothing() -> None:
    cache = SessionReceiptCache(max_fingerprints=2)
    cache.confirm(
        cache.prepare("c1", lookup([A, B]), retained_session=False), invocation_ok=True, retained=True
    )
    new = hit("m-c", "The owner lives on the third floor.", 0.88)
    full = cache.prepare("c1", lookup([A, B, new]), retained_session=True)
    assert (full.text, full.suppressed) == ("", "receipts_full")
    assert MAX_FINGERPRINTS == 256
    partly = SessionReceiptCache(max_fingerprints=2)
    partly.confirm(
        partly.prepare("c1", lookup([A]), retained_session=False), invocation_ok=True, retained=True
    )
    some = partly.prepare("c1", lookup([A, B, new]), retained_session=True)
    assert len(served(some.text)) == 1 and len(some.pending) == 1  # fills the set, never beyond


def test_PROFILE22_a_changed_or_ended_profile_is_sent_once() -> None:
    cache = SessionReceiptCache()
    cache.confirm(cache.prepare("c1", lookup([A]), retained_session=False), invocation_ok=True, retained=True)
    moved = OwnerProfile(f"{PROFILE_HEADING}\n- I live in Porto.", ("- I live in Porto.",))
    changed = cache.prepare("c1", lookup([A], profile=moved), retained_session=True)
    assert changed.text == moved.text
    cache.confirm(changed, invocation_ok=True, retained=True)
    assert cache.prepare("c1", lookup([A], profile=moved), retained_session=True).text == ""
    ended = cache.prepare("c1", lookup([A], profile=None), retained_session=True)
    assert ended.text == PROFILE_CLEARED
    cache.confirm(ended, invocation_ok=True, retained=True)
    assert cache.prepare("c1", lookup([A], profile=None), retained_session=True).text == ""  # never repeated


def test_receipts_hold_no_memory_text() -> None:
    cache = SessionReceiptCache()
    inj = cache.prepare("c1", lookup([A]), retained_session=False)
    cache.confirm(inj, invocation_ok=True, retained=True)
    held = repr(cache._by_conversation)
    assert "Lisbon" not in held and "river" not in held and all(len(d) == 64 for d in inj.pending)


def _two_sections(cards: str, block: str) -> Any:
    """A lookup whose person cards and block are the given texts (the receipts read only the texts)."""
    from dataclasses import replace

    from tempomem.recall.auto_block import AutoBlock
    from tempomem.recall.person_card import PersonCards

    base = lookup([], profile=None)
    return replace(
        base,
        cards=PersonCards(cards, len(cards.encode())),
        block=AutoBlock(text=block, byte_size=len(block.encode()), line_ids=[]),
    )


def test_PROFILE21_the_fingerprint_room_is_shared_by_every_section() -> None:
    """Receipts count across sections: with room for 3, a cold turn of 2 + 2 lines establishes 3; the
    same line under another heading is another receipt; a warm turn fills only what room is left."""
    cards = "Cards\n\nMorgan:\n- a\n- same"
    block = "Block\n\n- same\n- b"
    cache = SessionReceiptCache(max_fingerprints=3)
    cold = cache.prepare("c1", _two_sections(cards, block), retained_session=False)
    assert cold.cold and len(cold.pending) == 3
    cache.confirm(cold, invocation_ok=True, retained=True)
    warm = cache.prepare("c1", _two_sections(cards, block), retained_session=True)
    assert warm.suppressed == "receipts_full" and warm.text == ""
    roomy = SessionReceiptCache(max_fingerprints=10)
    first = roomy.prepare("c1", _two_sections(cards, "Block\n\n- same"), retained_session=False)
    assert len(first.pending) == 3  # "same" under Cards and under Block: two receipts
    roomy.confirm(first, invocation_ok=True, retained=True)
    later = roomy.prepare("c1", _two_sections(cards + "\n- c", block), retained_session=True)
    assert later.text == "Cards\n\nMorgan:\n- c\n\nBlock\n\n- b" and len(later.pending) == 2


def test_PROFILE20_PROFILE21_a_suppressed_warm_turn_is_empty_in_every_field() -> None:
    from tempomem.recall.session_receipts import Injection

    cache = SessionReceiptCache(max_fingerprints=1)
    assert cache.prepare("c9", lookup([A]), retained_session=True) == Injection(
        "c9", "", False, suppressed="receipts_unknown"
    )
    cold = cache.prepare("c9", lookup([A]), retained_session=False)
    cache.confirm(cold, invocation_ok=True, retained=True)
    assert cache.prepare("c9", lookup([A]), retained_session=True) == Injection(
        "c9", "", False, suppressed="receipts_full"
    )
