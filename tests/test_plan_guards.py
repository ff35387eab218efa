"""Table-driven tests of the deterministic host rules around the capture model (CAP-25..CAP-70)."""

from __future__ import annotations

import json

import pytest

from tempomem.capture.contracts import ReconcileDecision, ReviewDecision, parse_extraction
from tempomem.capture.plan import (
    Existing,
    PlanLabel,
    PlanMemory,
    apply_review,
    build_plan,
    entity_id,
    fact_id,
    guard_decision,
    passes_only,
    review_lines,
)


def plan_of(*memories: dict, entities=(), relations=(), speaker="human-turn", trigger="none", user_text=True):
    raw = json.dumps({"memories": list(memories), "entities": list(entities), "relations": list(relations)})
    return build_plan(
        parse_extraction(raw), speaker_kind=speaker, trigger_kind=trigger, has_user_text=user_text
    )


def mem(text="A fact.", source="user", salience=0.9, kind="fact", entities=(), labels=None) -> dict:
    out = {"text": text, "kind": kind, "source": source, "salience": salience, "entities": list(entities)}
    if labels is not None:
        out["labels"] = labels
    return out


@pytest.mark.parametrize(
    ("speaker", "trigger", "user_text", "expected"),
    [
        ("human-turn", "none", True, "user"),
        ("unknown", "none", True, "assistant"),  # STORE-06: never upgraded into first-party evidence
        ("trigger", "cron", False, "assistant"),  # a cron turn has no owner words (WM-11)
        ("human-turn", "none", False, "assistant"),  # CAP-25: no human user text on the turn
    ],
)
def test_cap25_source_is_bounded_by_host_provenance(speaker, trigger, user_text, expected) -> None:
    plan = plan_of(mem(), speaker=speaker, trigger=trigger, user_text=user_text)
    assert plan.memories[0].source == expected


@pytest.mark.parametrize(("salience", "kept"), [(0.49, False), (0.5, True), (0.9, True)])
def test_cap26_graph08_assistant_salience_floor_prunes_its_entities(salience: float, kept: bool) -> None:
    plan = plan_of(
        mem("The user met Bo.", source="assistant", salience=salience, entities=["bo"]),
        mem("The user likes tea.", entities=["tea"]),
        entities=[
            {"ref": "bo", "name": "Bo", "type": "person"},
            {"ref": "tea", "name": "Tea", "type": "concept"},
        ],
        relations=[{"from": "bo", "to": "tea", "relation": "likes"}],
    )
    assert (plan.memories[0].dropped is None) is kept
    ids = {e.id for e in plan.entities}
    assert ("person:bo" in ids) is kept and "concept:tea" in ids
    assert bool(plan.relations) is kept  # the relation needs both ends


def test_cap27_user_lines_have_no_floor() -> None:
    assert plan_of(mem(salience=0.0)).memories[0].dropped is None


def test_cap29_associations_are_per_memory() -> None:
    plan = plan_of(
        mem("Ana is a nurse.", entities=["ana"]),
        mem("Bo plays chess.", entities=["bo"]),
        entities=[
            {"ref": "ana", "name": "Ana", "type": "person"},
            {"ref": "bo", "name": "Bo", "type": "person"},
        ],
    )
    assert [m.entities for m in plan.memories] == [("person:ana",), ("person:bo",)]


def test_labels_pass_host_gates_and_owner_fact_is_added() -> None:
    pref = {"kind": "preference", "scope": "agent", "key": "food:diet", "value": "vegetarian"}
    owner = plan_of(mem("I am vegetarian.", kind="preference", labels=[pref])).memories[0]
    assert {lab.kind for lab in owner.labels} == {"preference", "fact"}  # AMB-27 coarse owner fact beside it
    peer = plan_of(mem("I am vegetarian.", kind="preference", labels=[pref]), speaker="unknown").memories[0]
    assert peer.labels == ()  # CAP-69: a non-owner turn cannot assert an owner preference
    task = plan_of(mem("Book the dentist.", kind="task")).memories[0]
    assert all(lab.kind != "fact" for lab in task.labels)  # CAP-63: no coarse fact for a task


def test_review_lines_and_application() -> None:
    plan = plan_of(
        mem("The user lives in Porto."),
        mem("Porto is in Portugal.", source="assistant", salience=0.7, entities=["porto"]),
        entities=[{"ref": "porto", "name": "Porto", "type": "place"}],
    )
    lines = review_lines(plan, owner_turn=True)
    assert [(rl.line, rl.source) for rl in lines] == [(1, "user"), (2, "assistant")]  # CAP-40
    reviewed = apply_review(plan, [ReviewDecision(1, "add_preference"), ReviewDecision(2, "drop")])
    assert reviewed.memories[1].dropped == "review" and reviewed.entities == ()  # CAP-45 pruned
    assert reviewed.memories[0].text == plan.memories[0].text  # CAP-44: text never changes
    assert any(lab.kind == "preference" for lab in reviewed.memories[0].labels)
    assert reviewed.reviewed


def existing(**kw) -> Existing:
    base = {
        "id": "old-1",
        "text": "Old line.",
        "type": "note",
        "signifier": "–",
        "recorded": "2026-11-01T10:00:00.000Z",
    }
    base.update(kw)
    return Existing(**base)


def pm(source="user") -> PlanMemory:
    return PlanMemory(index=0, text="New line.", kind="fact", source=source, salience=0.9, entities=())


OWNER_PREF = (PlanLabel(kind="preference", scope="agent", key="k:v", value="x", attribution="owner"),)


@pytest.mark.parametrize(
    ("decision", "target", "source", "owner", "expected"),
    [
        # CAP-55: a preference line is never superseded by someone else's word
        (
            ("SUPERSEDE", "x"),
            existing(type="preference", attr="owner", labels=OWNER_PREF),
            "assistant",
            True,
            ("ADD", None),
        ),
        # CAP-53: ... but the owner's own word on an owner turn replaces the owner's own preference
        (
            ("SUPERSEDE", "x"),
            existing(type="preference", attr="owner", labels=OWNER_PREF),
            "user",
            True,
            ("SUPERSEDE", "old-1"),
        ),
        # CAP-53: that replacement is never in place: an UPDATE keeps the old line as superseded history
        (
            ("UPDATE", "x"),
            existing(type="preference", attr="owner", labels=OWNER_PREF),
            "user",
            True,
            ("SUPERSEDE", "old-1"),
        ),
        (
            ("UPDATE", "x"),
            existing(type="lesson", attr="owner", labels=()),
            "user",
            True,
            ("SUPERSEDE", "old-1"),
        ),
        # CAP-54: a peer's preference is never replaced this way
        (("SUPERSEDE", "x"), existing(type="preference", attr="assistant"), "user", True, ("ADD", None)),
        (("UPDATE", "x"), existing(type="lesson"), "user", False, ("ADD", None)),
        # CAP-64: an UPDATE of a task becomes a note threaded to it
        (("UPDATE", "x"), existing(signifier="[ ]", type="task"), "user", True, ("ADD", None)),
        # CAP-65: a SUPERSEDE of a task invalidates it
        (("SUPERSEDE", "x"), existing(signifier="[ ]", type="task"), "user", True, ("SUPERSEDE", "old-1")),
        # CAP-38: a dated UPDATE becomes a dated supersession
        (("UPDATE", "Moved on 2026-12-01."), existing(), "user", True, ("SUPERSEDE", "old-1")),
        (("UPDATE", "Moved recently."), existing(), "user", True, ("UPDATE", "old-1")),
        # CAP-38: the target's recorded instant is a date too: an UPDATE dated before it stays in place,
        # one dated after it (also as an ISO instant) supersedes; an undated target is always superseded.
        (("UPDATE", "Booked on 2026-10-20."), existing(), "user", True, ("UPDATE", "old-1")),
        (("UPDATE", "Booked on 2026-11-01."), existing(), "user", True, ("UPDATE", "old-1")),
        (("UPDATE", "Booked at 2026-11-02T09:00."), existing(), "user", True, ("SUPERSEDE", "old-1")),
        (("UPDATE", "Booked on 2026-10-20."), existing(recorded=""), "user", True, ("SUPERSEDE", "old-1")),
        (("NOOP", None), existing(), "user", True, ("NOOP", "old-1")),
    ],
)
def test_reconcile_guards(decision, target, source, owner, expected) -> None:
    action, text = decision
    d = ReconcileDecision(index=0, action=action, target=1, target_id=target.id, text=text)
    out = guard_decision(d, pm(source), target, owner_turn=owner)
    assert (out.action, out.target_id) == expected
    if target.is_task and action == "UPDATE":
        assert out.thread_to == "old-1"
    if target.is_task and action == "SUPERSEDE":
        assert out.invalidate == "old-1"


def test_capture_only_filter() -> None:
    pref = PlanLabel(kind="preference", scope="agent", key="a:b", value="v", attribution="owner")
    m = pm().model_copy(update={"labels": (pref,)})
    assert passes_only(m, None) and passes_only(m, ["preference"])
    assert not passes_only(m, ["fact"]) and not passes_only(m, [])  # CAP-71: [] suppresses everything


def test_ids_are_run_derived_and_entities_stable() -> None:
    assert fact_id("a" * 64, 0) == fact_id("a" * 64, 0) != fact_id("a" * 64, 1)
    assert entity_id("person", "Zoë Ávila") == "person:zoe-avila"
    assert entity_id("organization", "ACME Corp.") == "org:acme-corp"


@pytest.mark.parametrize(
    ("speaker", "trigger", "user_text"),
    [
        ("trigger", "cron", False),  # an automated turn
        ("unknown", "none", True),  # a direct caller that did not say who spoke
        ("human-turn", "webhook", True),  # a person's words arriving through a webhook trigger
        ("human-turn", "none", False),  # a human turn without the owner's text
    ],
)
def test_CAP76_every_speaker_gate_follows_host_provenance_not_the_models_claim(
    speaker: str, trigger: str, user_text: bool
) -> None:
    """CAP-76: the model claims the line is the user's own, a preference, about the user, and an intention
    with an end. Unless the host verified an owner turn with the owner's text, every gate that depends on
    who spoke says no: the line is the assistant's, keeps no preference or user-scoped label and no owner
    fact, and proposes no intention (CAP-25, CAP-53, CAP-69, AMB-27, INTENT-09)."""
    claim = mem(
        "I will move to Porto by June.",
        labels=[
            {"kind": "preference", "scope": "agent", "key": "city:home", "value": "Porto"},
            {"kind": "fact", "scope": "user:owner", "key": "owner:move", "value": "Porto"},
        ],
    )
    claim |= {"intentState": "planned", "validTo": "2027-06-30"}
    raw = json.dumps({"memories": [claim], "entities": [], "relations": []})

    def planned(speaker: str, trigger: str, user_text: bool) -> PlanMemory:
        plan = build_plan(
            parse_extraction(raw, intent_lifecycle=True),
            speaker_kind=speaker,
            trigger_kind=trigger,
            has_user_text=user_text,
        )
        return plan.memories[0]

    owner = planned("human-turn", "none", True)  # the control: a verified owner turn keeps every claim
    assert owner.source == "user" and (owner.intent_state, owner.valid_to) == ("planned", "2027-06-30")
    assert {(lab.kind, lab.attribution) for lab in owner.labels} == {
        ("preference", "owner"),
        ("fact", "owner"),
    }

    other = planned(speaker, trigger, user_text)
    assert other.source == "assistant"
    assert (other.intent_state, other.valid_to) == (None, None)
    assert [lab for lab in other.labels if lab.kind == "preference" or lab.scope.startswith("user:")] == []
    assert all(lab.attribution != "owner" for lab in other.labels)
