"""The full 16-attempt retry budget on the time-skipping test server (INTAKE-13, AMB-10, LIM-01..04)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tempomem import devserver
from tempomem.messages.capture import CaptureOutcome
from tempomem.storage.intake_records import RecordState
from tempomem.storage.limits import RETRY_MAX_ATTEMPTS, retry_delay_seconds
from tempomem.storage.turn import CompletedTurn
from tests.conftest import make_store, running_worker

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(devserver.test_server_cli())
    )
    yield env
    await env.shutdown()


def test_amb10_schedule_constants() -> None:
    delays = [retry_delay_seconds(n) // 60 for n in range(1, RETRY_MAX_ATTEMPTS + 1)]
    assert delays == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 360, 360, 360, 360, 360, 360]
    assert sum(delays) == 2671 and sum(delays) / 60 > 24  # LIM-04: more than 24 hours


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
async def test_sixteen_failed_attempts_dead_letter_the_record(
    skipping_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = skipping_env.client
    store = make_store(tmp_path / "mem", client, mode="lite")
    store.first_delay_seconds = 60  # the production schedule; time-skipping makes it take seconds
    store.root.mkdir(parents=True)
    (store.root / "daily").write_text("")  # every projection attempt fails with storage_error
    result = await store.persist_completed_turn(
        CompletedTurn(run_id="doomed", conversation_id="c", final_answer="Never projected.", admitted_at=T0)
    )
    assert result.workflow_started
    handle = client.get_workflow_handle(result.workflow_id, result_type=CaptureOutcome)
    async with running_worker(client, store):
        # Skip the durable timers explicitly; the test server fast-forwards while nothing else runs.
        for _ in range(400):
            if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
                break
            await skipping_env.sleep(timedelta(minutes=15))
        outcome = await handle.result()
    assert (outcome.state, outcome.attempts) == ("dead", RETRY_MAX_ATTEMPTS)
    view = store.intake.view(result.intake_id, now=T0)
    assert (view.state, view.attempts, view.failure_category) == (RecordState.DEAD, 16, "storage_error")
    # The durable timers between attempts are exactly the AMB-10 schedule.
    history = await handle.fetch_history()
    timers = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in history.events
        if e.HasField("timer_started_event_attributes")
    ]
    assert timers == [timedelta(seconds=retry_delay_seconds(n)) for n in range(2, RETRY_MAX_ATTEMPTS + 1)]
    assert sum(timers, timedelta()) == timedelta(minutes=2671)
