"""Connecting to Temporal the way every Temporal tool does (HOST-02, CFG-31).

Precedence, key by key: what the config file's ``temporal`` block sets explicitly, then Temporal's
environment configuration (``temporalio.envconfig``: ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``, ``TEMPORAL_PROFILE`` and the TOML profile file), then tempomem's
defaults (``localhost:7233``, ``default``, no TLS). A team that passes its own ``Client`` (see
``tempomem.worker.store_worker_parts``) skips all of this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

    from tempomem.config import TempomemConfig


class TemporalConnectError(Exception):
    """Temporal could not be reached, or refused us; the message is one line and content-free."""


def _path(value: str, base_dir: Path | None) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _read(value: str, base_dir: Path | None, key: str) -> bytes:
    path = _path(value, base_dir)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TemporalConnectError(f"temporal.tls.{key}: cannot read {path}: {exc.strerror or exc}") from None


def connect_options(
    config: TempomemConfig,
    base_dir: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments for ``Client.connect`` (target_host, namespace, api_key, tls, rpc_metadata)."""
    from temporalio.envconfig import ClientConfigProfile
    from temporalio.service import TLSConfig

    from tempomem.config import SecretMissingError, secret

    t = config.temporal
    env = os.environ if environ is None else environ
    base_dir = base_dir if base_dir is not None else config.source_dir
    explicit = t.model_fields_set
    try:
        profile = ClientConfigProfile.load(profile=t.profile, override_env_vars=dict(env))
    except Exception as exc:  # a broken profile file: say which, not a traceback
        raise TemporalConnectError(f"Temporal environment configuration: {exc}") from None
    options: dict[str, Any] = dict(profile.to_client_connect_config())
    options.setdefault("target_host", t.address)
    options.setdefault("namespace", t.namespace)
    if "address" in explicit:
        options["target_host"] = t.address
    if "namespace" in explicit:
        options["namespace"] = t.namespace
    try:
        key = secret(t.api_key, t.api_key_env, "temporal.apiKeyEnv", environ=env)
    except SecretMissingError as exc:
        raise TemporalConnectError(str(exc)) from None
    if key is not None:
        options["api_key"] = key
        options.setdefault("tls", True)
    if "tls" in explicit:
        if isinstance(t.tls, bool):
            options["tls"] = t.tls
        else:
            tls = t.tls

            def read(value: str | None, key: str) -> bytes | None:
                return None if value is None else _read(value, base_dir, key)

            options["tls"] = TLSConfig(
                domain=tls.server_name,
                server_root_ca_cert=read(tls.server_ca_cert, "serverCaCert"),
                client_cert=read(tls.client_cert, "clientCert"),
                client_private_key=read(tls.client_key, "clientKey"),
            )
    options.setdefault("tls", False)
    return options


def describe(options: Mapping[str, Any]) -> str:
    """Where a connection goes, for messages: address and namespace, never a key."""
    return f"{options.get('target_host')} (namespace {options.get('namespace')})"


async def connect(config: TempomemConfig, base_dir: Path | None = None) -> Client:
    """A ``Client`` for ``config`` with its payload codec; ``TemporalConnectError`` when unreachable."""
    from temporalio.client import Client

    from tempomem.codec import data_converter_for_config

    options = connect_options(config, base_dir)
    base_dir = base_dir if base_dir is not None else config.source_dir
    try:
        client = await Client.connect(
            **options, data_converter=data_converter_for_config(config.temporal, base_dir)
        )
    except RuntimeError as exc:  # the core bridge's "Failed client connect: ..." (multi-line)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TemporalConnectError(f"cannot reach Temporal at {describe(options)}: {reason}") from None
    await check_namespace(client)
    return client


async def check_namespace(client: Client) -> None:
    """Fail now, in one line, on a namespace the cluster does not know (a worker would otherwise die in
    validation with a long traceback). A key that may not describe namespaces is not an error here."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace), timeout=timedelta(seconds=10)
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise TemporalConnectError(
                f"namespace {client.namespace} does not exist on {client.service_client.config.target_host}"
            ) from None
        if exc.status not in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            raise TemporalConnectError(f"Temporal refused DescribeNamespace: {exc.status.name}") from None
