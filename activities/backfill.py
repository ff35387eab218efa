"""Backfill activities: read a file of completed turns, validate each turn fully, admit it to the intake.

Source formats (``BackfillSource.format``):

``jsonl``
    One completed turn per line, as a JSON object with exactly ``CompletedTurn``'s fields::

        {"run_id": "run-1", "conversation_id": "web:thread-7", "speaker_kind": "human-turn",
         "trigger_kind": "none", "user_text": "…", "final_answer": "…", "capture_text": null,
         "admitted_at": "2026-12-03T09:30:15.123Z"}

    ``run_id``, ``conversation_id``, ``final_answer`` and ``admitted_at`` (ISO-8601 with an offset) are
    required; ``speaker_kind`` ∈ human-turn|trigger|unknown, ``trigger_kind`` ∈ cron|webhook|none. Unknown
    keys are errors. Blank lines are ignored; every other line counts, and a bad one is reported by its
    1-based line number with a content-free reason (field names and error codes) and skipped.
``locomo-turns`` / ``locomo-pairs``
    A LoCoMo-style JSON list of samples (``sample_id``, ``conversation`` with ``speaker_a``,
    ``speaker_b``, ``session_N_date_time`` and ``session_N`` lists of ``{speaker, dia_id, text}``); see
    :func:`locomo_items`. Bad "lines" are reported by the turn's 1-based ordinal in the file.

Admission is ``MemoryStore.persist_completed_turn``'s path minus its best-effort workflow start: the same
skip rules, the same ``build_payload`` and ``Intake.admit`` (fsynced record + ledger), so a turn admitted
by a backfill and by its host are byte-identical and the second is a ``duplicate``. The backfill workflow
starts the captures itself, as children. Nothing but line numbers, intake ids and counts leaves here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext, utc_now
from tempomem.activities.heartbeat import run_blocking
from tempomem.messages.backfill import ADMIT_BATCH, AdmitBatchInput, AdmitBatchResult, BackfillSource, BadLine
from tempomem.messages.capture import RECORD_STATE, RecordRef
from tempomem.storage.admission import admit_turn
from tempomem.storage.intake import Intake
from tempomem.storage.intake_records import (
    IntakeCapacityError,
    IntakeConflictError,
    IntakeCorruptError,
    IntakeError,
    RecordState,
    UnknownRecordError,
)
from tempomem.storage.limits import MIB
from tempomem.storage.turn import AdmissionStatus, CompletedTurn

MAX_LINE_BYTES = 8 * MIB  # a longer JSONL line is reported (line_too_long) and skipped
MAX_REASON_ERRORS = 3
LOCOMO_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_SESSION_KEY = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class SourceItem:
    """One data line (JSONL) or dialog turn (LoCoMo): a valid turn, or a content-free error."""

    line: int
    turn: CompletedTurn | None
    error: str | None = None
    start: int = 0  # JSONL: byte offset where the line starts (a batch can stop before it)


# -- JSONL ------------------------------------------------------------------------------------------------


def describe_validation(exc: ValidationError) -> str:
    """Field paths and pydantic error codes only: input values (memory text) never appear."""
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '<line>'}: {err['type']}"
        for err in exc.errors()[:MAX_REASON_ERRORS]
    ]
    more = exc.error_count() - MAX_REASON_ERRORS
    return "; ".join(parts) + (f"; +{more} more" if more > 0 else "")


def parse_turn_line(raw: bytes, line: int, start: int = 0) -> SourceItem:
    """Validate one JSONL line completely into a ``CompletedTurn``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return SourceItem(line, None, "not_utf8", start)
    try:
        return SourceItem(line, CompletedTurn.model_validate_json(text), None, start)
    except ValidationError as exc:
        return SourceItem(line, None, describe_validation(exc), start)


@dataclass(frozen=True)
class JsonlChunk:
    items: list[SourceItem]
    position: int  # last physical line number consumed
    byte_offset: int  # where the next line starts
    eof: bool


def read_jsonl(path: Path, *, position: int = 0, byte_offset: int = 0, max_items: int = 64) -> JsonlChunk:
    """Up to ``max_items`` data lines after line ``position`` (which ends at ``byte_offset``)."""
    items: list[SourceItem] = []
    line = position
    with open(path, "rb") as f:
        f.seek(byte_offset)
        size = os.fstat(f.fileno()).st_size
        while len(items) < max_items:
            start = f.tell()
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            line += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                _skip_rest_of_line(f)
                items.append(SourceItem(line, None, "line_too_long", start))
            elif raw.strip():
                items.append(parse_turn_line(raw, line, start))
        offset = f.tell()
    return JsonlChunk(items, line, offset, offset >= size)


def _skip_rest_of_line(f: Any) -> None:
    while True:
        chunk = f.readline(MIB)
        if not chunk or chunk.endswith(b"\n"):
            return


def iter_jsonl(path: Path) -> list[SourceItem]:
    """Every data line of a JSONL file (for tools and tests; the activity reads in chunks)."""
    out: list[SourceItem] = []
    position, offset, eof = 0, 0, False
    while not eof:
        chunk = read_jsonl(path, position=position, byte_offset=offset, max_items=1024)
        out.extend(chunk.items)
        position, offset, eof = chunk.position, chunk.byte_offset, chunk.eof
    return out


def count_jsonl(path: Path) -> int:
    """Data lines (non-blank) of a JSONL file."""
    with open(path, "rb") as f:
        return sum(1 for raw in f if raw.strip())


# -- LoCoMo -----------------------------------------------------------------------------------------------


def locomo_run_id(sample_id: str, dia_id: str) -> str:
    """Deterministic: the same dialog turn of the same sample always admits under the same run id."""
    return f"locomo:{sample_id}:{dia_id}"


def _session_instant(raw: object) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → that instant, read as UTC (LoCoMo dates carry no zone)."""
    if not isinstance(raw, str):
        raise ValueError("missing")
    return datetime.strptime(raw.strip(), LOCOMO_DATE_FORMAT).replace(tzinfo=UTC)


def _utterance(turn: dict[str, Any]) -> str:
    text = " ".join(str(turn["text"]).split())
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [shares an image: {' '.join(caption.split())}]".strip()
    return f"{turn['speaker']}: {text}"


def _turn_problem(turn: object) -> str | None:
    if not isinstance(turn, dict):
        return "turn is not an object"
    for key in ("speaker", "dia_id", "text"):
        if not isinstance(turn.get(key), str) or not turn[key].strip():
            return f"{key}: missing"
    return None


def locomo_items(data: object, *, pairs: bool = False) -> list[SourceItem]:
    """Map LoCoMo samples to completed turns, in file order (sessions by number, empty ones skipped).

    ``pairs=False`` (``locomo-turns``): every dialog turn is one turn — ``final_answer`` is
    ``"<speaker>: <text>"`` (an image caption appended), ``user_text`` empty, run id
    ``locomo:<sample_id>:<dia_id>``. ``pairs=True`` (``locomo-pairs``): a ``speaker_a`` turn directly
    followed by a ``speaker_b`` turn becomes one user→assistant turn (``user_text`` / ``final_answer``,
    run id ``locomo:<sample_id>:<dia_a>+<dia_b>``); any other turn stands alone as above.

    ``conversation_id`` is ``locomo:<sample_id>``, ``speaker_kind`` ``human-turn``, and ``admitted_at`` the
    session's date (UTC) plus the turn's index in the session in seconds, so a session keeps its order.
    Malformed turns or sessions become error items (reported as bad lines by ordinal).
    """
    samples = data if isinstance(data, list) else [data]
    items: list[SourceItem] = []

    def add(turn: CompletedTurn | None, error: str | None = None) -> None:
        items.append(SourceItem(len(items) + 1, turn, error))

    for index, sample in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            add(None, f"sample {index}: no conversation object")
            continue
        sample_id = str(sample.get("sample_id") or f"sample-{index}")
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), key)
            for key in conv
            if (m := _SESSION_KEY.fullmatch(key)) and isinstance(conv[key], list) and conv[key]
        )
        for _number, key in sessions:
            turns: list[object] = conv[key]
            try:
                start = _session_instant(conv.get(f"{key}_date_time"))
            except ValueError:
                for _ in turns:
                    add(None, f"{sample_id} {key}_date_time: invalid")
                continue
            _session_items(sample_id, conv, turns, start, pairs, add)
    return items


def _session_items(
    sample_id: str, conv: dict[str, Any], turns: list[object], start: datetime, pairs: bool, add: Any
) -> None:
    i = 0
    while i < len(turns):
        turn = turns[i]
        problem = _turn_problem(turn)
        if problem is not None:
            dia = (
                turn.get("dia_id") if isinstance(turn, dict) and isinstance(turn.get("dia_id"), str) else "?"
            )
            add(None, f"{sample_id} {dia}: {problem}")
            i += 1
            continue
        assert isinstance(turn, dict)
        nxt = turns[i + 1] if i + 1 < len(turns) else None
        paired = (
            pairs
            and turn["speaker"] == conv.get("speaker_a")
            and _turn_problem(nxt) is None
            and isinstance(nxt, dict)
            and nxt["speaker"] == conv.get("speaker_b")
        )
        try:
            if paired:
                assert isinstance(nxt, dict)
                completed = CompletedTurn(
                    run_id=locomo_run_id(sample_id, f"{turn['dia_id']}+{nxt['dia_id']}"),
                    conversation_id=f"locomo:{sample_id}",
                    speaker_kind="human-turn",
                    user_text=_utterance(turn),
                    final_answer=_utterance(nxt),
                    admitted_at=start + timedelta(seconds=i + 1),
                )
            else:
                completed = CompletedTurn(
                    run_id=locomo_run_id(sample_id, turn["dia_id"]),
                    conversation_id=f"locomo:{sample_id}",
                    speaker_kind="human-turn",
                    final_answer=_utterance(turn),
                    admitted_at=start + timedelta(seconds=i),
                )
        except ValidationError as exc:
            add(None, f"{sample_id} {turn['dia_id']}: {describe_validation(exc)}")
        else:
            add(completed)
        i += 2 if paired else 1


def load_locomo(path: Path, *, pairs: bool = False) -> list[SourceItem]:
    try:
        data = json.loads(Path(path).read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a LoCoMo JSON file ({type(exc).__name__})") from None
    return locomo_items(data, pairs=pairs)


# -- file identity ------------------------------------------------------------------------------------------


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.hexdigest()


# -- admission ----------------------------------------------------------------------------------------------


def record_state(intake: Intake, intake_id: str) -> str:
    """pending | dead | resolved | unknown (a pruned receipt: resolved long ago)."""
    try:
        return intake.view(intake_id, now=utc_now()).state.value
    except UnknownRecordError:
        return "unknown"


class BackfillActivities:
    """The backfill's activities for one store: they run on that store's worker, with its Intake."""

    def __init__(
        self, ctx: StoreContext, *, capture_cron: bool | None = None, capture_webhook: bool | None = None
    ) -> None:
        self.ctx = ctx
        self.capture_cron = capture_cron
        self.capture_webhook = capture_webhook
        self._lock = threading.Lock()
        self._digests: dict[tuple[str, int, int, int, int], str] = {}
        self._totals: dict[str, int] = {}
        self._locomo: dict[tuple[str, bool], list[SourceItem]] = {}

    @activity.defn(name=ADMIT_BATCH)
    async def admit_batch(self, inp: AdmitBatchInput) -> AdmitBatchResult:
        if inp.store_id != self.ctx.store_id:
            raise ApplicationError("task for another store", type="wrong_store", non_retryable=True)
        stop = threading.Event()
        try:
            return await run_blocking(lambda: self._admit_batch(inp, stop))
        except BaseException:
            stop.set()  # a cancelled or abandoned attempt admits no further lines
            raise

    @activity.defn(name=RECORD_STATE)
    def record_state(self, ref: RecordRef) -> str:
        if ref.store_id != self.ctx.store_id:
            raise ApplicationError("task for another store", type="wrong_store", non_retryable=True)
        return record_state(self.ctx.intake, ref.intake_id)

    # -- internals ------------------------------------------------------------------------------------
    def _admit_batch(self, inp: AdmitBatchInput, stop: threading.Event) -> AdmitBatchResult:
        source = inp.source
        path = Path(source.path)
        self._check_digest(path, source.digest)
        if source.format == "jsonl":
            chunk = read_jsonl(
                path, position=inp.position, byte_offset=inp.byte_offset, max_items=inp.max_items
            )
            items, position, byte_offset, eof = chunk.items, chunk.position, chunk.byte_offset, chunk.eof
            total = self._total(source.digest, lambda: count_jsonl(path))
        else:
            everything = self._locomo_items(path, source)
            items = everything[inp.position : inp.position + inp.max_items]
            position = inp.position + len(items)
            byte_offset, eof, total = 0, position >= len(everything), len(everything)
        return self._admit_items(items, position, byte_offset, eof, total, stop)

    def _admit_items(
        self,
        items: list[SourceItem],
        position: int,
        byte_offset: int,
        eof: bool,
        total: int,
        stop: threading.Event,
    ) -> AdmitBatchResult:
        ctx = self.ctx
        counts = {AdmissionStatus.ADMITTED: 0, AdmissionStatus.DUPLICATE: 0, AdmissionStatus.SKIPPED: 0}
        bad: list[BadLine] = []
        capture: list[str] = []
        read = 0
        for item in items:
            if stop.is_set():
                raise ApplicationError("admission cancelled", type="cancelled")
            if item.turn is None:
                bad.append(BadLine(item.line, item.error or "invalid"))
                read += 1
                continue
            try:
                admitted = admit_turn(
                    ctx.intake,
                    item.turn,
                    tier=ctx.tier,  # type: ignore[arg-type]
                    write_mode=ctx.write_mode,  # type: ignore[arg-type]
                    capture_cron=self.capture_cron,
                    capture_webhook=self.capture_webhook,
                )
                status, intake_id = admitted.status, admitted.intake_id
            except IntakeConflictError:
                bad.append(BadLine(item.line, "conflict: run id admitted before with other content"))
                read += 1
                continue
            except IntakeCapacityError:
                if read == 0:
                    # Retried with backoff by the workflow's policy until captures free some room.
                    raise ApplicationError("intake at capacity", type="capacity") from None
                # Stop before this line; the next batch starts here once the window has drained.
                position, byte_offset, eof = item.line - 1, item.start, False
                break
            except IntakeCorruptError as exc:
                raise ApplicationError(type(exc).__name__, type="storage_error", non_retryable=True) from None
            except IntakeError:
                bad.append(BadLine(item.line, "record_too_large"))
                read += 1
                continue
            read += 1
            counts[status] += 1
            if (
                intake_id is not None
                and intake_id not in capture
                and record_state(ctx.intake, intake_id) == RecordState.PENDING.value
            ):
                capture.append(intake_id)
        return AdmitBatchResult(
            position=position,
            byte_offset=byte_offset,
            eof=eof,
            total=total,
            read=read,
            admitted=counts[AdmissionStatus.ADMITTED],
            duplicates=counts[AdmissionStatus.DUPLICATE],
            skipped=counts[AdmissionStatus.SKIPPED],
            bad=bad,
            capture=capture,
            tier=ctx.tier,
            write_mode=ctx.write_mode,
        )

    def _check_digest(self, path: Path, digest: str) -> None:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ApplicationError(type(exc).__name__, type="source_changed", non_retryable=True) from None
        key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._digests.get(key)
        if known is None:
            known = file_digest(path)
            with self._lock:
                self._digests = {key: known}  # one file at a time is the common case
        if known != digest:
            raise ApplicationError(
                "the backfill file changed since the backfill started",
                type="source_changed",
                non_retryable=True,
            )

    def _total(self, digest: str, count: Any) -> int:
        with self._lock:
            if digest in self._totals:
                return self._totals[digest]
        total = int(count())
        with self._lock:
            self._totals = {digest: total}
        return total

    def _locomo_items(self, path: Path, source: BackfillSource) -> list[SourceItem]:
        key = (source.digest, source.format == "locomo-pairs")
        with self._lock:
            cached = self._locomo.get(key)
        if cached is None:
            try:
                cached = load_locomo(path, pairs=key[1])
            except (OSError, ValueError) as exc:
                raise ApplicationError(
                    type(exc).__name__, type="source_invalid", non_retryable=True
                ) from None
            with self._lock:
                self._locomo = {key: cached}
        return cached
