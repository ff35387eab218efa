"""The ``tempomem`` command line, run as a real subprocess (CLI-01..03, CLI-09, CLI-18, CLI-20)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

pytestmark = pytest.mark.slow  # each test runs the CLI as a process: not in the quick subset

REPO = Path(__file__).resolve().parent.parent


def tempomem(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tempomem.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_config(path: Path, memory: dict, temporal: dict | None = None) -> Path:
    path.write_text(json.dumps({"memory": memory, **({"temporal": temporal} if temporal else {})}))
    return path


def test_validate_lists_every_violation_with_its_key_path(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "bad.json",
        {
            "mode": "journal",
            "writeMode": "capture",
            "embeddings": {},
            "capture": {"focus": "x" * 3000},
            "bogus": 1,
        },
    )
    proc = tempomem("validate", str(cfg), cwd=tmp_path)
    assert proc.returncode == 1
    for path in ("memory.writeMode", "memory.embeddings", "memory.capture.focus", "memory.bogus"):
        assert path in proc.stderr, path


def test_validate_accepts_the_reference_example(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "ok.json",
        {
            "mode": "bujo",
            "writeMode": "append-host-summary",
            "path": "./.mono-agent/memory",
            "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
            "llm": {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"},
        },
    )
    proc = tempomem("validate", str(cfg), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


def test_demo_search_rebuild_and_inspect(client: Client, tmp_path: Path) -> None:
    address = client.service_client.config.target_host
    cfg = write_config(
        tmp_path / "tempomem.json",
        {
            "mode": "journal",
            "writeMode": "append-host-summary",
            "path": "mem",
            "embeddings": {"provider": "local"},
        },
        {"address": address},
    )
    demo = tempomem("--config", str(cfg), "demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.count(": resolved after 1 attempt(s)") == 4
    assert "demo-run-4: no_op_sentinel" in demo.stdout
    assert "/namespaces/default/workflows/capture-" in demo.stdout
    # The recall part is the shaped MemoryRecall rendering (tail cut, notes, currentness), exactly what
    # the tool returns for the same store, not raw reference scores; memory text never reaches stderr.
    from tempomem.config import load_config_data
    from tempomem.demo import load_demo
    from tempomem.recall.tools import memory_recall
    from tempomem.store import MemoryStore

    sections = demo.stdout.split("\n\nEach turn's workflow")[0].split('\nMemoryRecall "')[1:]
    queries = load_demo().queries
    assert [sec.split('"\n', 1)[0] for sec in sections] == queries
    memory = {"mode": "journal", "writeMode": "append-host-summary", "path": str(tmp_path / "mem"),
              "embeddings": {"provider": "local"}}  # fmt: skip
    store = MemoryStore(load_config_data({"memory": memory, "temporal": {"address": address}}))
    for sec, query in zip(sections, queries, strict=True):
        printed = [line.removeprefix("  ") for line in sec.split('"\n', 1)[1].splitlines()]
        assert printed == memory_recall(store, query=query).text.splitlines()
    # The budget line is a shaped hit (score, recorded instant, text) whatever the profile's evidence
    # note above it says.
    budget = [x for x in sections[1].splitlines() if "4500 euros" in x]
    shaped = r"  \d+\.\d{3} \[recorded 2026-12-02T11:31:09\.777Z\] "
    assert budget and re.match(shaped, budget[0]), sections[1]
    assert "Lisbon" not in demo.stderr and "4500" not in demo.stderr

    # REC-50, CLI-09: `tempomem search` runs the store's config-aware hybrid recall from the agent folder.
    search = tempomem("--config", str(cfg), "search", "relocation budget euros", "--json", cwd=tmp_path)
    assert search.returncode == 0, search.stderr
    hits = json.loads(search.stdout)["hits"]
    assert "4500 euros" in hits[0]["text"]
    assert hits[0]["recorded"] == "2026-12-02T11:31:09.777Z" and hits[0]["id"].startswith("j-")
    assert "source_session" not in hits[0]  # PROV-17: never shown

    # Rebuild from Markdown alone: delete the index, rebuild, same ranking.
    before = [(h["id"], round(h["score"], 6)) for h in hits]
    for path in sorted((tmp_path / "mem" / "index").rglob("*"), reverse=True):
        path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    rebuild = tempomem("--config", str(cfg), "rebuild", "--json", cwd=tmp_path)
    assert rebuild.returncode == 0, rebuild.stderr
    assert json.loads(rebuild.stdout)["rows"] == 4
    again = tempomem("--config", str(cfg), "search", "relocation budget euros", "--json", cwd=tmp_path)
    assert [(h["id"], round(h["score"], 6)) for h in json.loads(again.stdout)["hits"]] == before

    inspect = tempomem("--config", str(cfg), "inspect", "--json", cwd=tmp_path)
    assert inspect.returncode == 0
    assert json.loads(inspect.stdout)["counts"] == {"pending": 0, "due": 0, "dead": 0, "resolved": 4}
    assert "Lisbon" not in inspect.stdout and "Assistant" not in inspect.stdout  # CLI-20: content-free

    # Re-running the demo admits nothing twice (INTAKE-03).
    rerun = tempomem("--config", str(cfg), "demo", cwd=tmp_path)
    assert rerun.stdout.count(": duplicate") == 4
    assert len(list((tmp_path / "mem" / "daily").glob("*.md"))) == 4


def test_inspect_unknown_id_is_a_usage_error(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.json", {"mode": "lite", "writeMode": "append-host-summary", "path": "mem"}
    )
    (tmp_path / "mem" / ".capture-intake" / "pending").mkdir(parents=True)
    proc = tempomem("--config", str(cfg), "inspect", "f" * 64, "--json", cwd=tmp_path)
    assert proc.returncode == 2 and "no intake record" in proc.stderr
    proc = tempomem("--config", str(cfg), "inspect", "not-an-id", cwd=tmp_path)
    assert proc.returncode == 2


def test_help_explains_every_command(tmp_path: Path) -> None:
    proc = tempomem("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in ("validate", "search", "rebuild", "inspect", "worker", "dev", "demo", "server"):
        assert command in proc.stdout


def test_remember_is_recallable_at_once_and_rejects_credentials(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.json",
        {
            "mode": "journal",
            "writeMode": "append-host-summary",
            "path": "mem",
            "embeddings": {"provider": "local"},
        },
    )
    written = tempomem(
        "--config", str(cfg), "remember", "The spare key is under the blue flowerpot.", "--json", cwd=tmp_path
    )
    assert written.returncode == 0, written.stderr
    result = json.loads(written.stdout)
    assert result["status"] == "written" and result["id"].startswith("r-")
    again = tempomem(
        "--config", str(cfg), "remember", "The spare key is under the blue flowerpot.", "--json", cwd=tmp_path
    )
    assert json.loads(again.stdout)["status"] == "duplicate"  # REM-12
    hits = json.loads(
        tempomem("--config", str(cfg), "search", "where is the spare key", "--json", cwd=tmp_path).stdout
    )["hits"]
    assert hits[0]["id"] == result["id"]  # REM-02: searchable without a rebuild
    before = sorted(p.name for p in (tmp_path / "mem" / "daily").iterdir())
    rejected = tempomem(
        "--config", str(cfg), "remember", "api_key = sk-abcdefghijklmnopqrstuvwx", cwd=tmp_path
    )
    assert rejected.returncode == 1 and "credential_rejected" in rejected.stderr  # REM-16
    assert sorted(p.name for p in (tmp_path / "mem" / "daily").iterdir()) == before


def test_journal_pages_through_a_range_and_rejects_bad_input(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.json", {"mode": "lite", "writeMode": "append-host-summary", "path": "mem"}
    )
    for text in ("Alpha line for the journal.", "Beta line for the journal.", "Gamma line for the journal."):
        assert tempomem("--config", str(cfg), "remember", text, cwd=tmp_path).returncode == 0
    day = next((tmp_path / "mem" / "daily").glob("*.md")).stem
    out = tempomem(
        "--config",
        str(cfg),
        "journal",
        "--from",
        day,
        "--through",
        day,
        "--tz",
        "UTC",
        "--limit",
        "2",
        "--all",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    pages = json.loads(out.stdout)
    assert [len(p["entries"]) for p in pages] == [2, 1]  # JRN-12 pages, followed by cursor
    assert pages[0]["nextCursor"] and pages[-1]["nextCursor"] is None
    bad = tempomem(
        "--config", str(cfg), "journal", "--from", day, "--through", day, "--tz", "Mars/Olympus", cwd=tmp_path
    )
    assert bad.returncode == 2 and "invalid_time_zone" in bad.stderr
