"""Moving and protecting a store: ``export``, ``import apply|restore`` (over ``tempomem.export``) and the
payload codec commands ``codec-server``, ``codec-keygen`` (over ``tempomem.codec`` and
``tempomem.codec_server``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from tempomem.cli.common import load_args_config
from tempomem.export import (
    DEFAULT_MAX_PASSES,
    ArchiveError,
    export_store,
    import_apply,
    import_restore,
)


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
    register_export(sub)  # export, import apply|restore
    register_codec(sub)  # codec-server, codec-keygen


def _print_error(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 1


def register_export(sub: Any, load: Any = load_args_config) -> None:
    """Register ``export`` and ``import`` on the ``tempomem`` subparsers.

    ``load(args) -> (TempomemConfig, base_dir)``: ``tempomem.cli.common.load_args_config`` unless a test
    drives the commands with a parser of its own.
    ``AgentRunningError`` is left to ``tempomem.cli.main`` (exit 3); archive problems print ``error: …``
    and exit 1.
    """

    def root_of(args: Any) -> Path:
        from tempomem.store import resolve_root

        config, base = load(args)
        return resolve_root(config, base)

    def cmd_export(args: Any) -> int:
        """CLI-10 / WM-21: read-only backup, safe on a live store (AMB-34). Opens no store object."""
        try:
            report = export_store(root_of(args), Path(args.archive), max_passes=args.max_passes)
        except ArchiveError as exc:
            return _print_error(exc)
        if args.json:
            print(json.dumps({**dataclasses.asdict(report), "path": str(report.path)}))
        else:
            print(
                f"exported {report.files} canonical file(s), {report.bytes} bytes, and "
                f"{report.intake_records} intake record(s) as content-free metadata to {report.path} "
                f"(consistent after {report.passes} passes; sha256 {report.sha256})"
            )
        return 0

    def cmd_import(args: Any) -> int:
        """CLI-11: ``restore`` (empty or matching store) or ``apply`` (merge by id); agent stopped."""
        root = root_of(args)
        verb = import_restore if args.action == "restore" else import_apply
        try:
            report = verb(root, Path(args.archive))
        except ArchiveError as exc:
            return _print_error(exc)
        rows = None
        if report.files_written and not args.no_rebuild:
            from tempomem.store import MemoryStore

            config, base = load(args)
            store = MemoryStore(config, base_dir=base)
            try:
                rows = store.rebuild().rows  # the index derives from canonical Markdown only
            finally:
                store.close()
        if args.json:
            print(json.dumps({**dataclasses.asdict(report), "index_rows": rows}))
            return 0
        done = (
            f"restored {report.files_written} canonical file(s)"
            if report.mode == "restore"
            else f"merged {report.bullets_added} bullet(s) ({report.bullets_skipped} already present), "
            f"{report.graph_rows_changed} graph row(s), {report.sidecar_entries_added} sidecar entr(ies), "
            f"{report.archived_turns_added} archived turn(s)"
        )
        print(done + (f"; search index rebuilt ({rows} memories)" if rows is not None else ""))
        return 0

    p = sub.add_parser(
        "export", help="read-only .tar.gz backup of canonical memory and turn archive; safe on a live store"
    )
    p.add_argument("archive", help="output path (.tar.gz), outside the memory root")
    p.add_argument(
        "--max-passes", type=int, default=DEFAULT_MAX_PASSES, help="give up after this many passes"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="restore or merge an export archive (agent stopped)")
    p.add_argument("action", choices=["apply", "restore"], help="apply = merge by id; restore = empty store")
    p.add_argument("archive")
    p.add_argument("--no-rebuild", action="store_true", help="skip rebuilding the search index afterwards")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import)


def register_codec(sub: Any, load: Any = load_args_config) -> None:
    """Register ``codec-server`` and ``codec-keygen`` (``load`` as in ``register_export``)."""

    def cmd_codec_server(args: Any) -> int:
        from tempomem.codec import CodecError, codec_from_config, codec_from_settings
        from tempomem.codec_server import CodecServer, origin_of

        try:
            config, base = load(args)
            if args.key_file or args.key_env:
                key_id = args.key_id or getattr(config.temporal, "codec_key_id", None)
                codec = codec_from_settings(key_file=args.key_file, key_env=args.key_env, key_id=key_id)
            else:
                codec = codec_from_config(config.temporal, base)
            if codec is None:
                raise CodecError(
                    "no codec key: set temporal.codecKeyFile/codecKeyEnv or pass --key-file/--key-env"
                )
            token = os.environ.get(args.token_env) if args.token_env else None
            if args.token_env and not token:
                raise CodecError(f"environment variable {args.token_env} (bearer token) is not set")
            origins = args.origin or [origin_of(config.temporal.ui_url)]
            server = CodecServer(
                codec,
                host=args.host,
                port=args.port,
                origins=origins,
                namespace=args.namespace,
                auth_token=token,
            )
        except (CodecError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(
            f"codec server on {server.url} for key id(s) {', '.join(codec.key_ids)}; UI origin(s) "
            f"{', '.join(origins)} (Ctrl-C stops)",
            flush=True,
        )
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown_serving).start())
        server.serve_forever()
        return 0

    def cmd_codec_keygen(args: Any) -> int:
        from tempomem.codec import CodecError, generate_key_file

        try:
            key_id = generate_key_file(Path(args.path))
        except (CodecError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote a new AES-256 codec key to {args.path} (owner-only); key id {key_id}")
        return 0

    p = sub.add_parser("codec-server", help="serve the payload codec to the Temporal UI (/encode, /decode)")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    p.add_argument("--origin", action="append", help="allowed UI origin (repeatable); default temporal.uiUrl")
    p.add_argument("--namespace", help="serve only this namespace (X-Namespace header)")
    p.add_argument("--key-file", help="key file (instead of temporal.codecKeyFile)")
    p.add_argument("--key-env", help="environment variable holding the key (instead of temporal.codecKeyEnv)")
    p.add_argument("--key-id", help="key id (default temporal.codecKeyId, else the key's fingerprint)")
    p.add_argument("--token-env", help="require 'Authorization: Bearer <value of this variable>'")
    p.set_defaults(func=cmd_codec_server)

    p = sub.add_parser("codec-keygen", help="write a new random AES-256 payload codec key (owner-only file)")
    p.add_argument("path")
    p.set_defaults(func=cmd_codec_keygen)
