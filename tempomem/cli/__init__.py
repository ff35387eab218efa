"""The ``tempomem`` command line, one module per command group.

``maintenance`` (validate, rebuild, inspect, retry, resolve, adopt-replay, health), ``memory`` (search,
profile, journal, remember), ``runtime`` (worker, dev, demo, server, mcp), ``archive`` (export, import,
codec-server, codec-keygen) and ``batch`` (backfill, consolidate, recurate); ``app`` assembles the parser
from their ``register`` functions and maps errors to exit codes; ``common`` holds what they share.
Importing this package stays light: the command groups load when ``main`` or ``build_parser`` runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import argparse

__all__ = ["build_parser", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    from tempomem.cli.app import build_parser as assemble

    return assemble()


def main(argv: Sequence[str] | None = None) -> int:
    from tempomem.cli.app import main as run

    return run(argv)


def run() -> NoReturn:
    """The ``tempomem`` script: ``main``, then the exit. Once Temporal's native runtime is loaded, its
    threads can abort an interpreter that is finalizing (``PyGILState_Release``, rc -6/139, after the
    command finished and printed: #13), so the process flushes its output and logs and leaves without
    finalization. Every durable write a command makes is fsynced before the command returns."""
    code = main()
    if "temporalio.bridge" in sys.modules:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a reader that went away: nothing to keep
                stream.flush()
        os._exit(code)
    raise SystemExit(code)
