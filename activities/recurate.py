"""Re-curation activities: re-admit archived capture turns, or curate them against a scratch copy.

Nothing but ids, counts, digests and a path leaves here (issue #6 item 2; ARCHITECTURE.md §2).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tempomem.activities.context import StoreContext, utc_now
from tempomem.activities.heartbeat import run_blocking
from tempomem.messages.capture import CurationInput
from tempomem.messages.recurate import (
    RECURATE_ADMIT,
    RECURATE_DRY_RUN,
    RecurateAdmitInput,
    RecurateAdmitResult,
    RecurateDryRunInput,
    RecurateDryRunResult,
)
from tempomem.storage import replay_sidecar
from tempomem.storage.fsio import atomic_write, ensure_private_dir, exclusive_lock
from tempomem.storage.intake_records import (
    IntakeError,
    IntakePayload,
    RecordState,
    UnknownRecordError,
    fit_record,
    intake_id,
)
from tempomem.storage.store_ref import STORE_LOCK
from tempomem.storage.turn_archive import ArchivedTurn, TurnArchive, TurnArchiveError

RECURATE_DIR = ".recurate"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# What a scratch copy needs to curate exactly like the store: canonical files plus the derived index.
_SCRATCH_ITEMS = ("daily", "graph.jsonl", replay_sidecar.SIDECAR_NAME, "index")


def recurate_payload(original: IntakePayload, *, run_id: str, model: str | None) -> IntakePayload:
    """The re-curation record of one archived turn: same admitted fields (so the same day file, the same
    ``recorded=`` instant and provenance), a derived run id and id, the original id and a model override."""
    derived = f"recurate:{run_id}:{original.id}"
    # fit_record: the two extra fields could push a record admitted at the size cap over it (AMB-12).
    return fit_record(
        original.model_copy(
            update={
                "id": intake_id(derived),
                "run_id": derived,
                "recurate_of": original.id,
                "model_override": model,
            }
        )
    )


def load_archived(archive: TurnArchive, turn: ArchivedTurn) -> IntakePayload:
    payload = IntakePayload.model_validate_json(archive.load(turn))
    if payload.id != turn.id:
        raise TurnArchiveError(f"archived turn {turn.id} holds another record")
    return payload


def parse_day(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


def _fail(kind: str, exc: BaseException | None = None) -> ApplicationError:
    """Content-free: a category and (maybe) the exception type; never text."""
    return ApplicationError(type(exc).__name__ if exc else kind, type=kind, non_retryable=True)


@dataclass(frozen=True)
class _DiffStats:
    text: str
    files_changed: int
    lines_added: int
    lines_removed: int
    superseded: int


class RecurateActivities:
    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    def _check(self, store_id: str, run_id: str) -> None:
        self.ctx.check(store_id)
        if self.ctx.tier != "bujo" or self.ctx.write_mode != "capture":
            raise _fail("not_capture_store")
        if not RUN_ID.fullmatch(run_id):
            raise _fail("bad_request")

    def _range(self, since: str, until: str | None) -> tuple[date, date | None]:
        try:
            return date.fromisoformat(since), parse_day(until)
        except ValueError:
            raise _fail("bad_request") from None

    # -- real run ---------------------------------------------------------------------------------------
    @activity.defn(name=RECURATE_ADMIT)
    def admit(self, inp: RecurateAdmitInput) -> RecurateAdmitResult:
        """Re-admit up to ``max_items`` archived turns after the cursor; report the pending derived ids."""
        self._check(inp.store_id, inp.run_id)
        since, until = self._range(inp.since, inp.until)
        archive = TurnArchive(self.ctx.root)
        intake = self.ctx.intake
        after = (inp.cursor_at, inp.cursor_id) if inp.cursor_id else None
        try:
            turns = archive.turns(since=since, until=until, after=after, limit=inp.max_items + 1)
            admitted = duplicates = 0
            capture: list[str] = []
            for turn in turns[: inp.max_items]:
                payload = recurate_payload(load_archived(archive, turn), run_id=inp.run_id, model=inp.model)
                if intake.admit(payload) == "admitted":
                    admitted += 1
                else:
                    duplicates += 1  # INTAKE-03: the ledger remembers it, even after its receipt is pruned
                try:
                    state = intake.view(payload.id, now=utc_now()).state
                except UnknownRecordError:  # resolved long ago, receipt pruned
                    state = RecordState.RESOLVED
                if state is RecordState.PENDING:
                    capture.append(payload.id)
        except (TurnArchiveError, IntakeError, ValueError) as exc:
            raise _fail("archive_error", exc) from None
        handled = turns[: inp.max_items]
        last = handled[-1] if handled else None
        return RecurateAdmitResult(
            cursor_at=last.admitted_at if last else inp.cursor_at,
            cursor_id=last.id if last else inp.cursor_id,
            eof=len(turns) <= inp.max_items,
            turns=len(handled),
            admitted=admitted,
            duplicates=duplicates,
            capture=capture,
            tier=self.ctx.tier,
            write_mode=self.ctx.write_mode,
        )

    # -- dry run ------------------------------------------------------------------------------------------
    @activity.defn(name=RECURATE_DRY_RUN)
    async def dry_run(self, inp: RecurateDryRunInput) -> RecurateDryRunResult:
        """Curate the range against a scratch copy of the store; write the Markdown diff, owner-only."""
        from tempomem.activities.curation import CurationActivities

        self._check(inp.store_id, inp.run_id)
        since, until = self._range(inp.since, inp.until)
        root = self.ctx.root
        out_dir = root / RECURATE_DIR
        scratch = out_dir / f"{inp.run_id}.scratch"
        try:
            ensure_private_dir(out_dir, strict=True)
            base = await run_blocking(lambda: _make_scratch(root, scratch))
            archive = TurnArchive(root)
            turns = archive.turns(since=since, until=until)
            sctx = StoreContext(
                root=scratch,
                tier=self.ctx.tier,
                write_mode=self.ctx.write_mode,
                task_queue=self.ctx.task_queue,
                embedder=self.ctx.embedder,
                capture=self.ctx.capture,
                turn_archive_days=0,
            )
            curation = CurationActivities(sctx)
            calls = 0
            for turn in turns:
                payload = recurate_payload(load_archived(archive, turn), run_id=inp.run_id, model=inp.model)
                sctx.intake.admit(payload)
                ci = CurationInput(payload.id, sctx.store_id, final_attempt=False)
                for stage in (curation.extract, curation.review, curation.reconcile):
                    calls += (await stage(ci)).model_calls
            stats = await run_blocking(lambda: _diff(root, scratch, base, inp, len(turns)))
            path = out_dir / f"{inp.run_id}.diff"
            data = stats.text.encode("utf-8")
            atomic_write(path, data)
        except (TurnArchiveError, IntakeError, OSError, ValueError) as exc:
            raise _fail("archive_error", exc) from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return RecurateDryRunResult(
            turns=len(turns),
            model_calls=calls,
            diff_path=str(path),
            diff_sha256=hashlib.sha256(data).hexdigest(),
            files_changed=stats.files_changed,
            lines_added=stats.lines_added,
            lines_removed=stats.lines_removed,
            superseded=stats.superseded,
        )


def _make_scratch(root: Path, scratch: Path) -> dict[str, str]:
    """Copy what curation reads and writes; return the daily files' text as the diff base (same instant)."""
    shutil.rmtree(scratch, ignore_errors=True)
    ensure_private_dir(scratch, strict=True)
    base: dict[str, str] = {}
    with exclusive_lock(root / STORE_LOCK):  # one consistent snapshot: no commit lands mid-copy
        for name in _SCRATCH_ITEMS:
            src = root / name
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, scratch / name)
            elif src.is_file() and not src.is_symlink():
                shutil.copy2(src, scratch / name)
        for path in sorted((root / "daily").glob("*.md")):
            base[path.name] = path.read_text(encoding="utf-8")
    return base


def _diff(
    root: Path, scratch: Path, base: dict[str, str], inp: RecurateDryRunInput, turns: int
) -> _DiffStats:
    after = {p.name: p.read_text(encoding="utf-8") for p in sorted((scratch / "daily").glob("*.md"))}
    chunks: list[str] = []
    files = added = removed = 0
    for name in sorted(set(base) | set(after)):
        old, new = base.get(name, ""), after.get(name, "")
        if old == new:
            continue
        files += 1
        for line in difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/daily/{name}" if name in base else "/dev/null",
            tofile=f"b/daily/{name}",
        ):
            if not line.endswith("\n"):
                line += "\n\\ No newline at end of file\n"
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
            chunks.append(line)
    before_sup = replay_sidecar.superseded(root)
    after_sup = replay_sidecar.superseded(scratch)
    new_sup = sorted((old, e.new_id) for old, e in after_sup.items() if old not in before_sup)
    header = [
        f"# tempomem recurate {inp.run_id} (dry run): {turns} archived turn(s) admitted "
        f"{inp.since} .. {inp.until or 'now'}, model {inp.model or '(configured)'}\n",
        *(f"# supersedes: {old} -> {new}\n" for old, new in new_sup),
    ]
    return _DiffStats("".join(header + chunks), files, added, removed, len(new_sup))


def archived_count(root: Path, *, since: date, until: date | None) -> int:
    """How many archived turns a range holds (the CLI refuses an empty range before starting anything)."""
    return len(TurnArchive(root).turns(since=since, until=until))


def diff_path(root: Path, run_id: str) -> Path:
    return Path(root) / RECURATE_DIR / f"{run_id}.diff"


__all__ = [
    "RUN_ID",
    "RecurateActivities",
    "archived_count",
    "diff_path",
    "recurate_payload",
]
