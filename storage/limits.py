"""Every bound from the reference page in one place (REQUIREMENTS.md §20, LIM-*).

Other modules import these names; tests assert the values so a change is deliberate.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * 1024

# Durable retry (INTAKE-13, AMB-10)
RETRY_MAX_ATTEMPTS = 16  # LIM-01
RETRY_FIRST_DELAY_SECONDS = 60  # LIM-02
RETRY_CAP_SECONDS = 6 * 3600  # LIM-03
RETRY_COEFFICIENT = 2  # AMB-10: no jitter, deterministic

# Intake bounds (INTAKE-11, INTAKE-21, AMB-11, AMB-12)
MAX_ACTIVE_RECORDS = 4096  # LIM-05
MAX_RECORD_BYTES = 640 * KIB  # LIM-06
MAX_RESOLVED_RECEIPTS = 4096  # LIM-07
LEDGER_ENTRY_BYTES = 129  # LIM-08
LEDGER_SHARDS = 256  # LIM-09
CATALOG_SLOTS = 256  # LIM-10
DIR_MODE = 0o700  # LIM-11
FILE_MODE = 0o600  # LIM-11
RUN_ID_HASH_HEX_LEN = 64  # LIM-12
SUMMARY_MAX_BYTES = 16 * KIB  # AMB-12
SUMMARY_ANSWER_MAX_BYTES = 2000  # AMB-21: first 2,000 UTF-8 bytes of the final answer

# Journal tier (TIER-04, TIER-05)
JOURNAL_EMBED_BATCH = 32  # LIM-13
JOURNAL_QUEUE_MAX_ITEMS = 256  # LIM-14
JOURNAL_QUEUE_MAX_BYTES = 2 * MIB  # LIM-14

# Capture (CAP-*)
CAPTURE_COMPLETION_MAX_UTF16 = 262_144  # LIM-15
SHUTDOWN_DRAIN_SECONDS = 10  # LIM-16
EXTRACTION_MAX_MEMORIES = 8  # LIM-17
CHAT_CALLS_PER_TURN = 3  # LIM-18
ASSISTANT_SALIENCE_FLOOR = 0.5  # LIM-20
SAME_ENTITY_LINES = 3  # LIM-21
LLM_TIMEOUT_MS_DEFAULT = 60_000  # LIM-22
CAPTURE_FOCUS_MAX_BYTES = 2048  # LIM-23
# Parallel model stages, ordered commits (issue #15 item 1; docs/decisions.md "Parallel model calls").
LLM_CONCURRENCY_DEFAULT = 4  # memory.llm.concurrency: extraction/review calls in flight per store
LLM_CONCURRENCY_MAX = 64
ORDER_RECHECK_SECONDS = 30  # a capture waiting for its turn looks again this often without a signal
ORDER_WAIT_MAX_SECONDS = 300  # then it stops waiting for an earlier turn that is not progressing
# Group commit of the index in batch runs (issue #15 item 2; recall/index/backlog.py).
INDEX_GROUP_MAX_LINES = 64  # a backfill's lines reach the index in groups of at most this many
INDEX_GROUP_MAX_SECONDS = 2.0  # or when the oldest deferred line has waited this long

# Replay sidecar (RPL-05)
SIDECAR_MAX_BYTES = 32 * MIB  # LIM-24
SIDECAR_MAX_ENTRIES = 131_072  # LIM-25

# Recall scoring (REC-*, AMB-31)
GUIDANCE_WINDOW = 8  # LIM-28
GUIDANCE_MAX_LINES = 6  # LIM-29
BACKGROUND_MEDIAN_LEAD = 0.05  # AMB-16: a labelled line must lead the top-8 median by this much
SEMANTIC_EVIDENCE_COSINE = 0.5  # LIM-30
NUMERIC_ANCHOR_BONUS = 0.15  # LIM-31
NAME_ANCHOR_BONUS = 0.08  # LIM-32
NAME_ANCHOR_MIN_LETTERS = 3  # LIM-33
TAIL_MARGIN = 0.15  # LIM-34
DELIBERATE_FLOOR = 0.65  # LIM-35
CONFLICT_CHECK_DEPTH = 8  # LIM-36
AUTO_BLOCK_FLOOR = 0.62  # LIM-38
AUTO_BLOCK_WINDOW = 0.04  # LIM-39
AUTO_BLOCK_LINES = 3  # LIM-40
AUTO_BLOCK_BUDGET_BYTES = 1536  # LIM-41, AMB-14
AUTO_LINE_MAX_BYTES = 360  # LIM-42
AUTO_CONTEXT_MAX_BYTES = 2560  # LIM-43, AMB-04
SHORT_MESSAGE_CODE_POINTS = 16  # LIM-44
DELIBERATE_SUPERSET = 50  # LIM-62
RRF_K = 60  # AMB-31
RRF_TIE_BREAK_WEIGHT = 1e-4  # AMB-31
SALIENCE_TIE_BREAK_WEIGHT = 1e-5  # AMB-31

# Provenance (PROV-15, AMB-03)
SOURCE_SESSION_MAX_BYTES = 512  # LIM-63

# Config defaults (CFG-*)
OLLAMA_ENDPOINT_DEFAULT = "http://localhost:11434"  # LIM-55
EMBEDDING_DIM_DEFAULT = 768  # LIM-56
MAX_BYTES_DEFAULT = 2560  # AMB-04
PROFILE_MAX_CODE_POINTS = 600  # LIM-57


def retry_delay_seconds(attempt: int, first_delay_seconds: int = RETRY_FIRST_DELAY_SECONDS) -> int:
    """Delay before ``attempt`` (1-based) under AMB-10: attempt 1 runs at once, then 1, 2, 4 … min capped.

    ``first_delay_seconds`` scales the whole schedule (tests shrink it); the cap keeps its ratio to the
    first delay, so the shape of the schedule never changes.
    """
    if attempt < 1 or attempt > RETRY_MAX_ATTEMPTS:
        raise ValueError(f"attempt must be 1..{RETRY_MAX_ATTEMPTS}, got {attempt}")
    if attempt == 1:
        return 0
    cap = first_delay_seconds * (RETRY_CAP_SECONDS // RETRY_FIRST_DELAY_SECONDS)
    return min(first_delay_seconds * RETRY_COEFFICIENT ** (attempt - 2), cap)
