"""Moving and protecting a store: ``export``, ``import apply|restore`` (``tempomem.export``) and the
payload codec commands ``codec-server``, ``codec-keygen`` (``tempomem.codec_server``)."""

from __future__ import annotations

from typing import Any

from tempomem.cli.common import load_args_config


def register(sub: Any) -> None:
    """Add this group's commands to the ``tempomem`` subparsers."""
    from tempomem.codec_server import add_codec_commands
    from tempomem.export import add_export_commands

    add_export_commands(sub, load_args_config)  # export, import apply|restore
    add_codec_commands(sub, load_args_config)  # codec-server, codec-keygen
