"""BackfillWorkflow: admit every turn of a file through the intake, then capture each one as a child.

The input names the file (an absolute path on the worker host and its sha256), offsets, counters and
knobs — never memory text. The ``backfill.admit_batch`` activity reads the next lines, validates each
one fully, admits it through the store's intake and returns intake ids and counts. Each admitted record
gets its ``CaptureWorkflow`` (id ``capture-<64-hex>``) as a child on the same task queue, at most
``window`` in flight. Before the history grows large the workflow drains its window and continues as new
from the next offset, so a backfill of any size keeps a short history; a crash anywhere resumes from the
last recorded event and admission is idempotent (a replayed line comes back ``duplicate``).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from tempomem.messages.backfill import (
        ADMIT_BATCH,
        BACKFILL_WORKFLOW,
        MAX_REPORTED_BAD_LINES,
        PROGRESS_QUERY,
        SOURCE_FORMATS,
        AdmitBatchInput,
        AdmitBatchResult,
        BackfillInput,
        BackfillProgress,
    )
    from tempomem.workflows.child_capture import (
        INDEX_GROUP_COMMIT,
        StoreLabels,
        admit_retry,
        capture_child,
        capture_window,
        flush_index,
    )

_ADMIT_RETRY = admit_retry("source_changed", "source_invalid", "storage_error", "wrong_store")


@workflow.defn(name=BACKFILL_WORKFLOW)
class BackfillWorkflow:
    def __init__(self) -> None:
        self._p = BackfillProgress()
        self._tier = ""
        self._write_mode = ""
        self._group_index = False
        self._store_id = ""
        self._position = 0
        self._byte_offset = 0
        self._read_this_run = 0

    @workflow.query(name=PROGRESS_QUERY)
    def progress(self) -> BackfillProgress:
        return self._p

    @workflow.run
    async def run(self, inp: BackfillInput) -> BackfillProgress:
        if inp.source.format not in SOURCE_FORMATS:
            raise ApplicationError(f"unknown source format {inp.source.format!r}", non_retryable=True)
        if inp.window < 1 or inp.batch_size < 1 or inp.continue_as_new_every < 1:
            raise ApplicationError("window, batch_size and continue_as_new_every must be ≥ 1")
        p = self._p = dataclasses.replace(inp.progress) if inp.progress else BackfillProgress()
        p.bad = list(p.bad)
        # Versioned (issue #15 item 2): runs recorded before the group commit indexed every line alone.
        self._group_index = workflow.patched(INDEX_GROUP_COMMIT)
        self._store_id = inp.store_id
        self._position, self._byte_offset, self._read_this_run = inp.position, inp.byte_offset, 0
        self._report()

        async def admit() -> tuple[list[str], bool]:
            batch = await self._admit(
                inp, self._position, self._byte_offset, inp.continue_as_new_every - self._read_this_run
            )
            self._position, self._byte_offset = batch.position, batch.byte_offset
            self._read_this_run += batch.read
            self._count(batch)
            return batch.capture, batch.eof

        def in_flight(running: int) -> None:
            p.in_flight = running
            self._report()

        eof = await capture_window(
            window=inp.window,
            admit=admit,
            roll_over=lambda: (
                self._read_this_run >= inp.continue_as_new_every
                or workflow.info().is_continue_as_new_suggested()
            ),
            capture=lambda intake_id: self._capture(inp, intake_id),
            report=in_flight,
        )
        if not eof:
            # The window is drained (no child outlives this run); carry counts and offsets over.
            await self._flush()
            p.continue_as_new_runs += 1
            p.in_flight = 0
            workflow.continue_as_new(
                dataclasses.replace(inp, position=self._position, byte_offset=self._byte_offset, progress=p)
            )
        await self._flush()
        p.in_flight = 0
        p.done = True
        self._report()
        return p

    async def _admit(
        self, inp: BackfillInput, position: int, byte_offset: int, room: int
    ) -> AdmitBatchResult:
        return await workflow.execute_activity(
            ADMIT_BATCH,
            AdmitBatchInput(
                inp.store_id, inp.source, position, byte_offset, max(1, min(inp.batch_size, room))
            ),
            result_type=AdmitBatchResult,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=_ADMIT_RETRY,
            summary=f"admit lines after {position}",
        )

    async def _flush(self) -> None:
        if self._group_index:
            await flush_index(self._store_id)

    def _count(self, batch: AdmitBatchResult) -> None:
        p = self._p
        self._tier, self._write_mode = batch.tier, batch.write_mode
        p.total = batch.total
        p.read += batch.read
        p.admitted += batch.admitted
        p.duplicates += batch.duplicates
        p.skipped += batch.skipped
        p.bad_lines += len(batch.bad)
        room = MAX_REPORTED_BAD_LINES - len(p.bad)
        if room > 0:
            p.bad.extend(batch.bad[:room])
        p.settled += batch.read - len(batch.capture)

    async def _capture(self, inp: BackfillInput, intake_id: str) -> None:
        child = await capture_child(
            intake_id,
            store_id=inp.store_id,
            first_delay_seconds=inp.first_delay_seconds,
            search_attributes=inp.search_attributes,
            labels=StoreLabels(self._tier, self._write_mode),
            summary=f"capture {intake_id[:12]}… · backfill · store {inp.store_id}",
            first_poll_seconds=inp.poll_seconds,
            group_index=self._group_index,
        )
        p = self._p
        p.completed += 1
        p.settled += 1
        if child.state == "resolved":
            p.resolved += 1
        elif child.state == "dead":
            p.dead += 1

    def _report(self) -> None:
        """Mirror the counts into the UI's current details (content-free)."""
        p = self._p
        total = str(p.total) if p.total or p.read else "?"
        workflow.set_current_details(
            f"{p.settled}/{total} settled · admitted {p.admitted} · duplicates {p.duplicates} · "
            f"skipped {p.skipped} · bad lines {p.bad_lines} · captures {p.completed} done, "
            f"{p.in_flight} in flight · run {p.continue_as_new_runs + 1}" + (" · done" if p.done else "")
        )
