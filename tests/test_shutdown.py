"""Bounded shutdown (INTAKE-16, INTAKE-17): a stop drains for 10 s, then abandons the active attempt and
returns even when the provider ignores cancellation; the record stays pending and resumes on restart."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from tempomem.recall.embedding import LocalMiniLMEmbedder
from tempomem.storage.intake_records import RecordState
from tempomem.storage.limits import SHUTDOWN_DRAIN_SECONDS
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.turn import CompletedTurn
from tempomem.worker import run_worker
from tests.conftest import make_store
from tests.test_capture_flow import T0, outcome_of


class SilentServer:
    def __init__(self, url: str, close) -> None:
        self.url = url
        self.close = close


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    """An HTTP 'provider' that accepts connections and never answers (it ignores everything)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    closing = threading.Event()

    def accept() -> None:
        while not closing.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    def close() -> None:
        closing.set()
        listener.close()
        for conn in accepted:
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield SilentServer(f"http://127.0.0.1:{listener.getsockname()[1]}", close)
    close()


async def test_stop_returns_while_the_provider_hangs_and_the_record_resumes(
    client: Client, tmp_path: Path, silent_server: SilentServer
) -> None:
    """INTAKE-14: an embedding provider that never answers leaves the admitted turn pending; it resumes."""
    store = make_store(
        tmp_path / "mem",
        client,
        mode="journal",
        embeddings={"provider": "ollama", "endpoint": silent_server.url},
    )
    result = await store.persist_completed_turn(
        CompletedTurn(
            run_id="hang-1", conversation_id="c", final_answer="The lease renews in May.", admitted_at=T0
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(client, store.worker_context(client), stop=stop, schedule=False))
    for _ in range(300):  # wait until attempt 1 is inside the hanging embedding call
        if store.intake.view(result.intake_id, now=T0).attempts == 1:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    started = time.monotonic()
    stop.set()
    await asyncio.wait_for(task, timeout=SHUTDOWN_DRAIN_SECONDS + 10)
    stopped_in = time.monotonic() - started
    # Drained for the full deadline (the call never finished), then returned (INTAKE-16/17).
    assert SHUTDOWN_DRAIN_SECONDS - 0.5 <= stopped_in < SHUTDOWN_DRAIN_SECONDS + 8
    view = store.intake.view(result.intake_id, now=T0)
    assert (view.state, view.attempts) == (RecordState.PENDING, 1)

    # A process restart would drop the abandoned call (and its store lock) with the process; here the
    # provider drops the connection instead.
    silent_server.close()
    # Restart with a working embedder: the durable record resumes and resolves exactly once.
    ctx = store.worker_context(client)
    ctx.embedder = LocalMiniLMEmbedder()
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(client, ctx, stop=stop, schedule=False))
    try:
        outcome = await outcome_of(client, result, timeout=120)
    finally:
        stop.set()
        await task
    assert outcome.state == "resolved" and outcome.attempts >= 2
    assert [b.text for _, b in iter_bullets(store.root)] == ["Assistant: The lease renews in May."]
