"""The ``tempomem`` parser, assembled from the command groups, and ``main`` with its error mapping:
every expected failure is one line on stderr and an exit code, never a traceback or memory text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tempomem.cli import archive, batch, maintenance, memory, runtime
from tempomem.cli.common import (
    EXIT_AGENT_RUNNING,
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_RETAINED_PLAN,
    EXIT_USAGE,
    MissingStoreError,
    SkippedStoreError,
    StoreSelectorError,
    add_global_options,
)
from tempomem.storage.intake_records import IntakeError, UnknownRecordError

GROUPS = (runtime, memory, maintenance, batch, archive)  # the order of `tempomem --help`


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tempomem",
        description="Durable, observable long-term memory for AI agents, orchestrated by Temporal.",
    )
    add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    _global_options_everywhere(parser)
    return parser


def subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                found += [child, *subparsers(child)]
    return found


def _global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """Global options work after the subcommand too (``tempomem search Q --config F``)."""
    for child in subparsers(parser):
        if "--config" not in child._option_string_actions:
            add_global_options(child, top=False)


def _stdout_gone() -> int:
    """The reader of stdout went away (``tempomem inspect | head``): no traceback, shell's exit code."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not raise again
    return EXIT_BROKEN_PIPE


Failure = tuple[tuple[type[BaseException], ...], Callable[[Any], str], int]


def expected_failures() -> list[Failure]:
    """Errors a command may raise on purpose, in order (subclasses first): what to say, which exit code."""
    from tempomem.capture.model_client import ModelNotConfigured
    from tempomem.codec import CodecError
    from tempomem.config import ConfigError, SecretMissingError
    from tempomem.connect import TemporalConnectError
    from tempomem.devserver import DevServerError
    from tempomem.fleet import FleetConfigError
    from tempomem.storage.fence import AgentRunningError, RebuildRequiredError
    from tempomem.storage.intake_records import RetainedPlanError
    from tempomem.storage.replay_sidecar import SidecarError

    def plain(exc: Any) -> str:
        return f"error: {exc}"

    return [
        (
            (
                MissingStoreError,
                ModelNotConfigured,
                SecretMissingError,
                TemporalConnectError,
                RebuildRequiredError,
                FleetConfigError,
                SkippedStoreError,
            ),
            plain,
            EXIT_ERROR,
        ),
        ((AgentRunningError,), lambda exc: f"agent_running: {exc}", EXIT_AGENT_RUNNING),
        ((SidecarError,), lambda exc: f"error: replay sidecar rejected ({exc.reason})", EXIT_ERROR),
        ((RetainedPlanError,), plain, EXIT_RETAINED_PLAN),
        ((ConfigError,), lambda exc: f"invalid config:\n{exc}", EXIT_ERROR),
        ((UnknownRecordError, StoreSelectorError), plain, EXIT_USAGE),
        ((IntakeError, DevServerError, CodecError), plain, EXIT_ERROR),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return _stdout_gone()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        for types, say, code in expected_failures():
            if isinstance(exc, types):
                print(say(exc), file=sys.stderr)
                return code
        rpc = _temporal_rpc_error(exc)
        if rpc is None:
            raise
        print(f"error: Temporal refused the request: {rpc}", file=sys.stderr)
        return EXIT_ERROR


def _temporal_rpc_error(exc: BaseException) -> str | None:
    """One line for a Temporal service error (unknown namespace, permission denied, ...), else None.

    Service errors carry the server's status and message, which never hold memory text (Temporal
    history is content-free by design).
    """
    if "temporalio" not in sys.modules:
        return None
    from temporalio.service import RPCError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, RPCError):
            return f"{seen.status.name}: {seen.message}".splitlines()[0]
        seen = seen.__cause__ or seen.__context__
    return None
