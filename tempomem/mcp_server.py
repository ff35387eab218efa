"""``tempomem mcp``: the memory tools over MCP stdio, on the official ``mcp`` SDK (AMB-49).

A thin adapter: ``MemoryRecall`` / ``MemoryJournal`` wrap :mod:`recall.tools`, ``Remember`` wraps
:func:`storage.remember.remember`, without changing their behaviour. Only enabled tools are advertised
(CFG-22, CFG-24, POL-08, POL-11): ``memory.recallTool.enabled: false`` removes both read tools,
``memory.rememberTool.enabled: false`` removes ``Remember``. An optional host allowlist gates
``MemoryJournal`` and ``Remember`` but never ``MemoryRecall`` (POL-09, POL-10, POL-12).

Every tool answers with one text block (what the model reads) plus structured content. Bad input and
rejections are tool results with ``isError: true`` and a stable ``code``; nothing here crashes the
connection, calls a chat model, or logs memory text, queries or arguments (only tool names, outcome
codes and timings).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from tempomem.recall.journal import JournalSession
from tempomem.recall.tools import (
    DEGRADED_TEXT,
    MEMORY_JOURNAL_DESCRIPTION,
    RECALL_LIMIT_DEFAULT,
    JournalErrorResult,
    RecallInputError,
    RecallResult,
    memory_journal,
    memory_recall_description,
)
from tempomem.storage.remember import RememberRejected, remember

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from tempomem.recall.index import MemoryIndex
    from tempomem.store import MemoryStore

log = logging.getLogger("tempomem.mcp")

SERVER_NAME = "tempomem"
DEFAULT_CONVERSATION_ID = "mcp:stdio"
RECALL_TOOL = "MemoryRecall"
JOURNAL_TOOL = "MemoryJournal"
REMEMBER_TOOL = "Remember"
TOOL_NAMES = (RECALL_TOOL, JOURNAL_TOOL, REMEMBER_TOOL)

# --------------------------------------------------------------------------------------------------
# Tool contracts (reference page: MemoryRecall, MemoryJournal, Remember; REC-09, JRN-03, REM-04)

RECALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "description": "One short, specific topic to search for (an ordinary query-local search).",
        },
        "useOriginalQuery": {
            "type": "boolean",
            "description": "true reuses the current turn's original-question lookup; only on a host that "
            "bound one. Supply either query or useOriginalQuery: true, never both.",
        },
        "kind": {
            "type": "string",
            "enum": ["preference", "lesson"],
            "description": "Ask for labelled preferences or lessons.",
        },
        "about": {"type": "string", "description": "A person entity id the question is about."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "description": f"Maximum hits (default {RECALL_LIMIT_DEFAULT}, capped at 20).",
        },
    },
    "additionalProperties": False,
}

JOURNAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "fromDate": {"type": "string", "description": "First local civil date, inclusive (YYYY-MM-DD)."},
        "throughDate": {"type": "string", "description": "Last local civil date, inclusive (YYYY-MM-DD)."},
        "timeZone": {
            "type": "string",
            "description": "Explicit IANA time zone of the dates (required; never guessed).",
        },
        "limit": {"type": "integer", "minimum": 1, "description": "Entries per page (default 10, max 25)."},
        "cursor": {
            "type": "string",
            "description": "Continue a previous result; send the cursor alone, without range or limit.",
        },
    },
    "additionalProperties": False,
}

REMEMBER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {
            "type": "string",
            "minLength": 1,
            "description": "One self-contained sentence stating the fact, with its source, author, "
            "observation date and uncertainty inside the sentence.",
        },
        "about": {
            "type": "string",
            "description": "BuJo only: the id of an existing person entity to link (never creates one).",
        },
        "supersedes": {
            "type": "string",
            "description": "BuJo only: the id of a recalled, current, ordinary note this fact replaces.",
        },
        "replaceable": {
            "type": "boolean",
            "description": "BuJo only: true on a first scan observation without a known person id, so a "
            "later change can supersede it.",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}

_REMEMBER_COMMON = (
    "Store one explicitly stated fact in durable memory now, without waiting for the capture pass; it is "
    "recallable immediately. Use it when the user asks you to remember something. Write one "
    "self-contained sentence: source, author, observation date and uncertainty belong in the sentence. "
    "Exact repeats are idempotent; recall and compare before writing a paraphrase. Text carrying a "
    "credential is rejected and nothing is written. Memory is written only through this tool and the "
    "host's capture: never edit the memory directory, its Markdown, index rows, manifests, generations or "
    "indexes with shell, filesystem or database tools (operators stop the agent and use the tempomem "
    "maintenance commands to rebuild, audit or repair)."
)
REMEMBER_DESCRIPTION_BUJO = (
    _REMEMBER_COMMON + " Optional details: about links an existing person entity by id (it never creates a "
    "person); supersedes replaces a recalled, current, ordinary note by id and keeps the old state in "
    "history — only captured notes/events and enhanced Remember writes can be replaced, never owner-stated "
    "facts, preferences, lessons or text-only Remember lines; replaceable: true marks a scan observation "
    "without a known person id so a later change can supersede it. Writes with these details are "
    "attributed as assistant-noted, not verified owner. Plain text-only writes are protected from "
    "replacement; a plain repeat of a replaceable write's exact text reports a duplicate. To record a "
    "protected owner-stated fact anew, use distinct dated or source-specific wording."
)
REMEMBER_DESCRIPTION_TEXT_ONLY = (
    _REMEMBER_COMMON + " This store accepts text-only writes: about, supersedes and replaceable are not "
    "supported here."
)


def remember_description(tier: str) -> str:
    """Detail-aware on BuJo, text-only on Lite and Journal (REM-10, REM-17, AMB-52)."""
    return REMEMBER_DESCRIPTION_BUJO if tier == "bujo" else REMEMBER_DESCRIPTION_TEXT_ONLY


class ToolError(Exception):
    """A model-safe tool failure: ``code`` is stable, ``message`` never carries memory text."""

    def __init__(self, code: str, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "boolean": (bool,), "integer": (int,)}


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """Reject unknown keys and wrong JSON types; ``null`` means absent. Value rules (ranges, enums,
    dates, conflicts) stay with the library functions so their codes reach the model unchanged."""
    props: Mapping[str, Any] = schema["properties"]
    out: dict[str, Any] = {}
    for key, value in (arguments or {}).items():
        if key not in props:
            shown = key if len(key) <= 64 else key[:64] + "…"
            raise ToolError("unknown_argument", f"unknown argument {shown!r}; accepted: {', '.join(props)}")
        if value is None:
            continue
        kind = props[key]["type"]
        ok = isinstance(value, _JSON_TYPES[kind]) and not (kind == "integer" and isinstance(value, bool))
        if not ok:
            raise ToolError("invalid_argument", f"{key} must be a JSON {kind}")
        out[key] = value
    missing = [k for k in schema.get("required", ()) if k not in out]
    if missing:
        raise ToolError("missing_argument", f"{', '.join(missing)} is required")
    return out


# --------------------------------------------------------------------------------------------------
# The server


@dataclass
class _Connection:
    """Per-connection state: the MemoryJournal request scope (JRN-09, AMB-36)."""

    journal: JournalSession = field(default_factory=JournalSession)


def _result(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)], structured_content=structured)


def _error(tool: str, exc: ToolError) -> CallToolResult:
    structured: dict[str, Any] = {"error": exc.code, "message": exc.message}
    if exc.detail is not None:
        structured["detail"] = exc.detail
    return CallToolResult(
        content=[TextContent(text=f"{tool} error {exc.code}: {exc.message}")],
        structured_content=structured,
        is_error=True,
    )


class MemoryTools:
    """The three tool implementations over one open store; blocking work runs in a worker thread,
    one call at a time (the store's own lock still serialises writers across processes)."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        conversation_id: str = DEFAULT_CONVERSATION_ID,
        allowed_tools: Collection[str] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.clock = clock or (lambda: datetime.now(UTC))
        memory = store.config.memory
        self.tier: str = memory.mode
        allowed = None if allowed_tools is None else frozenset(allowed_tools)
        recall_on = memory.recall_tool.enabled
        self.enabled: tuple[str, ...] = tuple(
            name
            for name, on in (
                (RECALL_TOOL, recall_on),  # POL-09: not gated by the allowlist
                (JOURNAL_TOOL, recall_on and (allowed is None or JOURNAL_TOOL in allowed)),  # POL-10
                (
                    REMEMBER_TOOL,
                    memory.remember_tool.enabled and (allowed is None or REMEMBER_TOOL in allowed),
                ),
            )
            if on
        )
        self._lock = anyio.Lock()

    # -- listing ------------------------------------------------------------------------------------
    def tools(self) -> list[Tool]:
        specs = {
            RECALL_TOOL: Tool(
                name=RECALL_TOOL,
                description=memory_recall_description(
                    run_history_available=False, journal_available=JOURNAL_TOOL in self.enabled
                ),
                input_schema=RECALL_SCHEMA,
                annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
            ),
            JOURNAL_TOOL: Tool(
                name=JOURNAL_TOOL,
                description=MEMORY_JOURNAL_DESCRIPTION,
                input_schema=JOURNAL_SCHEMA,
                annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
            ),
            REMEMBER_TOOL: Tool(
                name=REMEMBER_TOOL,
                description=remember_description(self.tier),
                input_schema=REMEMBER_SCHEMA,
                annotations=ToolAnnotations(
                    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
                ),
            ),
        }
        return [specs[name] for name in self.enabled]

    # -- calling ------------------------------------------------------------------------------------
    @property
    def index(self) -> MemoryIndex:
        return self.store.index

    async def call(self, name: str, arguments: Mapping[str, Any] | None, conn: _Connection) -> CallToolResult:
        if name not in self.enabled:
            raise MCPError(code=INVALID_PARAMS, message=f"unknown tool: {name[:64]}")
        started = time.monotonic()
        outcome = "ok"
        try:
            if name == RECALL_TOOL:
                args = check_arguments(RECALL_SCHEMA, arguments)
                result = await self._blocking(lambda: self._recall(args))
            elif name == JOURNAL_TOOL:
                args = check_arguments(JOURNAL_SCHEMA, arguments)
                result = await self._blocking(lambda: self._journal(args, conn))
            else:
                args = check_arguments(REMEMBER_SCHEMA, arguments)
                result = await self._blocking(lambda: self._remember(args))
            structured = result.structured_content if isinstance(result.structured_content, dict) else {}
            outcome = "degraded" if structured.get("degraded") else str(structured.get("status", "ok"))
            return result
        except ToolError as exc:
            outcome = exc.code
            return _error(name, exc)
        except Exception as exc:  # never crash the connection, never echo a raw error (may hold text)
            outcome = f"internal:{type(exc).__name__}"
            return _error(name, ToolError(f"{_slug(name)}_unavailable", "the memory store failed; try again"))
        finally:
            log.info("tool=%s outcome=%s ms=%d", name, outcome, (time.monotonic() - started) * 1000)

    async def _blocking(self, fn: Callable[[], CallToolResult]) -> CallToolResult:
        async with self._lock:
            return await anyio.to_thread.run_sync(fn)

    def _recall(self, args: dict[str, Any]) -> CallToolResult:
        try:
            result = self.store.recall_sync(
                args.get("query"),
                use_original_query=bool(args.get("useOriginalQuery", False)),
                original_hits=None,  # a standalone server owns no bound automatic lookup (REC-12)
                kind=args.get("kind"),
                about=args.get("about"),
                limit=args.get("limit", RECALL_LIMIT_DEFAULT),
            )
        except RecallInputError as exc:
            raise ToolError(exc.code, str(exc)) from None
        except Exception as exc:  # REC-19: an explicit degraded result, never fabricated hits
            log.warning("MemoryRecall backend failed (%s)", type(exc).__name__)
            result = RecallResult(hits=[], degraded=True, text=DEGRADED_TEXT)
        structured = result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"text"})
        return _result(result.text, structured)

    def _journal(self, args: dict[str, Any], conn: _Connection) -> CallToolResult:
        result = memory_journal(
            conn.journal,
            self.store.root,
            from_date=args.get("fromDate"),
            through_date=args.get("throughDate"),
            time_zone=args.get("timeZone"),
            limit=args.get("limit"),
            cursor=args.get("cursor"),
        )
        if isinstance(result, JournalErrorResult):
            raise ToolError(result.error, result.message)
        structured = result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"text"})
        return _result(result.text, structured)

    def _remember(self, args: dict[str, Any]) -> CallToolResult:
        from tempomem.recall.embedding import EmbeddingError

        try:
            result = remember(
                self.store.root,
                tier=self.tier,  # type: ignore[arg-type]
                text=args["text"],
                conversation_id=self.conversation_id,
                now=self.clock(),
                about=args.get("about"),
                supersedes=args.get("supersedes"),
                replaceable=bool(args.get("replaceable", False)),
                index=self.index,
            )
        except RememberRejected as exc:
            raise ToolError(exc.reason, _REJECTION_MESSAGES[exc.reason], exc.detail) from None
        except EmbeddingError:
            # The canonical line is written and lexically searchable; a retry completes the vector.
            raise ToolError(
                "embedding_unavailable",
                "the fact was stored but its vector could not be computed; repeat the same Remember "
                "later to complete indexing",
            ) from None
        structured = result.model_dump(mode="json", exclude_none=True)
        return _result(_REMEMBER_TEXT[result.status].format(id=result.id, day=result.day), structured)


def _slug(name: str) -> str:
    return {RECALL_TOOL: "recall", JOURNAL_TOOL: "journal", REMEMBER_TOOL: "remember"}.get(name, "tool")


_REMEMBER_TEXT = {
    "written": "Remembered ({id}, daily/{day}.md); recallable now.",
    "duplicate": "Already remembered: the exact text is stored ({id}, daily/{day}.md); nothing changed.",
    "completed_index": "Already stored ({id}, daily/{day}.md); its missing index entry was completed.",
}
_REJECTION_MESSAGES = {
    "credential_rejected": "the text carries a credential; nothing was written",
    "unsafe_text": "the text cannot be stored safely (see detail); nothing was written",
    "unsupported_on_tier": "this store accepts text-only writes (no about, supersedes or replaceable)",
    "invalid_reference": "about/supersedes must be a memory or entity id",
    "unknown_person": "about names no known entity; Remember never creates a person",
    "not_a_person": "about names an entity that is not a person",
    "unknown_target": "supersedes names no stored memory line",
    "protected_target": "that line is protected (owner-stated, labelled or a text-only Remember write)",
    "not_current": "that line is no longer current",
    "self_supersede": "a fact cannot supersede itself",
}


def build_server(
    store: MemoryStore,
    *,
    conversation_id: str = DEFAULT_CONVERSATION_ID,
    allowed_tools: Collection[str] | None = None,
) -> Server[_Connection]:
    """An MCP server (``mcp.server.lowlevel.Server``) exposing this store's enabled memory tools.

    ``conversation_id`` is stamped into ``source.session`` of Remember writes (REM-18).
    ``allowed_tools`` is the host's tool allowlist (``None`` = no restriction); it gates MemoryJournal
    and Remember, never MemoryRecall (POL-09, POL-10, POL-12).
    """
    tools = MemoryTools(store, conversation_id=conversation_id, allowed_tools=allowed_tools)

    @asynccontextmanager
    async def lifespan(_server: Server[_Connection]) -> AsyncIterator[_Connection]:
        yield _Connection()

    async def on_list_tools(
        ctx: ServerRequestContext[_Connection], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=tools.tools())

    async def on_call_tool(
        ctx: ServerRequestContext[_Connection], params: CallToolRequestParams
    ) -> CallToolResult:
        return await tools.call(params.name, params.arguments, ctx.lifespan_context)

    server: Server[_Connection] = Server(
        SERVER_NAME,
        version=_version(),
        instructions="Durable memory tools: targeted MemoryRecall search, MemoryJournal chronology over "
        "explicit dates, and Remember for explicitly stated facts, where enabled.",
        lifespan=lifespan,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    server.memory_tools = tools  # type: ignore[attr-defined]  # for embedding hosts and tests
    return server


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tempomem")
    except Exception:
        return "0"


async def serve_stdio(
    store: MemoryStore,
    *,
    conversation_id: str = DEFAULT_CONVERSATION_ID,
    allowed_tools: Collection[str] | None = None,
) -> None:
    """Serve the store's memory tools over this process's stdin/stdout until the client disconnects."""
    server = build_server(store, conversation_id=conversation_id, allowed_tools=allowed_tools)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# --------------------------------------------------------------------------------------------------
# Entry point (``tempomem mcp`` wires the same arguments)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``mcp`` options (``--config`` is the CLI's global option)."""
    parser.add_argument(
        "--conversation-id",
        default=DEFAULT_CONVERSATION_ID,
        help=f"host conversation id stamped on Remember writes (default {DEFAULT_CONVERSATION_ID})",
    )
    parser.add_argument(
        "--allowed-tools",
        help="comma-separated host allowlist; gates MemoryJournal and Remember (MemoryRecall is never "
        "gated by it). Default: no allowlist.",
    )
    parser.add_argument("--verbose", action="store_true", help="log content-free tool timings to stderr")


def run(args: argparse.Namespace, store: MemoryStore) -> int:
    """Run the stdio server for parsed ``args`` (from :func:`add_arguments`); blocks until EOF."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    allowed = None
    if args.allowed_tools is not None:
        allowed = [t.strip() for t in args.allowed_tools.split(",") if t.strip()]
    try:
        asyncio.run(serve_stdio(store, conversation_id=args.conversation_id, allowed_tools=allowed))
    except KeyboardInterrupt:
        return 130
    finally:
        store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tempomem.mcp_server [--config FILE] [...]``: same config rules as ``tempomem``."""
    from tempomem.config import ConfigError, default_config, load_config_file
    from tempomem.store import MemoryStore

    parser = argparse.ArgumentParser(prog="tempomem mcp", description="memory tools over MCP stdio")
    parser.add_argument("--config", help="config file; default ./tempomem.json if present, else defaults")
    add_arguments(parser)
    args = parser.parse_args(argv)
    path = Path(args.config) if args.config else Path("tempomem.json")
    try:
        if args.config or path.exists():
            config, base = load_config_file(path), path.resolve().parent
        else:
            config, base = default_config(), Path.cwd()
    except ConfigError as exc:
        print(f"invalid config:\n{exc}", file=sys.stderr)
        return 1
    return run(args, MemoryStore(config, base_dir=base))


if __name__ == "__main__":
    raise SystemExit(main())
