"""What every ``tempomem`` command shares: exit codes, the config lookup, opening the store.

Kept apart from ``tempomem.cli`` so command modules (backfill, recurate, export, codec) import it without
importing the parser that imports them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tempomem.config import TempomemConfig
    from tempomem.store import MemoryStore

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2  # also: unknown intake id
EXIT_AGENT_RUNNING = 3  # AMB-02: the liveness fence is held


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (a usage error, naming the value, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value
EXIT_RETAINED_PLAN = 4  # CLI-05: resolve refused
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a reader that went away
DEFAULT_CONFIG = "tempomem.json"
STATE_DIR = ".tempomem"


class MissingStoreError(Exception):
    """An operator command named a memory root that does not exist (it is never created silently)."""


def load_args_config(args: argparse.Namespace) -> tuple[TempomemConfig, Path]:
    """The config named by --config, else ./tempomem.json, else the embedded defaults; and the folder a
    relative ``memory.path`` resolves against (the config file's folder; the cwd for the defaults)."""
    from tempomem.config import default_config, load_config_file

    chosen = getattr(args, "config", None)
    path = Path(chosen) if chosen else Path(DEFAULT_CONFIG)
    if chosen or path.exists():
        return load_config_file(path), path.resolve().parent
    return default_config(), Path.cwd()


def store_from_args(args: argparse.Namespace, *, must_exist: bool = False, **kwargs: Any) -> MemoryStore:
    """The store the config names; ``must_exist`` refuses a root that is not there (operator commands
    that read or repair a store)."""
    from tempomem.store import MemoryStore

    config, base = load_args_config(args)
    store = MemoryStore(config, base_dir=base, **kwargs)
    if must_exist and not store.root.is_dir():
        raise MissingStoreError(
            f"no memory store at {store.root} (memory.path of the config); nothing was created"
        )
    return store


def add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--config`` before or after the subcommand. On subcommands the default is SUPPRESS so a value
    given before the subcommand is not overwritten by the subparser's default."""
    parser.add_argument(
        "--config",
        default=None if top else argparse.SUPPRESS,
        help=f"config file (JSON with a 'memory' block); default ./{DEFAULT_CONFIG} "
        "if present, else the embedded defaults (journal tier, local embedder)",
    )
