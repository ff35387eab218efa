"""The optional BuJo owner profile (PROFILE-01..11, PROFILE-24/25, CLI-17, LIM-57).

The selection rule over hand-made curated lines (real ``Bullet`` values), then a real BuJo store: daily
Markdown written with the real writer, the real index, ``automatic_context_sync`` and the CLI.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tempomem.cli import main
from tempomem.recall.auto_block import TurnGate, automatic_lookup
from tempomem.recall.owner_profile import PROFILE_HEADING, owner_profile
from tempomem.storage.limits import PROFILE_MAX_CODE_POINTS
from tempomem.storage.markdown import Bullet, append_bullets
from tests.conftest import make_store
from tests.helpers.config_files import bujo_config_file
from tests.helpers.labelled_graph import SECRET_SESSION, line

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY = "2026-11-30"


def statement(text: str, **kw: Any) -> Bullet:
    """A user-sourced line on an owner turn: the coarse owner fact (AMB-27)."""
    label = {
        "kind": "fact",
        "scope": "agent",
        "key": "owner:statement",
        "value": text,
        "attribution": "owner",
    }
    kw.setdefault("attr", "owner")
    return _line(text, [label], **kw)


def _line(text: str, labels: list[dict[str, Any]], **kw: Any) -> Bullet:
    entities = kw.pop("entities", ())
    bullet = line(text, labels, "x:placeholder", **kw)
    return Bullet(**{**bullet.__dict__, "entities": tuple(entities)})


def preference(text: str, **kw: Any) -> Bullet:
    label = {
        "kind": "preference",
        "scope": "agent",
        "key": "preference:stated",
        "value": text,
        "attribution": "owner",
    }
    return _line(text, [label], type="preference", attr="owner", **kw)


def fact(key: str, value: Any, **kw: Any) -> Bullet:
    label = {"kind": "fact", "scope": "agent", "key": key, "value": value, "attribution": "owner"}
    return _line(f"{key} is {value}", [label], attr="owner", **kw)


def profile(bullets: list[Bullet], **kw: Any) -> str:
    return owner_profile([(DAY, b) for b in bullets], now=NOW, tz=UTC, **kw).text


def at(day: str) -> str:
    return f"{day}T10:00:00.000Z"


def test_PROFILE03_owner_facts_and_agent_preferences_newest_first() -> None:
    text = profile(
        [
            statement("I live in Lisbon.", recorded=at("2026-11-01")),
            preference("I prefer green tea.", recorded=at("2026-11-20")),
            fact("owner:home town", "Porto", recorded=at("2026-10-01")),
        ]
    )
    assert text == "\n".join(
        [PROFILE_HEADING, "- I prefer green tea.", "- I live in Lisbon.", "- home town: Porto"]
    )


def test_PROFILE03_what_never_feeds_it() -> None:
    assistant = {
        "kind": "fact",
        "scope": "agent",
        "key": "owner:statement",
        "value": "x",
        "attribution": "assistant",
    }
    user_pref = {
        "kind": "preference",
        "scope": "user:owner",
        "key": "k",
        "value": "v",
        "attribution": "owner",
    }
    about_ana = {
        "kind": "fact",
        "scope": "agent",
        "key": "home town",
        "value": "Faro",
        "attribution": "owner",
    }
    lesson = {"kind": "lesson", "scope": "agent", "key": "k", "value": "v", "attribution": "owner"}
    bullets = [
        _line("assistant noted", [assistant]),
        _line("user-scope preference", [user_pref]),
        _line("Ana grew up in Faro.", [about_ana], entities=("person:ana",)),  # about Ana, not the owner
        _line("a lesson", [lesson]),
        _line("no labels at all", []),
    ]
    assert profile(bullets) == ""  # PROFILE-09: no qualifying label, no profile


def test_PROFILE04_PROFILE25_INTENT23_only_current_open_undated_non_episode_lines() -> None:
    kept = statement("I work from home.")
    bullets = [
        kept,
        statement("I am training for a marathon.", status="done"),
        statement("I will call the bank.", due="2026-12-20"),  # a dated intention, intentExpiry or not
        statement("We went to Rome.", type="event"),  # an episode
        statement("I lived in Faro.", id="c-gone", status="invalidated"),
        statement("My visa is valid.", valid_to="2026-11-30"),  # ended before the host's day (PROFILE-06)
        statement("My badge works.", valid_to="2026-12-01"),  # inclusive through the local day
    ]
    text = profile(bullets, superseded_ids={"c-gone"})
    assert text.splitlines()[1:] == ["- I work from home.", "- My badge works."]


def test_PROFILE04_conflicting_values_leave_every_source_out() -> None:
    bullets = [
        fact("owner:employer", "Acme", recorded=at("2026-11-01")),
        fact("owner:employer", "Globex", recorded=at("2026-11-02")),
        fact("owner:city", "Lisbon"),
        statement("I like hiking."),
        statement("I like chess."),  # statements are entries, never one slot
    ]
    text = profile(bullets)
    assert "employer" not in text and "- city: Lisbon" in text
    assert "- I like hiking." in text and "- I like chess." in text


def test_PROFILE05_PROFILE08_whole_entries_within_600_code_points_and_max_bytes() -> None:
    bullets = [
        statement(f"Fact number {i:02d}: " + "é" * 40, recorded=at(f"2026-11-{i:02d}")) for i in range(1, 29)
    ]
    text = profile(bullets)
    assert len(text) <= PROFILE_MAX_CODE_POINTS < len(text) + 60  # full up to the last whole entry
    assert all(x.startswith("- Fact number ") and x.endswith("é" * 40) for x in text.splitlines()[1:])
    assert text.splitlines()[1].startswith("- Fact number 28")  # newest first
    small = profile(bullets, max_bytes=300)
    assert len(small.encode()) <= 300 and len(small.splitlines()) >= 2
    assert profile(bullets, max_bytes=40) == ""  # not even one whole entry fits


def test_PROFILE05_same_date_orders_by_source_id() -> None:
    bullets = [statement("second", id="c-0002"), statement("first", id="c-0001")]
    assert profile(bullets).splitlines()[1:] == ["- first", "- second"]


def test_PROFILE02_only_allowed_owner_turns_and_PROFILE24_off_is_byte_identical() -> None:
    prof = owner_profile([(DAY, statement("I live in Lisbon."))], now=NOW, tz=UTC)

    class Backend:
        def search(self, query: str, *, limit: int = 8) -> list:
            return []

    def ctx(gate: TurnGate, p: Any) -> str:
        return automatic_lookup(
            Backend(), "where should we eat tonight?", now=NOW, tz=UTC, gate=gate, profile=p
        ).context_text

    web = TurnGate(verified_owner=True, surface="web")
    assert ctx(web, prof).startswith(PROFILE_HEADING)
    for gate in (
        TurnGate(verified_owner=True, surface="telegram"),
        TurnGate(verified_owner=False, surface="web"),
        TurnGate(verified_owner=True, surface="web", process_job_wake=True),
    ):
        assert ctx(gate, prof) == ctx(gate, None)
        assert PROFILE_HEADING not in ctx(gate, prof)
    assert (
        ctx(web, None)
        == automatic_lookup(Backend(), "where should we eat tonight?", now=NOW, tz=UTC, gate=web).context_text
    )


def test_PROFILE11_a_failing_backend_keeps_the_profile() -> None:
    prof = owner_profile([(DAY, statement("I live in Lisbon."))], now=NOW, tz=UTC)

    class Broken:
        def search(self, query: str, *, limit: int = 8) -> list:
            raise OSError("embedder down")

    lookup = automatic_lookup(
        Broken(),
        "what about dinner",
        now=NOW,
        tz=UTC,
        gate=TurnGate(verified_owner=True, surface="web"),
        profile=prof,
    )
    assert lookup.context_text == prof.text and lookup.block.suppressed == "backend_unavailable"


def store_with_profile(tmp_path: Path, *, enabled: bool, max_bytes: int | None = None) -> Any:
    root = tmp_path / "mem"
    (root / "daily").mkdir(mode=0o700, parents=True)
    append_bullets(
        root / "daily" / f"{DAY}.md",
        DAY,
        [
            statement("I live in Lisbon.", recorded=at("2026-11-01")),
            preference("I prefer tea.", recorded=at("2026-11-02")),
        ],
    )
    extra: dict[str, Any] = {"profile": {"enabled": enabled}}
    if max_bytes is not None:
        extra["maxBytes"] = max_bytes
    store = make_store(root, None, mode="bujo", llm={"provider": "ollama", "model": "m"}, **extra)
    store.rebuild()
    return store


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_PROFILE01_PROFILE10_a_real_store_injects_it_only_when_enabled(tmp_path: Path) -> None:
    on = store_with_profile(tmp_path / "on", enabled=True)
    before = files(on.root)
    assert on.profile_sync().text and files(on.root) == before  # PROFILE-10: no new file, store or field
    lookup = on.automatic_context_sync("what should I drink with dinner", verified_owner=True, surface="tui")
    assert lookup.context_text.startswith(f"{PROFILE_HEADING}\n- I prefer tea.\n- I live in Lisbon.")
    assert SECRET_SESSION not in lookup.context_text and "c-" not in lookup.profile.text
    assert (
        on.automatic_context_sync("what should I drink", verified_owner=True, surface="telegram").profile.text
        == ""
    )
    off = store_with_profile(tmp_path / "off", enabled=False)
    assert (
        PROFILE_HEADING
        not in off.automatic_context_sync("what should I drink", verified_owner=True).context_text
    )
    assert off.profile_sync().text == on.profile_sync().text  # the rule does not depend on the switch
    on.close()
    off.close()


def test_PROFILE08_the_profile_respects_memory_max_bytes(tmp_path: Path) -> None:
    store = store_with_profile(tmp_path, enabled=True, max_bytes=90)
    text = store.automatic_context_sync("what should I drink", verified_owner=True).profile.text
    assert text and len(text.encode()) <= 90 and text.count("\n- ") == 1
    store.close()


def test_PROFILE07_CLI17_the_cli_prints_the_same_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_with_profile(tmp_path, enabled=False)
    expected = store.profile_sync()
    store.close()
    config = bujo_config_file(tmp_path / "bujo.json", store.root)
    assert main(["--config", str(config), "profile", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "enabled": False,
        "entries": list(expected.entries),
        "code_points": len(expected.text),
        "bytes": expected.byte_size,
    }
    assert main(["--config", str(config), "profile"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(expected.text) and "not injected" in out


def test_PROFILE03_who_the_fact_is_about_and_who_said_it() -> None:
    """A label's subject decides who a fact is about; without one, an ``owner:`` key or a line naming
    nobody; without its own attribution, the line's. A ``preference:`` key shows its bare name."""

    def labelled(text: str, entities: tuple[str, ...], attr: str = "owner", **label: Any) -> Bullet:
        return _line(text, [{"kind": "fact", "scope": "agent", **label}], entities=entities, attr=attr)

    bullets = [
        labelled("a", ("person:ana",), key="pet", value="cat", subject="owner", attribution="owner"),
        labelled("b", (), key="owner:car", value="red", subject="person:ana", attribution="owner"),
        labelled("c", ("person:ana",), key="owner:bike", value="blue", attribution="owner"),
        labelled("d", (), key="shoe size", value="42", attribution="owner"),
        labelled("e", (), key="hat", value="none"),  # the line's attribution: the owner's
        labelled("f", (), key="scarf", value="wool", attr="assistant"),
        _line("g", [{"kind": "preference", "scope": "agent", "key": "preference:tea", "value": "green"}]),
        _line("h", [{"kind": "fact", "scope": "agent", "key": "owner:x", "attribution": "owner"}]),
        _line("i", [{"kind": "fact", "scope": "agent", "key": 7, "value": "v", "attribution": "owner"}]),
    ]
    assert sorted(profile(bullets).splitlines()[1:]) == [
        "- bike: blue",
        "- hat: none",
        "- pet: cat",
        "- shoe size: 42",
        "- tea: green",
    ]


def test_PROFILE05_a_repeated_entry_is_shown_once_and_the_rest_still_follow() -> None:
    bullets = [
        statement("I like chess.", id="c-0001"),
        statement("I like chess.", id="c-0002"),
        statement("I like tea.", id="c-0003"),
    ]
    assert profile(bullets).splitlines()[1:] == ["- I like chess.", "- I like tea."]


def test_PROFILE08_a_profile_of_exactly_the_bounds_is_kept_whole() -> None:
    room = PROFILE_MAX_CODE_POINTS - len(PROFILE_HEADING) - len("\n- ")
    exact = profile([statement("x" * room)])
    assert len(exact) == PROFILE_MAX_CODE_POINTS
    assert profile([statement("x" * (room + 1))]) == ""
    small = statement("I like tea.")
    size = len(f"{PROFILE_HEADING}\n- I like tea.".encode())
    assert profile([small], max_bytes=size) != "" and profile([small], max_bytes=size - 1) == ""
    result = owner_profile([(DAY, small)], now=NOW, tz=UTC)
    assert result.entries == ("- I like tea.",)
