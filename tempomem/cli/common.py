"""What every ``tempomem`` command shares: exit codes, the config lookup, opening the store.

Kept apart from ``tempomem.cli`` so command modules (backfill, recurate, export, codec) import it without
importing the parser that imports them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tempomem.config import TempomemConfig
    from tempomem.store import MemoryStore

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2  # also: unknown intake id
EXIT_AGENT_RUNNING = 3  # AMB-02: the liveness fence is held
EXIT_RETAINED_PLAN = 4  # CLI-05: resolve refused
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a reader that went away
DEFAULT_CONFIG = "tempomem.json"
STATE_DIR = ".tempomem"


class MissingStoreError(Exception):
    """An operator command named a memory root that does not exist (it is never created silently)."""


class StoreSelectorError(ValueError):
    """``--stores``/``--store`` do not pick one store (a usage error naming the option)."""


class SkippedStoreError(Exception):
    """The store ``--store`` names is one a stores worker skips (not a store, wrong permissions,
    corrupt); the reason is content-free."""


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (a usage error, naming the value, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def load_args_config(args: argparse.Namespace) -> tuple[TempomemConfig, Path]:
    """The config named by --config, else ./tempomem.json, else the embedded defaults; and the folder a
    relative ``memory.path`` resolves against (the config file's folder; the cwd for the defaults)."""
    from tempomem.config import default_config, load_config_file

    chosen = getattr(args, "config", None)
    path = Path(chosen) if chosen else Path(DEFAULT_CONFIG)
    if chosen or path.exists():
        return load_config_file(path), path.resolve().parent
    return default_config(), Path.cwd()


def add_store_selector(p: argparse.ArgumentParser, *, across: str | None = None) -> None:
    """``--stores DIR --store NAME``: one store of a stores directory, as ``worker --stores`` serves it
    (#16 item 4). ``across`` says what the command does with ``--stores`` alone (else it needs a name)."""
    p.add_argument(
        "--stores",
        metavar="DIR",
        help="a stores directory (as `worker --stores DIR` serves it): "
        + (across or "with --store, the one store to work on"),
    )
    p.add_argument(
        "--store",
        metavar="NAME",
        help="with --stores: the store DIR/NAME (its config is --config's, with memory.path set to DIR/NAME)",
    )


def check_store_name(stores_dir: Path, name: str) -> None:
    """``--store`` takes one directory name, never a path out of the stores directory."""
    if name.startswith(".") or "/" in name or "\\" in name or "\0" in name:
        raise StoreSelectorError(
            f"--store {name!r}: a store is named by one directory name under {stores_dir} "
            "(no '/', not hidden)"
        )


def selected_store(args: argparse.Namespace, *, new_ok: bool = False) -> Path | None:
    """The root ``--stores DIR --store NAME`` picks, or None without ``--stores``.

    NAME is one directory name, never a path. A store a stores worker would skip is refused with the
    worker's reason; a missing one is refused too, unless ``new_ok`` (``backfill`` makes the store, and
    the worker picks it up at its next scan)."""
    from tempomem.fleet import classify_store

    stores = getattr(args, "stores", None)
    name = getattr(args, "store", None)
    if not stores:
        if name:
            raise StoreSelectorError("--store NAME needs --stores DIR (the directory that holds it)")
        return None
    stores_dir = Path(stores)
    if not name:
        raise StoreSelectorError(f"--stores {stores_dir}: name the store with --store NAME")
    check_store_name(stores_dir, name)
    if not stores_dir.is_dir():
        raise MissingStoreError(f"no stores directory at {stores_dir}; nothing was created")
    root = stores_dir / name
    if not os.path.lexists(root):
        if new_ok:
            return root
        raise MissingStoreError(f"no store {name!r} under {stores_dir}; nothing was created")
    reason = classify_store(root)
    if reason is not None:
        raise SkippedStoreError(f"store {root} is skipped: {reason}")
    return root


def store_from_args(
    args: argparse.Namespace, *, must_exist: bool = False, new_ok: bool = False, **kwargs: Any
) -> MemoryStore:
    """The store the config names, or the one ``--stores DIR --store NAME`` picks; ``must_exist``
    refuses a root that is not there (operator commands that read or repair a store); ``new_ok`` lets
    a selected store be made (see ``selected_store``)."""
    from tempomem.store import MemoryStore

    config, base = load_args_config(args)
    root = selected_store(args, new_ok=new_ok and not must_exist)
    if root is not None:
        from tempomem.fleet import store_config

        config = store_config(config, root)
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
