"""Write-mode and skip rules applied in the host before admission (WM-01..WM-18, AMB-19, AMB-21).

Pure functions: no I/O, no clock. The intake module turns their output into a durable record.
"""

from __future__ import annotations

import re
from typing import Literal

from tempomem.storage.limits import SUMMARY_ANSWER_MAX_BYTES
from tempomem.storage.secrets import redact
from tempomem.storage.turn import CompletedTurn, SkipReason

WriteMode = Literal["disabled", "append-host-summary", "capture"]
SourceLabel = Literal["user", "scheduled-task", "webhook"]

NO_OP_SENTINEL = "NOTHING_TO_REPORT"
# AMB-19: the last line ends with the sentinel preceded by start-of-line or a non-word character.
_SENTINEL_TAIL = re.compile(r"(?:^|\W)" + NO_OP_SENTINEL + r"$")
_WHITESPACE = re.compile(r"\s+")
# Terminal escape sequences (CSI/OSC/two-byte ESC forms), then any remaining C0/C1 control character and the
# Unicode bidi controls: none belongs in canonical Markdown, where they hide or reorder what a reader sees.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str) -> str:
    """``text`` without terminal escapes, control characters (tab and line breaks kept) or bidi controls."""
    return _CONTROLS.sub("", _ANSI.sub("", text))


_SUMMARY_PREFIX: dict[SourceLabel, str] = {
    "user": "Assistant",
    "scheduled-task": "Scheduled task, assistant",
    "webhook": "Webhook, assistant",
}


def is_no_op_answer(final_answer: str) -> bool:
    """WM-05 / AMB-19: case-sensitive sentinel match on the whole answer or its final line.

    One search over the whole answer is the final line's rule: the sentinel must end the text, and a
    line break before it is a non-word character like any other.
    """
    return bool(_SENTINEL_TAIL.search(final_answer.rstrip()))


def skip_reason(
    turn: CompletedTurn, *, write_mode: WriteMode, capture_cron: bool | None, capture_webhook: bool | None
) -> SkipReason | None:
    """Why this turn must not be admitted, or None to admit it."""
    if write_mode == "disabled":
        return SkipReason.WRITE_DISABLED
    if is_no_op_answer(turn.final_answer):
        return SkipReason.NO_OP_SENTINEL
    if write_mode == "append-host-summary" and not clean_text(turn.final_answer).strip():
        return SkipReason.EMPTY_ANSWER  # an "Assistant: " bullet would say nothing
    # WM-15: only host metadata counts (WM-16); unset or true keeps the default (admit).
    if turn.trigger_kind == "cron" and capture_cron is False:
        return SkipReason.CRON_SWITCH_OFF
    if turn.trigger_kind == "webhook" and capture_webhook is False:
        return SkipReason.WEBHOOK_SWITCH_OFF
    return None


def source_label(turn: CompletedTurn) -> SourceLabel:
    """WM-12: an honest label for trigger turns, never "user"."""
    if turn.trigger_kind == "cron":
        return "scheduled-task"
    if turn.trigger_kind == "webhook":
        return "webhook"
    return "user"


def truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut at a UTF-8 boundary, deterministically (AMB-12: a retried admission is byte-identical)."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def host_summary(turn: CompletedTurn) -> str:
    """AMB-21 / WM-13: the deterministic host observation, built from the assistant answer only."""
    # Secrets go before anything else: a truncation could otherwise cut a key below what is recognised.
    answer = _WHITESPACE.sub(" ", clean_text(redact(turn.final_answer)[0])).strip()
    # Canonical Markdown keeps metadata in HTML comments; an answer must never open or close one.
    answer = answer.replace("<!--", "&lt;!--").replace("-->", "--&gt;")
    answer = truncate_utf8(answer, SUMMARY_ANSWER_MAX_BYTES)
    return f"{_SUMMARY_PREFIX[source_label(turn)]}: {answer}"


def capture_parts(turn: CompletedTurn) -> tuple[str | None, str]:
    """What capture curates (WM-04): the owner's text, if any, and the assistant answer.

    Trigger prompts never enter memory (WM-11): cron/webhook turns keep the answer only, and their honest
    source label travels separately (WM-12). A host-approved capture text replaces the raw user text
    (HOST-05).
    """
    answer = redact(turn.final_answer)[0]  # no secret reaches the record, the archive or the model
    if turn.trigger_kind != "none":
        return None, answer
    user = turn.capture_text if turn.capture_text is not None else turn.user_text
    return (redact(user)[0] or None), answer
