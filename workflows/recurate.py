"""RecurateWorkflow: re-run extraction → review → reconciliation over archived capture turns (issue #6).

Input and output are ids, dates, a model *name*, counts, digests and a path — never memory text. The
text stays on the worker host: in the turn archive (``<root>/.turn-archive``), in re-admitted intake
records, and in the dry run's diff file.

Real run: ``recurate.admit`` re-admits the next archived turn(s) of the range, oldest admission first, as
fresh intake records with derived ids (``sha256("recurate:<run id>:<original id>")``, so a re-run of the
same run id finds every one in the ledger and admits nothing twice). Each pending one is curated by the
ordinary ``CaptureWorkflow`` as a child — same 16-attempt budget, retained plan, crash-idempotent commit
— up to ``window`` at a time (issue #15): their model stages overlap, and each reconciliation still
sees the earlier turns' results, because a capture commits only after every earlier-admitted turn in
flight (``storage.commit_order``). Runs started before the window existed keep one at a time. The
workflow continues as new every ``continue_as_new_every`` turns with a cursor (admission instant,
original id).

Dry run: one ``recurate.dry_run`` activity curates the same records against a scratch copy of the store
and writes a unified diff of the canonical Markdown to ``<root>/.recurate/<run id>.diff`` (0600).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from tempomem.messages.recurate import (
        PROGRESS_QUERY,
        RECURATE_ADMIT,
        RECURATE_DRY_RUN,
        RECURATE_WORKFLOW,
        RecurateAdmitInput,
        RecurateAdmitResult,
        RecurateDryRunInput,
        RecurateDryRunResult,
        RecurateInput,
        RecurateProgress,
    )
    from tempomem.workflows.child_capture import StoreLabels, admit_retry, capture_child, capture_window
# Versioned change (#15 item 1): the captures of one admitted batch run ``window`` at a time.
RECURATE_WINDOW = "recurate-window-v1"


_ADMIT_RETRY = admit_retry("not_capture_store", "archive_error", "bad_request", "WrongStoreError")


@workflow.defn(name=RECURATE_WORKFLOW)
class RecurateWorkflow:
    def __init__(self) -> None:
        self._p = RecurateProgress()
        self._tier = ""
        self._write_mode = ""
        self._cursor = ("", "")
        self._handled = 0

    @workflow.query(name=PROGRESS_QUERY)
    def progress(self) -> RecurateProgress:
        return self._p

    @workflow.run
    async def run(self, inp: RecurateInput) -> RecurateProgress:
        if inp.batch_size < 1 or inp.continue_as_new_every < 1 or inp.window < 1:
            raise ApplicationError(
                "window, batch_size and continue_as_new_every must be ≥ 1", non_retryable=True
            )
        p = self._p = dataclasses.replace(inp.progress) if inp.progress else RecurateProgress()
        if inp.dry_run:
            return await self._dry_run(inp)
        if inp.window > 1 and workflow.patched(RECURATE_WINDOW):
            return await self._run_windowed(inp)
        cursor_at, cursor_id = inp.cursor_at, inp.cursor_id
        handled = 0
        while True:
            if handled >= inp.continue_as_new_every or workflow.info().is_continue_as_new_suggested():
                p.continue_as_new_runs += 1
                workflow.continue_as_new(
                    dataclasses.replace(inp, cursor_at=cursor_at, cursor_id=cursor_id, progress=p)
                )
            batch = await self._admit(inp, cursor_at, cursor_id)
            cursor_at, cursor_id = batch.cursor_at, batch.cursor_id
            handled += batch.turns
            self._report()
            for intake_id in batch.capture:  # runs from before the window: one at a time
                await self._capture(inp, intake_id)
                self._report()
            if batch.eof:
                break
        p.done = True
        self._report()
        return p

    async def _dry_run(self, inp: RecurateInput) -> RecurateProgress:
        result: RecurateDryRunResult = await workflow.execute_activity(
            RECURATE_DRY_RUN,
            RecurateDryRunInput(inp.store_id, inp.run_id, inp.since, inp.until, inp.model),
            result_type=RecurateDryRunResult,
            start_to_close_timeout=timedelta(hours=6),
            heartbeat_timeout=timedelta(seconds=30),
            # A model failure fails the dry run visibly (its category is the error type); run it again.
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary="curate against a scratch copy; write the diff",
        )
        p = self._p
        p.turns = result.turns
        p.model_calls = result.model_calls
        p.diff_path, p.diff_sha256 = result.diff_path, result.diff_sha256
        p.files_changed, p.lines_added, p.lines_removed = (
            result.files_changed,
            result.lines_added,
            result.lines_removed,
        )
        p.superseded = result.superseded
        p.done = True
        self._report()
        return p

    async def _run_windowed(self, inp: RecurateInput) -> RecurateProgress:
        """``inp.window`` captures in flight, started in admission order; the next batch is admitted as
        soon as the last one's captures have all started. Before continuing as new the window drains
        (no child outlives its run): ``child_capture.capture_window``, which BackfillWorkflow runs too."""
        p = self._p
        self._cursor = (inp.cursor_at, inp.cursor_id)
        self._handled = 0

        async def admit() -> tuple[list[str], bool]:
            batch = await self._admit(inp, *self._cursor)
            self._cursor = (batch.cursor_at, batch.cursor_id)
            self._handled += batch.turns
            return batch.capture, batch.eof

        eof = await capture_window(
            window=inp.window,
            admit=admit,
            roll_over=lambda: (
                self._handled >= inp.continue_as_new_every or workflow.info().is_continue_as_new_suggested()
            ),
            capture=lambda intake_id: self._capture(inp, intake_id),
            report=lambda _running: self._report(),
        )
        if not eof:
            p.continue_as_new_runs += 1
            cursor_at, cursor_id = self._cursor
            workflow.continue_as_new(
                dataclasses.replace(inp, cursor_at=cursor_at, cursor_id=cursor_id, progress=p)
            )
        p.done = True
        self._report()
        return p

    async def _admit(self, inp: RecurateInput, cursor_at: str, cursor_id: str) -> RecurateAdmitResult:
        """Re-admit the next ``batch_size`` archived turns after the cursor; counts them in progress."""
        batch: RecurateAdmitResult = await workflow.execute_activity(
            RECURATE_ADMIT,
            RecurateAdmitInput(
                inp.store_id,
                inp.run_id,
                inp.since,
                inp.until,
                inp.model,
                cursor_at,
                cursor_id,
                inp.batch_size,
            ),
            result_type=RecurateAdmitResult,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=_ADMIT_RETRY,
            summary="re-admit archived turns",
        )
        self._tier, self._write_mode = batch.tier, batch.write_mode
        p = self._p
        p.turns += batch.turns
        p.admitted += batch.admitted
        p.duplicates += batch.duplicates
        return batch

    async def _capture(self, inp: RecurateInput, intake_id: str) -> None:
        child = await capture_child(
            intake_id,
            store_id=inp.store_id,
            first_delay_seconds=inp.first_delay_seconds,
            search_attributes=inp.search_attributes,
            labels=StoreLabels(self._tier, self._write_mode),
            summary=f"capture {intake_id[:12]}… · recurate {inp.run_id} · store {inp.store_id}",
        )
        p = self._p
        if child.outcome is not None:
            p.model_calls += child.outcome.model_calls  # true counts, not zeros (#12)
            p.lines_added += child.outcome.lines_added
        if child.state == "resolved":
            p.resolved += 1
        elif child.state == "dead":
            p.dead += 1
        else:
            p.pending += 1

    def _report(self) -> None:
        p = self._p
        workflow.set_current_details(
            f"{'dry run · ' if p.diff_path else ''}turns {p.turns} · admitted {p.admitted} · "
            f"duplicates {p.duplicates} · resolved {p.resolved} · dead {p.dead} · pending {p.pending} · "
            f"run {p.continue_as_new_runs + 1}" + (" · done" if p.done else "")
        )
