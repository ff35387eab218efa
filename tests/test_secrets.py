"""Secrets are redacted on every path that writes memory, before anything reaches disk (issue #13 item 4);
Remember still refuses them (AMB-26, widened); ordinary chat is left alone."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tempomem.storage.admission import admit_turn
from tempomem.storage.credentials import contains_credential
from tempomem.storage.intake import Intake
from tempomem.storage.projection import project
from tempomem.storage.secrets import MARKER, redact
from tempomem.storage.turn import CompletedTurn
from tests.helpers.locomo import require_locomo

REPO = Path(__file__).resolve().parents[1]
# Generated for this test in each vendor's layout; none is a real key.
KEYS = [
    "sk-proj-Q2x9fJ3kL0pVb7nT1sYw4eRz8uIa6cHd5gMo",
    "sk-ant-api03-Zr4tY8uI2oP6aS0dF3gH7jK1lQ5wE9rT",
    "sk-svcacct-Lm3Nb8Vc2Xz7Qw1Er5Ty9Ui4Op0As6Df",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "github_pat_11AB2CD3E4F5G6H7I8J9K0_lmnopqrstuvwxyzABCDEFGHIJKLMNOPQRST",
    "AIzaSyD4-qWeRtYuIoPaSdFgHjKlZxCvBnM12345",
    "AKIAIOSFODNN7EXAMPLE",
]
PHRASES = ["api key: zq-8842-abcd", "my password is hunter2-2026", "postgres://app:S3cr3tPw@db.local/prod"]


def secret_turn(run_id: str = "sec-1") -> CompletedTurn:
    keys = " and ".join(KEYS)
    return CompletedTurn(
        run_id=run_id,
        conversation_id="web:sec",
        speaker_kind="human-turn",
        user_text=f"Please remember my keys {keys}; also {PHRASES[0]}.",
        final_answer=f"Stored {keys}. Also {PHRASES[1]} and {PHRASES[2]}.",
        admitted_at=datetime(2026, 12, 2, 10, 0, tzinfo=UTC),
    )


def every_file_text(root: Path) -> str:
    out = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            out.append((Path(dirpath) / name).read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


def leaked(text: str) -> list[str]:
    return [k for k in KEYS if k in text] + [
        s for s in ("zq-8842-abcd", "hunter2-2026", "S3cr3tPw") if s in text
    ]


@pytest.mark.parametrize(
    ("tier", "write_mode"),
    [("lite", "append-host-summary"), ("journal", "append-host-summary"), ("bujo", "capture")],
)
def test_no_tier_writes_a_secret_to_disk(tmp_path: Path, tier: str, write_mode: str) -> None:
    intake = Intake(tmp_path)
    result = admit_turn(
        intake, secret_turn(), tier=tier, write_mode=write_mode, capture_cron=None, capture_webhook=None
    )  # type: ignore[arg-type]
    assert result.intake_id is not None
    payload = intake.load_payload(result.intake_id)
    project(tmp_path, payload)
    on_disk = every_file_text(tmp_path)
    assert leaked(on_disk) == []
    assert MARKER in payload.summary
    if write_mode == "capture":  # what the model would be sent
        assert payload.capture_user_text and MARKER in payload.capture_user_text
        assert payload.capture_answer and leaked(payload.capture_answer) == []


def test_redaction_keeps_the_sentence_readable() -> None:
    text, n = redact(f"Use {KEYS[0]} for the staging bot, api key: zq-8842-abcd for prod.")
    assert text == f"Use {MARKER} for the staging bot, api key: {MARKER} for prod." and n == 2


@pytest.mark.parametrize("secret", KEYS + PHRASES)
def test_remember_refuses_every_format(secret: str) -> None:
    assert contains_credential(f"note this: {secret}")


@pytest.mark.parametrize(
    "ordinary",
    [
        "The password is a secret between us.",
        "My token of appreciation was a cake.",
        "I skipped sk-8 practice; see ghp notes tomorrow.",
        "Flight AA1234 leaves at 10:30 from gate B22.",
    ],
)
def test_ordinary_text_is_left_alone(ordinary: str) -> None:
    assert redact(ordinary) == (ordinary, 0) and not contains_credential(ordinary)


def test_no_locomo_turn_is_redacted() -> None:
    locomo = require_locomo()
    texts = [
        t["text"]
        for sample in json.loads(locomo.read_text())
        for key, value in sample["conversation"].items()
        if key.startswith("session_") and isinstance(value, list)
        for t in value
    ]
    assert len(texts) > 2000
    assert [t for t in texts if redact(t)[1]] == []


def test_every_redaction_is_counted_and_quotes_around_a_value_are_kept() -> None:
    assert redact(f"{KEYS[0]} and {KEYS[1]}")[1] == 2
    urls = "postgres://bob:hunter2x@db.local/x and https://al:s3cr3t99@api.local/"
    assert redact(urls) == (f"postgres://bob:{MARKER}@db.local/x and https://al:{MARKER}@api.local/", 2)
    labelled = 'password: "hunter2-pass" and token = \'tok-88421-z\' ok'
    assert redact(labelled) == (f'password: "{MARKER}" and token = \'{MARKER}\' ok', 2)
