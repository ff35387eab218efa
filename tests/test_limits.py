"""Every bound of the reference page as a test assertion (REQUIREMENTS.md §20: "make each one a test
assertion"). The expected values are written here from the spec's table, not read from the code, so a
changed constant fails by its LIM id. Behaviour of each bound is tested where it is used; this file pins
the numbers."""

from __future__ import annotations

import re
import typing

import pytest
from pydantic import ValidationError

from tempomem.capture import contracts
from tempomem.config import CaptureConfig
from tempomem.recall.shaping import RecallHit, render_hit_line
from tempomem.storage import consolidation, limits
from tempomem.storage.limits import KIB, MIB

# (LIM id, the constant, the spec's value)
CONSTANTS = [
    ("LIM-05", limits.MAX_ACTIVE_RECORDS, 4096),
    ("LIM-06", limits.MAX_RECORD_BYTES, 640 * 1024),
    ("LIM-07", limits.MAX_RESOLVED_RECEIPTS, 4096),
    ("LIM-08", limits.LEDGER_ENTRY_BYTES, 129),
    ("LIM-09", limits.LEDGER_SHARDS, 256),
    ("LIM-10", limits.CATALOG_SLOTS, 256),
    ("LIM-11", (limits.DIR_MODE, limits.FILE_MODE), (0o700, 0o600)),
    ("LIM-12", limits.RUN_ID_HASH_HEX_LEN, 64),
    ("LIM-13", limits.JOURNAL_EMBED_BATCH, 32),
    ("LIM-14", (limits.JOURNAL_QUEUE_MAX_ITEMS, limits.JOURNAL_QUEUE_MAX_BYTES), (256, 2 * 1024 * 1024)),
    ("LIM-15", limits.CAPTURE_COMPLETION_MAX_UTF16, 262_144),
    ("LIM-16", limits.SHUTDOWN_DRAIN_SECONDS, 10),
    ("LIM-17", limits.EXTRACTION_MAX_MEMORIES, 8),
    ("LIM-18", limits.CHAT_CALLS_PER_TURN, 3),
    ("LIM-20", limits.ASSISTANT_SALIENCE_FLOOR, 0.5),
    ("LIM-21", limits.SAME_ENTITY_LINES, 3),
    ("LIM-22", limits.LLM_TIMEOUT_MS_DEFAULT, 60_000),
    ("LIM-23", limits.CAPTURE_FOCUS_MAX_BYTES, 2048),
    ("LIM-24", limits.SIDECAR_MAX_BYTES, 32 * 1024 * 1024),
    ("LIM-25", limits.SIDECAR_MAX_ENTRIES, 131_072),
    ("LIM-28", limits.GUIDANCE_WINDOW, 8),
    ("LIM-29", limits.GUIDANCE_MAX_LINES, 6),
    ("LIM-30", limits.SEMANTIC_EVIDENCE_COSINE, 0.5),
    ("LIM-31", limits.NUMERIC_ANCHOR_BONUS, 0.15),
    ("LIM-32", limits.NAME_ANCHOR_BONUS, 0.08),
    ("LIM-33", limits.NAME_ANCHOR_MIN_LETTERS, 3),
    ("LIM-34", limits.TAIL_MARGIN, 0.15),
    ("LIM-35", limits.DELIBERATE_FLOOR, 0.65),
    ("LIM-36", limits.CONFLICT_CHECK_DEPTH, 8),
    ("LIM-38", limits.AUTO_BLOCK_FLOOR, 0.62),
    ("LIM-39", limits.AUTO_BLOCK_WINDOW, 0.04),
    ("LIM-40", limits.AUTO_BLOCK_LINES, 3),
    ("LIM-41", limits.AUTO_BLOCK_BUDGET_BYTES, 1536),  # 1.5 KB read as KiB (AMB-14)
    ("LIM-42", limits.AUTO_LINE_MAX_BYTES, 360),
    ("LIM-43", limits.AUTO_CONTEXT_MAX_BYTES, 2560),  # "about 2.5 KB" (AMB-04)
    ("LIM-44", limits.SHORT_MESSAGE_CODE_POINTS, 16),
    ("LIM-46", consolidation.GRAPH_SCAN_CEILING, 10_000),
    ("LIM-47", consolidation.MAX_GROUPS, 50),
    ("LIM-55", limits.OLLAMA_ENDPOINT_DEFAULT, "http://localhost:11434"),
    ("LIM-56", limits.EMBEDDING_DIM_DEFAULT, 768),
    ("LIM-62", limits.DELIBERATE_SUPERSET, 50),
    ("LIM-63", limits.SOURCE_SESSION_MAX_BYTES, 512),
]


@pytest.mark.parametrize(("lim", "actual", "expected"), CONSTANTS, ids=[c[0] for c in CONSTANTS])
def test_constant_is_the_reference_value(lim: str, actual: object, expected: object) -> None:
    assert actual == expected, lim


def test_units_are_binary() -> None:
    assert (KIB, MIB) == (1024, 1_048_576)  # the spec's conventions: KiB and MiB are binary


def test_LIM37_scores_render_with_three_decimals() -> None:
    assert render_hit_line(RecallHit(id="a", score=0.8, text="x")).startswith("0.800 ")
    assert render_hit_line(RecallHit(id="a", score=0.12345, text="x")).startswith("0.123 ")


def test_LIM64_INTENT13_inclusive_offset_end_is_the_last_millisecond_of_the_day() -> None:
    pattern = re.compile(contracts.VALID_TO_PATTERN)
    for ok in ("2026-07-06", "2026-07-06T23:59:59.999Z", "2026-07-06T23:59:59.999+02:00"):
        assert pattern.match(ok), ok
    for bad in ("2026-07-06T23:59:59Z", "2026-07-06T23:59:59.998Z", "2026-07-06T12:00:00.000Z",
                "2026-07-06T23:59:59.999"):
        assert not pattern.match(bad), bad


def test_LIM65_reconcile_actions_are_exactly_four() -> None:
    assert typing.get_args(contracts.ReconcileAction) == ("ADD", "UPDATE", "SUPERSEDE", "NOOP")


def test_LIM66_capture_only_kinds() -> None:
    assert typing.get_args(contracts.LabelKind) == ("fact", "preference", "lesson")
    CaptureConfig.model_validate({"only": ["fact", "preference", "lesson"]})
    for kind in ("task", "event", "note"):
        with pytest.raises(ValidationError):
            CaptureConfig.model_validate({"only": [kind]})
