"""Strict, provider-neutral parsing of capture-model output (CAP-11..CAP-23, AMB-13, AMB-22, AMB-23, AMB-25).

The parser is authoritative: it accepts one exact JSON value in one exact shape or rejects the whole
completion with :class:`ContractViolation`. It never clamps, coerces, repairs or filters (CAP-13, CAP-21).
A rejection is one failed durable attempt (CAP-20); the caller records ``invalid_output``.

Order of checks for every contract:

1. **Raw guards, before any parsing.** Length in UTF-16 code units (AMB-13) > 262,144 → ``too_long``
   (CAP-11). Then exactly one JSON value (CAP-12): optional JSON whitespace, one value, optional JSON
   whitespace, end. Prose before (``not_json``) or after (``trailing_content``), a second value, and also
   Markdown code fences and ``<think>`` blocks are rejected: the contract is one exact JSON value and
   both prompts and client request JSON mode, so stripping wrappers here would make the parser guess.
   Duplicate keys at any depth (CAP-14) and ``NaN`` / ``Infinity`` / overflowing numbers such as ``1e999``
   (CAP-21) are rejected by decoder hooks.
2. **Shape** with pydantic v2 strict models, ``extra="forbid"`` (CAP-15): no ``"0.7"`` or ``true`` for a
   number, no out-of-range value. Text fields are checked for unsafe text (AMB-25, CAP-16).
3. **Cross-checks** the schema cannot express: refs resolve, decisions are complete and allowed, targets
   are the small integers the prompt supplied and do not collide (CAP-17..CAP-19, CAP-23).

``ContractViolation`` carries a short, bounded ``reason`` code (and an optional ``detail`` code); neither it
nor its message ever contains model output, so it can go to logs, warnings and Temporal history.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from pydantic.functional_validators import AfterValidator
from pydantic_core import PydanticCustomError

from tempomem.storage.consolidation import lexical_key
from tempomem.storage.credentials import unsafe_reason
from tempomem.storage.limits import CAPTURE_COMPLETION_MAX_UTF16, EXTRACTION_MAX_MEMORIES

# -- bounds (AMB-22, AMB-23, AMB-25) -------------------------------------------------------------------------
MAX_ENTITIES = 24
MAX_RELATIONS = 24
MAX_LABELS_PER_MEMORY = 8
MAX_TEXT_BYTES = 1024  # per memory text / label value / reconcile text / entity name (AMB-25)

REF_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
RELATION_PATTERN = r"^[a-z][a-z0-9_ ]{0,47}$"
LABEL_KEY_PATTERN = r"^[a-z][a-z0-9_]{0,31}:[a-z][a-z0-9_]{0,63}$"
# scope: agent | user:<sender> | conversation:<id>; ids are visible, non-space, at most 256 characters.
LABEL_SCOPE_PATTERN = r"^(agent|user:[^\s]{1,256}|conversation:[^\s]{1,256})$"
# INTENT-10/13: an inclusive civil end date, or its last millisecond with an explicit offset or Z.
VALID_TO_PATTERN = r"^\d{4}-\d{2}-\d{2}(T23:59:59\.999(Z|[+-]\d{2}:\d{2}))?$"

MemoryKind = Literal["fact", "preference", "lesson", "task", "event", "note"]
MemorySource = Literal["user", "assistant", "tool", "document"]
EntityType = Literal["person", "project", "organization", "concept", "place", "time"]
LabelKind = Literal["fact", "preference", "lesson"]
IntentState = Literal["planned", "pending", "done", "abandoned"]  # INTENT-07
ReviewVerdict = Literal["keep", "drop", "add_preference"]
ReconcileAction = Literal["ADD", "UPDATE", "SUPERSEDE", "NOOP"]  # LIM-65

REASONS = frozenset(
    {
        "too_long",
        "not_json",
        "trailing_content",
        "duplicate_key",
        "nan",
        "unknown_field",
        "missing_field",
        "type",
        "vocabulary",
        "grammar",
        "bounds",
        "unsafe_text",
        "unresolved_ref",
        "duplicate_ref",
        "missing_decision",
        "extra_decision",
        "duplicate_decision",
        "disallowed_decision",
        "unknown_target",
        "target_collision",
    }
)


class ContractViolation(ValueError):
    """Model output broke its contract. ``reason`` ∈ :data:`REASONS`; ``detail`` is a content-free subcode."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        self.detail = detail
        super().__init__(reason if detail is None else f"{reason}: {detail}")


def _fail(reason: str, detail: str | None = None) -> NoReturn:
    raise ContractViolation(reason, detail)


# -- unsafe text (AMB-25, AMB-26) ----------------------------------------------------------------------------
def unsafe_text_reason(text: str, *, max_bytes: int = MAX_TEXT_BYTES) -> str | None:
    """The AMB-25 check, shared with Remember (``storage.credentials``): a content-free sub-code or ``None``.

    Empty text is the schema's ``bounds`` error here, so the shared ``empty`` code is not reported.
    """
    reason = unsafe_reason(text, max_bytes=max_bytes)
    return None if reason == "empty" else reason


def _safe_text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("bounds", "empty text")
    if (why := unsafe_text_reason(value)) is not None:
        raise PydanticCustomError("unsafe_text", "unsafe text ({why})", {"why": why})
    return value


SafeText = Annotated[str, AfterValidator(_safe_text)]
Ref = Annotated[str, Field(pattern=REF_PATTERN)]


def utf16_length(text: str) -> int:
    """JavaScript string length (AMB-13): UTF-16 code units, so an astral character counts 2."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def is_exact_duplicate(a: str, b: str) -> bool:
    """CAP-30 / AMB-18: same words in the same order after NFKC + casefold; punctuation, spacing ignored."""
    return lexical_key(a) == lexical_key(b)


# -- raw guards (CAP-11, CAP-12, CAP-14, CAP-21) -------------------------------------------------------------
_JSON_WS = re.compile(r"[ \t\n\r]*")


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            _fail("duplicate_key")
        out[key] = value
    return out


def _reject_constant(_name: str) -> NoReturn:
    _fail("nan")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 overflows to inf without passing through parse_constant
        _fail("nan")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_hook, parse_constant=_reject_constant, parse_float=_finite_float
)


def load_exact_json(raw: str) -> Any:
    """Raw guards: bounded length, then exactly one JSON value with only JSON whitespace around it."""
    if not isinstance(raw, str):
        _fail("type")
    if utf16_length(raw) > CAPTURE_COMPLETION_MAX_UTF16:
        _fail("too_long")
    start = _JSON_WS.match(raw).end()  # type: ignore[union-attr]  # always matches
    try:
        value, end = _DECODER.raw_decode(raw, start)
    except ContractViolation:
        raise
    except (ValueError, RecursionError):
        raise ContractViolation("not_json") from None  # the decoder error holds the document
    if _JSON_WS.match(raw, end).end() != len(raw):  # type: ignore[union-attr]
        _fail("trailing_content")
    return value


# -- pydantic error mapping ----------------------------------------------------------------------------------
_ERROR_REASONS = {
    "extra_forbidden": "unknown_field",
    "missing": "missing_field",
    "union_tag_not_found": "missing_field",
    "literal_error": "vocabulary",
    "union_tag_invalid": "vocabulary",
    "string_pattern_mismatch": "grammar",
    "finite_number": "nan",
    "too_long": "bounds",
    "too_short": "bounds",
    "string_too_long": "bounds",
    "string_too_short": "bounds",
    "greater_than": "bounds",
    "greater_than_equal": "bounds",
    "less_than": "bounds",
    "less_than_equal": "bounds",
}


def _validate(model: type[BaseModel], data: Any, context: dict[str, Any] | None = None) -> Any:
    try:
        return model.model_validate(data, strict=True, context=context)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        kind = first["type"]
        # pydantic's names first ("too_long" is a list bound there), then our own custom error types
        reason = _ERROR_REASONS.get(kind) or (kind if kind in REASONS else "type")
        why = first.get("ctx", {}).get("why") if reason == "unsafe_text" else None
        raise ContractViolation(reason, why) from None  # `from None`: the pydantic error quotes the input


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# -- extraction (AMB-22) -------------------------------------------------------------------------------------
class Label(_Strict):
    kind: LabelKind
    scope: Annotated[str, Field(pattern=LABEL_SCOPE_PATTERN), AfterValidator(_safe_text)]
    key: Annotated[str, Field(pattern=LABEL_KEY_PATTERN)]
    value: SafeText


class ExtractedMemory(_Strict):
    text: SafeText
    kind: MemoryKind
    source: MemorySource
    salience: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
    entities: Annotated[list[Ref], Field(max_length=MAX_ENTITIES)]
    # optional: absent means none; null is not a list and is rejected
    labels: Annotated[list[Label], Field(max_length=MAX_LABELS_PER_MEMORY, default_factory=list)]
    # INTENT-10 / INTENT-07: only accepted when intentLifecycle is on; otherwise unknown fields.
    valid_to: Annotated[str | None, Field(alias="validTo", pattern=VALID_TO_PATTERN)] = None
    intent_state: Annotated[IntentState | None, Field(alias="intentState")] = None

    @model_validator(mode="before")
    @classmethod
    def _intent_fields_gated(cls, data: Any, info: ValidationInfo) -> Any:
        lifecycle = bool(info.context and info.context.get("intent_lifecycle"))
        if isinstance(data, dict) and not lifecycle and ("validTo" in data or "intentState" in data):
            raise PydanticCustomError("unknown_field", "intent fields need intentLifecycle")
        if isinstance(data, dict) and lifecycle:
            for key in ("validTo", "intentState"):
                if key in data and data[key] is None:  # present means a value; absent means none
                    raise PydanticCustomError("type", "null intent field")
        return data

    @model_validator(mode="after")
    def _valid_to_is_a_date(self) -> ExtractedMemory:
        if self.valid_to is not None:
            try:
                _date_of(self.valid_to)
            except ValueError:
                raise PydanticCustomError("grammar", "not a calendar date") from None
        return self


def _date_of(value: str) -> None:
    dt.date.fromisoformat(value[:10])


class Entity(_Strict):
    ref: Ref
    name: SafeText
    type: EntityType


class Relation(_Strict):
    from_ref: Annotated[Ref, Field(alias="from")]
    to_ref: Annotated[Ref, Field(alias="to")]
    relation: Annotated[str, Field(pattern=RELATION_PATTERN)]


class ExtractionPlan(_Strict):
    memories: Annotated[list[ExtractedMemory], Field(max_length=EXTRACTION_MAX_MEMORIES)]
    entities: Annotated[list[Entity], Field(max_length=MAX_ENTITIES)]
    relations: Annotated[list[Relation], Field(max_length=MAX_RELATIONS)]


def parse_extraction(raw: str, *, intent_lifecycle: bool = False) -> ExtractionPlan:
    """Parse one extraction completion (CAP-02, AMB-22) or raise :class:`ContractViolation`.

    Beyond the shape: entity refs are unique; every ref a memory or relation names resolves to a declared
    entity; a memory lists each ref once. Entities no memory names are kept (the host prunes graph
    nodes unrelated to kept memories, CAP-45/CAP-70); they are not a dangling reference.
    """
    plan: ExtractionPlan = _validate(
        ExtractionPlan, load_exact_json(raw), {"intent_lifecycle": intent_lifecycle}
    )
    declared: set[str] = set()
    for entity in plan.entities:
        if entity.ref in declared:
            _fail("duplicate_ref")
        declared.add(entity.ref)
    for memory in plan.memories:
        if len(set(memory.entities)) != len(memory.entities):
            _fail("duplicate_ref")
        if not declared.issuperset(memory.entities):
            _fail("unresolved_ref")
    for relation in plan.relations:
        if relation.from_ref not in declared or relation.to_ref not in declared:
            _fail("unresolved_ref")
    return plan


# -- review (AMB-23, CAP-23, CAP-40..CAP-44) -----------------------------------------------------------------
@dataclass(frozen=True)
class ReviewLine:
    """One review-eligible admitted line as listed to the model (CAP-40).

    ``source`` is the host-bounded source. ``drop`` is allowed only for assistant lines and
    ``add_preference`` only for user lines of the host-verified owner (``owner=True``).
    """

    line: int
    text: str
    source: Literal["user", "assistant"]
    owner: bool = False

    def allows(self, verdict: str) -> bool:
        if verdict == "keep":
            return True
        if verdict == "drop":
            return self.source == "assistant"
        return verdict == "add_preference" and self.source == "user" and self.owner


@dataclass(frozen=True)
class ReviewDecision:
    line: int
    decision: ReviewVerdict


class _ReviewItem(_Strict):
    line: int
    decision: ReviewVerdict


class _ReviewOutput(_Strict):
    decisions: list[_ReviewItem]


def parse_review(raw: str, *, lines: Sequence[ReviewLine]) -> list[ReviewDecision]:
    """Exactly one allowed decision per listed line, returned in the order of ``lines`` (CAP-23)."""
    out: _ReviewOutput = _validate(_ReviewOutput, load_exact_json(raw))
    listed = {line.line: line for line in lines}
    if len(listed) != len(lines):
        raise ValueError("review lines must have distinct numbers")  # caller bug, not model output
    seen: dict[int, ReviewVerdict] = {}
    for item in out.decisions:
        if item.line not in listed:
            _fail("extra_decision")
        if item.line in seen:
            _fail("duplicate_decision")
        if not listed[item.line].allows(item.decision):
            _fail("disallowed_decision")
        seen[item.line] = item.decision
    if len(seen) != len(listed):
        _fail("missing_decision")
    return [ReviewDecision(line.line, seen[line.line]) for line in lines]


# -- reconciliation (AMB-23, CAP-17..CAP-19) -----------------------------------------------------------------
@dataclass(frozen=True)
class ReconcileDecision:
    """A classifier decision with its target resolved to the real memory id the prompt mapped it from."""

    index: int
    action: ReconcileAction
    target: int | None = None
    target_id: str | None = None
    text: str | None = None


class _Add(_Strict):
    index: int
    action: Literal["ADD"]


class _Noop(_Strict):
    index: int
    action: Literal["NOOP"]
    target: int


class _Update(_Strict):
    index: int
    action: Literal["UPDATE"]
    target: int
    text: SafeText


class _Supersede(_Strict):
    index: int
    action: Literal["SUPERSEDE"]
    target: int
    text: SafeText


class _ReconcileOutput(_Strict):
    decisions: list[Annotated[_Add | _Noop | _Update | _Supersede, Field(discriminator="action")]]


def parse_reconcile(
    raw: str, *, candidate_count: int, target_ids: Mapping[int, str]
) -> list[ReconcileDecision]:
    """One decision per candidate index ``0..candidate_count-1``, ordered by index (CAP-17..CAP-19).

    ``target_ids`` maps the small integers the prompt showed for existing memories to their real ids. A
    target outside that mapping is ``unknown_target``; two decisions whose targets resolve to one memory
    are ``target_collision`` (any actions: the spec rejects every doubly-named target).
    """
    out: _ReconcileOutput = _validate(_ReconcileOutput, load_exact_json(raw))
    by_index: dict[int, ReconcileDecision] = {}
    claimed: set[str] = set()
    for item in out.decisions:
        if not 0 <= item.index < candidate_count:
            _fail("extra_decision")
        if item.index in by_index:
            _fail("duplicate_decision")
        target = getattr(item, "target", None)
        target_id = None
        if target is not None:
            if target not in target_ids:
                _fail("unknown_target")
            target_id = target_ids[target]
            if target_id in claimed:
                _fail("target_collision")
            claimed.add(target_id)
        by_index[item.index] = ReconcileDecision(
            index=item.index,
            action=item.action,
            target=target,
            target_id=target_id,
            text=getattr(item, "text", None),
        )
    if len(by_index) != candidate_count:
        _fail("missing_decision")
    return [by_index[i] for i in range(candidate_count)]
