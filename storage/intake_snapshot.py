"""Content-free runtime snapshots of the intake (INTAKE-30..32), republished after every transition.

Publishing happens on a background thread that coalesces bursts, so admission never waits for it, and
a failing sink is logged and ignored: the on-disk intake stays authoritative (INTAKE-32).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from tempomem.storage.fsio import atomic_write
from tempomem.storage.instants import format_instant
from tempomem.storage.intake import Intake

log = logging.getLogger("tempomem.snapshot")
SNAPSHOT_FILE = "snapshot.json"
_WRITE_TRIES = 3
ShutdownState = Literal["running", "draining", "stopped"]


class IntakeSnapshot(BaseModel):
    pending: int
    due: int
    dead: int
    resolved: int
    transitions: int
    shutdown: ShutdownState
    published_at: str


Sink = Callable[[IntakeSnapshot], None]


class SnapshotPublisher:
    """Call ``notify()`` after each durable transition; sinks receive a fresh snapshot soon after."""

    def __init__(self, intake: Intake, sinks: list[Sink] | None = None, *, write_file: bool = True) -> None:
        self.intake = intake
        self.sinks = list(sinks or [])
        self.write_file = write_file
        self.shutdown: ShutdownState = "running"
        self.transitions = 0
        self.published = 0
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tempomem-snapshot", daemon=True)
        self._thread.start()
        intake.on_transition = self.notify

    def notify(self) -> None:
        self.transitions += 1
        self._idle.clear()
        self._wake.set()

    def set_shutdown(self, state: ShutdownState) -> None:
        self.shutdown = state
        self.notify()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything notified so far has been published (tests, orderly stop)."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)

    def snapshot(self) -> IntakeSnapshot:
        now = datetime.now(UTC)
        counts = self.intake.counts(now=now)
        return IntakeSnapshot(
            **counts, transitions=self.transitions, shutdown=self.shutdown, published_at=format_instant(now)
        )

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._closed:
                return
            self._wake.clear()
            try:
                snap = self.snapshot()
            except Exception as exc:
                log.warning("snapshot not computed (%s)", type(exc).__name__)
                snap = None
            if snap is not None:
                self._publish(snap)
            if not self._wake.is_set():
                self._idle.set()

    def _write_file(self, snap: IntakeSnapshot) -> None:
        path, data = self.intake.base / SNAPSHOT_FILE, snap.model_dump_json().encode()
        try:
            for _ in range(_WRITE_TRIES - 1):
                # Another process's intake tidy may remove the temp file mid-write: write it again.
                with contextlib.suppress(FileNotFoundError):
                    atomic_write(path, data)
                    return
            atomic_write(path, data)
        except OSError as exc:
            log.warning("snapshot file not written (%s)", type(exc).__name__)

    def _publish(self, snap: IntakeSnapshot) -> None:
        if self.write_file and self.intake.base.exists():
            self._write_file(snap)
        for sink in self.sinks:
            try:
                sink(snap)
            except Exception as exc:  # INTAKE-32: a failing notification never touches the transition
                log.warning("snapshot sink failed (%s)", type(exc).__name__)
        self.published += 1
