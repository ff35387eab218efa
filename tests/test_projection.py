"""The tier projections as Markdown (TIER-01, TIER-03, TIER-07, TIER-10, PROV-05, AMB-20): where each
tier's observation goes, the exact line it becomes, its id, and that a replay writes nothing."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tempomem.storage.intake_records import IntakePayload, build_payload
from tempomem.storage.markdown import iter_bullets
from tempomem.storage.projection import journal_identity, observation_id, project
from tempomem.storage.turn import CompletedTurn

# The day file is named by the UTC date of the admission instant (AMB-20).
AT = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)


def payload(tier: str, answer: str = "Ana moved to Lisbon.", run_id: str = "r1") -> IntakePayload:
    turn = CompletedTurn(
        run_id=run_id,
        conversation_id="web:conv-7",
        speaker_kind="human-turn",
        user_text="Where does Ana live?",
        final_answer=answer,
        admitted_at=AT,
    )
    mode = "capture" if tier == "bujo" else "append-host-summary"
    return build_payload(turn, write_mode=mode, tier=tier)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tier", "folder", "prefix"), [("lite", "daily", "h-"), ("bujo", "audit", "a-")])
def test_lite_and_bujo_project_one_line_per_record(
    tmp_path: Path, tier: str, folder: str, prefix: str
) -> None:
    p = payload(tier)
    result = project(tmp_path, p)
    assert (result.folder, result.day) == (folder, "2026-12-01")
    assert result.bullet.id == prefix + p.id[:40] == observation_id(p)
    assert result.added == (result.bullet,)
    b = result.bullet
    assert (b.signifier, b.type, b.status, b.src) == ("–", "observation", "open", "assistant")
    # TIER-11, PROV-10: the host's conversation id, kept as the line's source session
    assert (b.text, b.recorded, b.source_session) == (p.summary, p.admitted_at, "web:conv-7")
    assert [(day, x) for day, x in iter_bullets(tmp_path, folder)] == [("2026-12-01", b)]
    assert (tmp_path / folder / "2026-12-01.md").is_file()
    other = "audit" if folder == "daily" else "daily"
    assert not (tmp_path / other).exists()
    # A replay (a crash after the write) adds nothing and says so.
    again = project(tmp_path, p)
    assert again.added == () and again.bullet == b
    assert len(list(iter_bullets(tmp_path, folder))) == 1


def test_journal_lines_are_identified_by_their_normalised_text(tmp_path: Path) -> None:
    first = payload("journal", "Ana  moved\tto Lisbon.", run_id="r1")
    second = payload("journal", " Ana moved to Lisbon. ", run_id="r2")  # another turn, the same observation
    assert observation_id(first) == "j-" + journal_identity(first.summary)[:40]
    assert project(tmp_path, first).added != ()
    assert project(tmp_path, second).added == ()
    assert len(list(iter_bullets(tmp_path, "daily"))) == 1
    assert project(tmp_path, payload("journal", "ana moved to Lisbon.", run_id="r3")).added != ()  # case kept


def test_journal_identity_is_nfkc_and_whitespace_normalised_sha256() -> None:
    assert journal_identity("Ana moved") == hashlib.sha256(b"Ana moved").hexdigest()
    assert journal_identity("  Ana \n\t moved ") == journal_identity("Ana moved")
    assert journal_identity("\uff21na moved") == journal_identity("Ana moved")  # fullwidth A → A (NFKC)
    assert journal_identity("ana moved") != journal_identity("Ana moved")
