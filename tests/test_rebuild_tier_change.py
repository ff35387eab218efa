"""INTAKE-35: a rebuild into Lite or Journal is refused while a BuJo capture plan is retained, before any
source is modified. Real store files under tmp_path, no server (the store is never started)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tempomem.storage.admission import admit_turn
from tempomem.storage.fence import FENCE_FILE
from tempomem.storage.intake_records import RetainedPlanError
from tempomem.storage.turn import CompletedTurn
from tests.conftest import make_store
from tests.helpers.config_files import bujo_config_file

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def files(root: Path) -> dict[str, bytes]:
    """Every file but the liveness fence's empty lock file (the CLI takes the fence, CLI-12)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != FENCE_FILE
    }


def retained(root: Path) -> str:
    store = make_store(root, None, mode="bujo", llm={"provider": "ollama", "model": "m"})
    turn = CompletedTurn(
        run_id="run-1",
        conversation_id="web:c1",
        speaker_kind="human-turn",
        user_text="hello",
        final_answer="hi",
        admitted_at=T0,
    )
    result = admit_turn(
        store.intake, turn, tier="bujo", write_mode="capture", capture_cron=None, capture_webhook=None
    )
    assert result.intake_id is not None
    store.intake.save_plan(result.intake_id, b'{"plan":"opaque to this test"}', now=T0)
    store.close()  # its snapshot publisher writes from a thread: finish before the files are compared
    return result.intake_id


@pytest.mark.parametrize("tier", ["lite", "journal"])
def test_rebuild_into_lite_or_journal_is_refused_while_a_plan_is_retained(tmp_path: Path, tier: str) -> None:
    root = tmp_path / "mem"
    record = retained(root)
    before = files(root)
    store = make_store(root, None, mode=tier)
    with pytest.raises(RetainedPlanError) as err:
        store.rebuild()
    store.close()
    assert "1 intake record" in str(err.value) and record not in str(err.value)
    assert files(root) == before  # nothing modified, no index generation started


def test_the_same_rebuild_under_bujo_goes_ahead(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    retained(root)
    report = make_store(root, None, mode="bujo", llm={"provider": "ollama", "model": "m"}).rebuild()
    assert report.rows == 0


def test_the_cli_refuses_with_a_count_and_no_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tempomem.cli import main

    root = tmp_path / "mem"
    record = retained(root)
    config = tmp_path / "lite.json"
    config.write_text(json.dumps({"memory": {"mode": "lite", "path": str(root)}}))
    before = files(root)
    assert main(["--config", str(config), "rebuild"]) != 0
    err = capsys.readouterr().err
    assert "1 intake record(s) keep a BuJo capture plan" in err and record not in err
    assert files(root) == before


def test_RPL17_CLI08_the_cli_rebuild_clears_the_adoption_marker(tmp_path: Path) -> None:

    from tempomem.cli import main
    from tempomem.storage.fence import REBUILD_REQUIRED_FILE, mark_rebuild_required

    root = tmp_path / "mem"
    retained(root)
    mark_rebuild_required(root)
    config = bujo_config_file(tmp_path / "bujo.json", root)
    assert main(["--config", str(config), "rebuild"]) == 0
    assert not (root / REBUILD_REQUIRED_FILE).exists()


def test_TIER12_RPL09_lite_and_journal_never_read_the_replay_sidecar(tmp_path: Path) -> None:
    """The same Markdown and the same sidecar: BuJo recall marks the replaced line superseded; Lite and
    Journal recall ignore the sidecar, whose lifecycle and edges are BuJo's alone."""
    import shutil

    from tempomem.storage import replay_sidecar
    from tempomem.storage.markdown import Bullet, append_bullets
    from tests.test_health_audit import edge

    def line(mid: str, text: str) -> Bullet:
        return Bullet(
            signifier="–",
            text=text,
            id=mid,
            type="fact",
            status="open",
            recorded="2026-12-01T09:00:00.000Z",
            source_session="web:c1",
        )

    seed = tmp_path / "seed"
    append_bullets(
        seed / "daily" / "2026-12-01.md",
        "2026-12-01",
        [line("c-old", "Ana lives in Porto."), line("c-new", "Ana lives in Lisbon now.")],
    )
    replay_sidecar.apply_delta(seed, [edge("supersede", "c-old", "c-new")])
    states = {}
    for tier in ("lite", "journal", "bujo"):
        root = tmp_path / tier
        shutil.copytree(seed, root)
        extra = {"llm": {"provider": "ollama", "model": "m"}} if tier == "bujo" else {}
        store = make_store(root, None, mode=tier, **extra)
        store.rebuild()
        hits = store.recall_sync("Where does Ana live? Porto", limit=5).hits
        states[tier] = {h.id: h.currentness for h in hits}
        store.close()
    assert all("c-old" in found for found in states.values()), states
    assert states["bujo"]["c-old"] == "superseded"
    assert states["lite"].get("c-old") != "superseded" and states["journal"].get("c-old") != "superseded"


def test_CLI16_INTENT28_the_curate_audit_lists_what_the_intent_switches_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from tempomem.cli import main
    from tempomem.storage.markdown import Bullet, append_bullets

    root = tmp_path / "mem"
    retained(root)  # one capture still pending

    def note(mid: str, **kw: str) -> Bullet:
        return Bullet(
            signifier="–",
            text=f"note {mid}",
            id=mid,
            type=kw.pop("type", "note"),
            status=kw.pop("status", "open"),
            recorded="2026-12-01T09:00:00.000Z",
            **kw,
        )

    append_bullets(
        root / "daily" / "2026-12-01.md",
        "2026-12-01",
        [
            note("c-plan", due="2026-12-20"),
            note("c-done", status="done"),
            note("c-open"),
            note("c-fact", type="fact", status="done"),
        ],
    )
    before = files(root)
    config = bujo_config_file(tmp_path / "bujo.json", root)
    assert main(["--config", str(config), "curate-audit", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pending"] == 1
    assert [(r["id"], r["due"]) for r in report["dated"]] == [("c-plan", "2026-12-20")]
    assert [(r["id"], r["status"]) for r in report["closed"]] == [("c-done", "done")]
    assert files(root) == before  # read-only: no marker, no migration (INTENT-28)
    assert main(["--config", str(config), "curate-audit"]) == 0
    assert "pending capture: 1 (let the worker drain it" in capsys.readouterr().out


def test_INTAKE33_INTAKE34_a_bujo_rebuild_may_change_the_embedding_while_a_plan_is_retained(
    tmp_path: Path,
) -> None:
    """A safe BuJo rebuild with another embedding provider and dimension (the embedded MiniLM, 384, to an
    Ollama model of 8 dimensions behind a real loopback HTTP server) goes ahead while a run-owned plan is
    retained: the new generation is built from canonical Markdown with the new identity, and the exact
    plan bytes stay with the still pending record until intake resolution."""
    from tempomem.recall.index import MemoryIndex
    from tempomem.storage.intake_records import RecordState
    from tempomem.storage.markdown import Bullet, append_bullets
    from tests.helpers.embed_server import EmbedServer

    root = tmp_path / "mem"
    record = retained(root)
    append_bullets(
        root / "daily" / "2026-12-01.md",
        "2026-12-01",
        [
            Bullet(
                signifier="–",
                text="Ana keeps a blue kayak at the lake.",
                id="c-kayak",
                type="fact",
                status="open",
                recorded="2026-12-01T09:00:00.000Z",
                source_session="web:c1",
            )
        ],
    )
    llm = {"provider": "ollama", "model": "m"}
    first = make_store(root, None, mode="bujo", llm=llm)
    first.rebuild()
    old = MemoryIndex(root, None).manifest()
    first.close()
    plan = make_store(root, None, mode="bujo", llm=llm).intake.load_plan(record)
    assert plan == b'{"plan":"opaque to this test"}'

    server = EmbedServer()
    embeddings = {"provider": "ollama", "model": "nomic-embed-text", "dim": 8, "endpoint": server.url}
    try:
        store = make_store(root, None, mode="bujo", llm=llm, embeddings=embeddings)
        report = store.rebuild()
        hits = [h.id for h in store.search("where is the kayak")]
    finally:
        server.close()
    new = MemoryIndex(root, None).manifest()
    assert old is not None and new is not None and report.rows == 1
    assert (old["embedding"]["provider"], old["embedding"]["dim"]) == ("local", 384)
    assert new["embedding"] == {"provider": "ollama", "model": "nomic-embed-text", "dim": 8}
    assert hits[:1] == ["c-kayak"] and server.requests  # the new provider embedded it
    assert store.intake.load_plan(record) == plan  # the exact plan, untouched
    assert store.intake.view(record, now=T0).state is RecordState.PENDING
    store.close()
