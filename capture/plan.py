"""The retained semantic plan and the deterministic host rules around the model (CAP-24..CAP-72).

Pure functions over validated model output: no I/O, no clock. The plan is what the intake keeps beside a
pending record (CAP-75), so a retry replays it without another model call.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from tempomem.capture.contracts import ExtractionPlan, ReconcileDecision, ReviewDecision, ReviewLine
from tempomem.storage.limits import ASSISTANT_SALIENCE_FLOOR

if TYPE_CHECKING:
    from tempomem.storage.intake_records import IntakePayload

PLAN_VERSION = 1
Action = Literal["ADD", "UPDATE", "SUPERSEDE", "NOOP", "DROP"]
# A calendar date alone or as the head of an ISO instant ("2026-12-03T13:00:00.000Z"): a word boundary
# would miss the instant, since "T" is a word character (CAP-38).
_ISO_DATE = re.compile(r"(?<![\w-])(\d{4}-\d{2}-\d{2})(?![\d-])")


class _Model(BaseModel):
    # hide_input_in_errors: a plan holds memory text; a refused one never carries it into an error.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class PlanLabel(_Model):
    kind: Literal["fact", "preference", "lesson"]
    scope: str
    key: str
    value: str
    attribution: Literal["owner", "assistant", "document"]


class PlanMemory(_Model):
    index: int
    text: str
    kind: str  # the extractor's kind; a task is stored as a note (CAP-63)
    source: str  # host-bounded (CAP-25)
    salience: float
    entities: tuple[str, ...]  # graph entity ids, only those extracted for this memory (CAP-29)
    labels: tuple[PlanLabel, ...] = ()
    dropped: str | None = None  # "salience" | "review" | "only"
    # capture.intentLifecycle only, and only from the host-verified owner's own words (INTENT-05/09).
    intent_state: str | None = None  # planned | pending | done | abandoned
    valid_to: str | None = None  # inclusive civil end, stored as due= (INTENT-10)


class PlanEntity(_Model):
    id: str
    name: str
    type: str


class PlanRelation(_Model):
    from_id: str
    relation: str
    to_id: str


class PlanDecision(_Model):
    index: int
    action: Action
    target_id: str | None = None
    text: str | None = None
    via: Literal["structural", "novel", "classifier", "final_attempt", "guard", "only"]
    thread_to: str | None = None  # a task the new note is threaded to (CAP-64)
    invalidate: str | None = None  # a superseded task marked invalidated (CAP-65)


class RetainedPlan(_Model):
    version: int = PLAN_VERSION
    memories: tuple[PlanMemory, ...]
    entities: tuple[PlanEntity, ...]
    relations: tuple[PlanRelation, ...]
    extraction_calls: int = 1
    reviewed: bool = False
    review_calls: int = 0
    decisions: tuple[PlanDecision, ...] | None = None
    reconcile_calls: int = 0
    committed: bool = False

    def to_bytes(self) -> bytes:
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> RetainedPlan:
        return cls.model_validate_json(data)

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def live(self) -> list[PlanMemory]:
        return [m for m in self.memories if m.dropped is None]


def fact_id(intake_id: str, index: int) -> str:
    """Run-derived fact ids (RPL-08): a replayed commit writes the very same ids."""
    return "c-" + hashlib.sha256(f"{intake_id}:{index}".encode()).hexdigest()[:40]


def entity_id(entity_type: str, name: str) -> str:
    """A stable graph id from type and name, so the same person seen in two turns is one node."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().casefold()
    slug = (
        re.sub(r"[^a-z0-9]+", "-", folded).strip("-")[:60] or hashlib.sha256(name.encode()).hexdigest()[:12]
    )
    prefix = "org" if entity_type == "organization" else entity_type
    return f"{prefix}:{slug}"


# INTENT-07: intention states map onto the existing note statuses.
INTENT_STATUS = {"planned": "scheduled", "pending": "open", "done": "done", "abandoned": "dropped"}


def build_plan(
    extracted: ExtractionPlan, *, speaker_kind: str, trigger_kind: str, has_user_text: bool
) -> RetainedPlan:
    """Apply the host rules to a validated extraction (CAP-25, CAP-26, CAP-29, CAP-45, CAP-63, CAP-69)."""
    owner_turn = speaker_kind == "human-turn" and trigger_kind == "none"
    ids = {e.ref: entity_id(e.type, e.name) for e in extracted.entities}
    memories: list[PlanMemory] = []
    for index, m in enumerate(extracted.memories):
        # CAP-25: a user claim counts as the owner's only on a host-verified owner turn with user text.
        source = m.source
        if source == "user" and not (owner_turn and has_user_text):
            source = "assistant"
        dropped = "salience" if source == "assistant" and m.salience < ASSISTANT_SALIENCE_FLOOR else None
        # INTENT-09: other speakers, triggers and assistant/tool/document claims supply no lifecycle.
        owners_words = owner_turn and has_user_text and source == "user"
        memories.append(
            PlanMemory(
                index=index,
                text=m.text,
                kind=m.kind,
                source=source,
                salience=m.salience,
                entities=tuple(ids[r] for r in m.entities),
                labels=tuple(
                    _gate_labels(m.labels, source=source, owner_turn=owner_turn, kind=m.kind, text=m.text)
                ),
                dropped=dropped,
                intent_state=m.intent_state if owners_words else None,
                valid_to=m.valid_to if owners_words else None,
            )
        )
    entities = tuple(PlanEntity(id=ids[e.ref], name=e.name, type=e.type) for e in extracted.entities)
    relations = tuple(
        PlanRelation(from_id=ids[r.from_ref], relation=r.relation, to_id=ids[r.to_ref])
        for r in extracted.relations
    )
    return prune_graph(
        RetainedPlan(memories=tuple(memories), entities=_unique(entities), relations=_unique(relations))
    )


T = TypeVar("T")


def _unique(items: Iterable[T]) -> tuple[T, ...]:
    return tuple(dict.fromkeys(items))


def _gate_labels(labels: Sequence, *, source: str, owner_turn: bool, kind: str, text: str) -> list[PlanLabel]:
    """CAP-69 / AMB-27: labels pass host gates on provenance and scope; the model never grants ownership."""
    out: list[PlanLabel] = []
    owner_line = owner_turn and source == "user"
    attribution = "owner" if owner_line else ("document" if source == "document" else "assistant")
    for label in labels:
        if label.kind == "preference" and not owner_line:
            continue  # only the owner's own stated taste is a preference on this turn
        if label.scope.startswith("user:") and not owner_line:
            continue
        out.append(
            PlanLabel(
                kind=label.kind, scope=label.scope, key=label.key, value=label.value, attribution=attribution
            )
        )
    # AMB-27: the coarse owner fact for a user-sourced line on an owner turn, never for tasks (CAP-63).
    if owner_line and kind != "task" and not any(lab.kind == "fact" for lab in out):
        out.append(
            PlanLabel(kind="fact", scope="agent", key="owner:statement", value=text, attribution="owner")
        )
    return out


def prune_graph(plan: RetainedPlan) -> RetainedPlan:
    """CAP-26 / CAP-45 / CAP-70: drop entities and relations that only dropped lines named."""
    named = {e for m in plan.live() for e in m.entities}
    entities = tuple(e for e in plan.entities if e.id in named)
    relations = tuple(r for r in plan.relations if r.from_id in named and r.to_id in named)
    return plan.model_copy(update={"entities": entities, "relations": relations})


def review_lines(plan: RetainedPlan, *, owner_turn: bool) -> list[ReviewLine]:
    """CAP-40: assistant lines, and owner user lines without a preference label."""
    lines = []
    for m in plan.live():
        if m.source == "assistant" or (
            m.source == "user" and owner_turn and not any(lab.kind == "preference" for lab in m.labels)
        ):
            lines.append(ReviewLine(line=m.index + 1, text=m.text, source=m.source, owner=owner_turn))
    return lines


def apply_review(plan: RetainedPlan, decisions: Sequence[ReviewDecision]) -> RetainedPlan:
    """CAP-42..CAP-45: drops and preference labels only; text, source, entities, salience never change."""
    by_line = {d.line: d.decision for d in decisions}
    memories = []
    for m in plan.memories:
        verdict = by_line.get(m.index + 1)
        if verdict == "drop":
            m = m.model_copy(update={"dropped": "review"})
        elif verdict == "add_preference":
            label = PlanLabel(
                kind="preference", scope="agent", key="preference:stated", value=m.text, attribution="owner"
            )
            m = m.model_copy(update={"labels": (*m.labels, label)})
        memories.append(m)
    reviewed = plan.model_copy(update={"memories": tuple(memories), "reviewed": True, "review_calls": 1})
    return prune_graph(reviewed)


class Existing(_Model):
    """An existing current line offered to reconciliation."""

    id: str
    text: str
    type: str
    signifier: str
    recorded: str
    labels: tuple[PlanLabel, ...] = ()
    attr: str | None = None
    src: str | None = None
    entities: tuple[str, ...] = ()
    status: str = "open"
    due: str | None = None

    @property
    def is_task(self) -> bool:
        return self.type == "task" or self.signifier in ("[ ]", "[x]", "[>]", "[<]", "[-]")

    @property
    def protected_kind(self) -> bool:
        """Preference or lesson lines are replaced only by the owner's own word (CAP-53..CAP-55)."""
        return self.type in ("preference", "lesson") or any(
            lab.kind in ("preference", "lesson") for lab in self.labels
        )


def guard_decision(
    decision: ReconcileDecision, memory: PlanMemory, target: Existing | None, *, owner_turn: bool
) -> PlanDecision:
    """Host guards on one classifier decision (CAP-38, CAP-53..CAP-56, CAP-64, CAP-65)."""
    action = decision.action
    if target is not None and _changes_intention(memory, target) and action in ("UPDATE", "NOOP"):
        # INTENT-17: a supported intention change is a SUPERSEDE; the old sentence stays as history.
        return PlanDecision(
            index=memory.index,
            action="SUPERSEDE",
            target_id=target.id,
            text=decision.text or memory.text,
            via="guard",
        )
    if action in ("ADD", "NOOP") or target is None:
        return PlanDecision(index=memory.index, action=action, target_id=decision.target_id, via="classifier")
    owners_word = owner_turn and memory.source == "user"
    if target.protected_kind and not (owners_word and _owner_scoped(target)):
        # CAP-55: the change is added beside a protected preference or lesson line.
        return PlanDecision(index=memory.index, action="ADD", via="guard")
    if target.is_task:
        if action == "UPDATE":  # CAP-64: the task stays as written; the news is a note threaded to it
            return PlanDecision(
                index=memory.index, action="ADD", via="guard", thread_to=target.id, text=decision.text
            )
        return PlanDecision(
            index=memory.index,
            action="SUPERSEDE",
            target_id=target.id,
            text=decision.text,
            via="guard",
            invalidate=target.id,
        )  # CAP-65
    if action == "UPDATE" and target.protected_kind:
        # CAP-53: the owner's own word replaces the owner's preference or lesson, never in place: the old
        # line stays as superseded history.
        return PlanDecision(
            index=memory.index, action="SUPERSEDE", target_id=target.id, text=decision.text, via="guard"
        )
    if action == "UPDATE" and _dated_after(decision.text or "", target.recorded):
        # CAP-38: a dated UPDATE becomes a dated supersession, never an in-place rewrite of an older line.
        return PlanDecision(
            index=memory.index, action="SUPERSEDE", target_id=target.id, text=decision.text, via="guard"
        )
    return PlanDecision(
        index=memory.index, action=action, target_id=target.id, text=decision.text, via="classifier"
    )


def _changes_intention(memory: PlanMemory, target: Existing) -> bool:
    """INTENT-17/18: a new state or a new end changes an intention; a repeat without an end does not."""
    if memory.intent_state is None and memory.valid_to is None:
        return False
    new_status = INTENT_STATUS.get(memory.intent_state or "", target.status)
    return new_status != target.status or (memory.valid_to is not None and memory.valid_to != target.due)


def _owner_scoped(target: Existing) -> bool:
    return target.attr == "owner" and all(
        lab.scope == "agent" or lab.scope.startswith("user:") for lab in target.labels
    )


def _dated_after(text: str, target_recorded: str) -> bool:
    dates = _ISO_DATE.findall(text)
    if not dates:
        return False
    target_dates = _ISO_DATE.findall(target_recorded or "")
    return not target_dates or max(dates) > min(target_dates)


def passes_only(memory: PlanMemory, only: Sequence[str] | None) -> bool:
    """CAP-70 / CAP-71: with ``capture.only`` set, keep a memory only if an accepted label kind is allowed."""
    if only is None:
        return True
    return any(label.kind in only for label in memory.labels)


def reviewed_if_nothing_eligible(plan: RetainedPlan, payload: IntakePayload) -> RetainedPlan:
    """CAP-06 / CAP-41: a plan with no line eligible for review is marked reviewed, as the review stage
    would mark it; the same plan object when it is reviewed already or something is eligible."""
    if plan.reviewed or review_lines(plan, owner_turn=is_owner_turn(payload)):
        return plan
    return plan.model_copy(update={"reviewed": True})


def is_owner_turn(payload: IntakePayload) -> bool:
    """A verified owner turn: a human turn with no automated trigger (the owner-only guards)."""
    return payload.speaker_kind == "human-turn" and payload.trigger_kind == "none"
