"""``tempomem mcp``: the real server as a subprocess over stdio, driven by the official MCP client.

One server process per config; each test makes several calls in one client session. The store is real
(journal tier, local MiniLM embedder, DuckDB + LanceDB index under ``tmp_path``).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from tempomem.mcp_server import (
    JOURNAL_SCHEMA,
    RECALL_SCHEMA,
    REMEMBER_SCHEMA,
    ToolError,
    check_arguments,
    remember_description,
)
from tempomem.recall.tools import MEMORY_JOURNAL_DESCRIPTION, memory_recall_description
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.remember import remember_id

pytestmark = pytest.mark.slow  # each test runs the MCP server as a stdio process: not in the quick subset

FACT = "Morgan works as a librarian at the Maple Harbor public library since March 2024."
CREDENTIAL_FACT = "The staging password: hunter2-Sup3rSecret for the deploy box."
BASE_MEMORY: dict[str, Any] = {
    "mode": "journal",
    "writeMode": "append-host-summary",
    "path": "mem",
    "embeddings": {"provider": "local"},
}


def _write_config(tmp_path: Path, **memory: Any) -> Path:
    cfg = tmp_path / "tempomem.json"
    cfg.write_text(json.dumps({"memory": {**BASE_MEMORY, **memory}}), encoding="utf-8")
    return cfg


@contextlib.asynccontextmanager
async def mcp_session(cfg: Path, errlog: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """Spawn ``python -m tempomem.mcp_server --config CFG`` and open an initialised client session."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tempomem.mcp_server", "--config", str(cfg), "--verbose", *extra],
        cwd=str(cfg.parent),
    )
    with errlog.open("w", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def _call(session: ClientSession, name: str, arguments: dict[str, Any]) -> CallToolResult:
    result = await session.call_tool(name, arguments)
    assert isinstance(result, CallToolResult)
    return result


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def _error_code(result: CallToolResult) -> str:
    assert result.is_error, f"expected a tool error, got: {_text(result)}"
    assert isinstance(result.structured_content, dict)
    code = result.structured_content["error"]
    assert code in _text(result)  # the model sees the code too
    return code


async def _tool_names(session: ClientSession) -> list[str]:
    return [tool.name for tool in (await session.list_tools()).tools]


# --------------------------------------------------------------------------------------------------
# The full journal-tier server


async def test_journal_tier_server_over_stdio(tmp_path: Path) -> None:
    cfg = _write_config(tmp_path)
    root = tmp_path / "mem"
    errlog = tmp_path / "server.stderr"
    async with mcp_session(cfg, errlog, "--conversation-id", "test:conv-1") as session:
        # Listing: exactly the three enabled tools, with the reference descriptions and strict schemas; no
        # retired memory_capture / memory_note write tools (STORE-12).
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert list(listed) == ["MemoryRecall", "MemoryJournal", "Remember"]
        assert listed["MemoryRecall"].description == memory_recall_description(
            run_history_available=False, journal_available=True
        )
        assert "MemoryJournal" in (listed["MemoryRecall"].description or "")
        assert listed["MemoryJournal"].description == MEMORY_JOURNAL_DESCRIPTION
        assert listed["Remember"].description == remember_description("journal")
        for tool in listed.values():
            assert tool.input_schema["type"] == "object"
            assert tool.input_schema["additionalProperties"] is False
        assert set(listed["MemoryRecall"].input_schema["properties"]) == {
            "query",
            "useOriginalQuery",
            "kind",
            "about",
            "limit",
        }
        assert set(listed["MemoryJournal"].input_schema["properties"]) == {
            "fromDate",
            "throughDate",
            "timeZone",
            "limit",
            "cursor",
        }
        assert set(listed["Remember"].input_schema["properties"]) == {
            "text",
            "about",
            "supersedes",
            "replaceable",
        }
        assert listed["Remember"].input_schema["required"] == ["text"]

        # Remember writes one fact; an exact repeat is idempotent.
        written = await _call(session, "Remember", {"text": FACT})
        assert not written.is_error, _text(written)
        assert written.structured_content is not None
        assert written.structured_content["status"] == "written"
        assert written.structured_content["id"] == remember_id(FACT)
        repeat = await _call(session, "Remember", {"text": FACT})
        assert not repeat.is_error and repeat.structured_content is not None
        assert repeat.structured_content["status"] == "duplicate"
        stored = [b for _day, b in iter_bullets(root, "daily")]
        assert [b.text for b in stored] == [FACT]
        assert stored[0].source_session == "test:conv-1"  # REM-18: the host conversation id

        # MemoryRecall finds it at once (hybrid: FTS + local vectors).
        recalled = await _call(session, "MemoryRecall", {"query": "Where does Morgan work?"})
        assert not recalled.is_error, _text(recalled)
        assert FACT in _text(recalled)
        assert recalled.structured_content is not None
        hits = recalled.structured_content["hits"]
        assert hits and hits[0]["id"] == remember_id(FACT) and hits[0]["text"] == FACT
        assert recalled.structured_content.get("degraded") is False

        # MemoryJournal over the written day (a UTC window around now, so midnight cannot flake it).
        today = datetime.now(UTC).date()
        journal = await _call(
            session,
            "MemoryJournal",
            {
                "fromDate": (today - timedelta(days=1)).isoformat(),
                "throughDate": (today + timedelta(days=1)).isoformat(),
                "timeZone": "UTC",
            },
        )
        assert not journal.is_error, _text(journal)
        assert FACT in _text(journal)
        assert journal.structured_content is not None
        entries = journal.structured_content["entries"]
        assert [e["id"] for e in entries] == [remember_id(FACT)]
        assert entries[0]["source"].startswith("daily/")
        assert journal.structured_content["noData"] is False
        assert journal.structured_content["coverage"]["complete"] is True

        # An empty range is a successful noData result, not an error.
        empty = await _call(
            session,
            "MemoryJournal",
            {"fromDate": "2020-01-01", "throughDate": "2020-01-07", "timeZone": "UTC"},
        )
        assert not empty.is_error and empty.structured_content is not None
        assert empty.structured_content["noData"] is True

        # Invalid inputs are tool errors carrying their code; the connection stays usable.
        both = await _call(session, "MemoryRecall", {"query": "Morgan", "useOriginalQuery": True})
        assert _error_code(both) == "query_conflict"
        assert _error_code(await _call(session, "MemoryRecall", {})) == "missing_query"
        original = await _call(session, "MemoryRecall", {"useOriginalQuery": True})
        assert _error_code(original) == "original_query_unavailable"  # standalone server (REC-12)
        assert _error_code(await _call(session, "MemoryRecall", {"query": "x", "kind": "fact"})) == (
            "invalid_kind"
        )
        unknown = await _call(session, "MemoryRecall", {"query": "Morgan", "topK": 3})
        assert _error_code(unknown) == "unknown_argument"
        wrong_type = await _call(session, "MemoryRecall", {"query": "Morgan", "limit": "5"})
        assert _error_code(wrong_type) == "invalid_argument"

        no_zone = await _call(
            session, "MemoryJournal", {"fromDate": "2026-09-01", "throughDate": "2026-09-07"}
        )
        assert _error_code(no_zone) == "missing_time_zone"
        too_long = await _call(
            session,
            "MemoryJournal",
            {"fromDate": "2026-01-01", "throughDate": "2026-02-09", "timeZone": "Europe/Warsaw"},
        )
        assert _error_code(too_long) == "range_too_long"
        bad_cursor = await _call(session, "MemoryJournal", {"cursor": "AAAA"})
        assert _error_code(bad_cursor) == "invalid_cursor"
        snake = await _call(
            session,
            "MemoryJournal",
            {"from_date": "2026-09-01", "throughDate": "2026-09-07", "timeZone": "UTC"},
        )
        assert _error_code(snake) == "unknown_argument"

        credential = await _call(session, "Remember", {"text": CREDENTIAL_FACT})
        assert _error_code(credential) == "credential_rejected"
        assert "hunter2" not in _text(credential)
        enhanced = await _call(session, "Remember", {"text": "Morgan likes tea.", "replaceable": True})
        assert _error_code(enhanced) == "unsupported_on_tier"  # AMB-52: text-only on Journal
        assert _error_code(await _call(session, "Remember", {})) == "missing_argument"
        assert (
            _error_code(await _call(session, "Remember", {"text": "Ok.", "note": "x"})) == "unknown_argument"
        )
        # Nothing was written by any rejection.
        assert [b.text for _day, b in iter_bullets(root, "daily")] == [FACT]

        # An unknown tool is a protocol error, and the session still works afterwards.
        with pytest.raises(MCPError):
            await session.call_tool("RunHistory", {})
        again = await _call(session, "MemoryRecall", {"query": "Maple Harbor library"})
        assert not again.is_error and FACT in _text(again)

    # The server's log is content-free: tool names and outcome codes, never memory text or queries.
    log = errlog.read_text(encoding="utf-8")
    assert "tool=Remember outcome=written" in log
    assert "tool=MemoryJournal outcome=range_too_long" in log
    for secret in ("Morgan", "Maple Harbor", "librarian", "hunter2", "Where does"):
        assert secret not in log, f"{secret!r} leaked into the server log"
    daily_text = "".join(p.read_text(encoding="utf-8") for p in (root / "daily").glob("*.md"))
    assert "hunter2" not in daily_text


# --------------------------------------------------------------------------------------------------
# Tool gating (CFG-22, CFG-24, POL-08..POL-12)


async def test_recall_tool_disabled_removes_both_read_tools(tmp_path: Path) -> None:
    # POL-01: only an explicit `recallTool.enabled: false` withdraws the provisioned MemoryRecall.
    cfg = _write_config(tmp_path, recallTool={"enabled": False})
    async with mcp_session(cfg, tmp_path / "server.stderr") as session:
        assert await _tool_names(session) == ["Remember"]
        for hidden, args in (
            ("MemoryRecall", {"query": "Morgan"}),
            ("MemoryJournal", {"fromDate": "2026-09-01", "throughDate": "2026-09-02", "timeZone": "UTC"}),
        ):
            with pytest.raises(MCPError):
                await session.call_tool(hidden, args)
        # Remember still works, and its write is on disk.
        written = await _call(session, "Remember", {"text": "The team retro moved to Thursdays."})
        assert not written.is_error and written.structured_content is not None
        assert written.structured_content["status"] == "written"
    assert [b.text for _d, b in iter_bullets(tmp_path / "mem", "daily")] == [
        "The team retro moved to Thursdays."
    ]


async def test_remember_tool_disabled_removes_remember(tmp_path: Path) -> None:
    cfg = _write_config(tmp_path, rememberTool={"enabled": False})
    # POL-01: no recallTool key at all, and MemoryRecall is provisioned from the one memory block.
    assert "recallTool" not in json.loads(cfg.read_text(encoding="utf-8"))["memory"]
    async with mcp_session(cfg, tmp_path / "server.stderr") as session:
        assert await _tool_names(session) == ["MemoryRecall", "MemoryJournal"]
        with pytest.raises(MCPError):
            await session.call_tool("Remember", {"text": "This must not be stored."})
        # The read tools work on an empty store: no hits, no data, no error.
        recalled = await _call(session, "MemoryRecall", {"query": "anything stored?"})
        assert not recalled.is_error and recalled.structured_content is not None
        assert recalled.structured_content["hits"] == []
        journal = await _call(
            session,
            "MemoryJournal",
            {"fromDate": "2026-09-01", "throughDate": "2026-09-07", "timeZone": "CET"},
        )
        assert not journal.is_error and journal.structured_content is not None
        assert journal.structured_content["noData"] is True
    assert not (tmp_path / "mem" / "daily").exists()


async def test_allowlist_gates_journal_and_remember_but_never_recall(tmp_path: Path) -> None:
    cfg = _write_config(tmp_path, mode="lite", embeddings=None)
    async with mcp_session(cfg, tmp_path / "server.stderr", "--allowed-tools=") as session:
        tools = (await session.list_tools()).tools
        assert [t.name for t in tools] == ["MemoryRecall"]  # POL-09: an empty allowlist keeps recall
        assert "MemoryJournal" not in (tools[0].description or "")  # no routing to a tool that is absent
        result = await _call(session, "MemoryRecall", {"query": "release plan"})
        assert not result.is_error


# --------------------------------------------------------------------------------------------------
# Argument checking (pure)


def test_check_arguments_rejects_unknown_keys_and_wrong_types() -> None:
    assert check_arguments(RECALL_SCHEMA, None) == {}
    assert check_arguments(RECALL_SCHEMA, {"query": "q", "limit": 3, "kind": None}) == {
        "query": "q",
        "limit": 3,
    }
    cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        (RECALL_SCHEMA, {"Query": "q"}, "unknown_argument"),
        (RECALL_SCHEMA, {"limit": True}, "invalid_argument"),  # a boolean is not an integer
        (RECALL_SCHEMA, {"limit": 2.0}, "invalid_argument"),
        (RECALL_SCHEMA, {"useOriginalQuery": "true"}, "invalid_argument"),
        (JOURNAL_SCHEMA, {"time_zone": "UTC"}, "unknown_argument"),
        (REMEMBER_SCHEMA, {}, "missing_argument"),
        (REMEMBER_SCHEMA, {"text": ["a"]}, "invalid_argument"),
    ]
    for schema, args, code in cases:
        with pytest.raises(ToolError) as err:
            check_arguments(schema, args)
        assert err.value.code == code, args


def test_remember_description_is_tier_aware() -> None:
    assert "supersedes replaces" in remember_description("bujo")
    assert "text-only" in remember_description("lite")
    assert remember_description("journal") == remember_description("lite")


def test_WM20_the_remember_description_forbids_editing_the_memory_directory() -> None:
    """WM-20 [GUIDE]: the agent's write surface says memory is written only through Remember and the
    host's capture, never by editing the memory directory with shell, filesystem or database tools."""
    for tier in ("lite", "journal", "bujo"):
        text = remember_description(tier)
        assert "never edit the memory directory" in text
        assert "shell, filesystem or database tools" in text
        assert "operators stop the agent and use the tempomem maintenance commands" in text
