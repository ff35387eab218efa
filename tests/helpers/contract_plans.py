"""test_contracts.orig: shared by its test modules."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tempomem.capture.contracts import (
    ContractViolation,
    ReviewLine,
)

# -- helpers -------------------------------------------------------------------------------------------------


def base_plan() -> dict[str, Any]:
    return {
        "memories": [
            {
                "text": "Ada prefers green tea in the morning",
                "kind": "preference",
                "source": "user",
                "salience": 0.7,
                "entities": ["ada"],
                "labels": [{"kind": "preference", "scope": "agent", "key": "drink:tea", "value": "green"}],
            },
            {
                "text": "Ada works at Acme on the billing project",
                "kind": "fact",
                "source": "user",
                "salience": 0.9,
                "entities": ["ada", "acme"],
            },
        ],
        "entities": [
            {"ref": "ada", "name": "Ada", "type": "person"},
            {"ref": "acme", "name": "Acme", "type": "organization"},
        ],
        "relations": [{"from": "ada", "to": "acme", "relation": "works at"}],
    }


def plan_with(fn: Callable[[dict[str, Any]], Any]) -> str:
    plan = base_plan()
    fn(plan)
    return json.dumps(plan, ensure_ascii=False)


def setter(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """``path`` like ``memories.0.salience``; sets the value."""

    def apply(plan: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = plan
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return apply


def deleter(path: str) -> Callable[[dict[str, Any]], None]:
    def apply(plan: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = plan
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return apply


def memory(text: str = "Ada likes tea", **extra: Any) -> dict[str, Any]:
    return {"text": text, "kind": "fact", "source": "user", "salience": 0.5, "entities": [], **extra}


def expect_violation(call: Callable[[], Any], reason: str) -> ContractViolation:
    with pytest.raises(ContractViolation) as info:
        call()
    exc = info.value
    assert exc.reason == reason, (exc.reason, exc.detail)
    assert str(exc) in (reason, f"{reason}: {exc.detail}")  # content-free message
    # nothing that quotes the input (pydantic errors, the decoder's document) is chained to it
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)
    return exc


VALID = json.dumps(base_plan())
DEPTH3_DUP = (
    '{"memories":[{"text":"Ada likes tea","kind":"fact","source":"user","salience":0.5,"entities":[],'
    '"labels":[{"kind":"fact","kind":"lesson","scope":"agent","key":"a:b","value":"v"}]}],'
    '"entities":[],"relations":[]}'
)
EMOJI_FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"


LINES = [
    ReviewLine(1, "The assistant ran the test suite", "assistant"),
    ReviewLine(2, "Ada loves jasmine tea", "user", owner=True),
    ReviewLine(3, "Paris is the capital of France", "assistant"),
    ReviewLine(4, "Bob likes coffee", "user", owner=False),
]


TARGETS = {1: "mem-a", 2: "mem-b", 3: "mem-c"}


def rec(*decisions: dict[str, Any]) -> str:
    return json.dumps({"decisions": list(decisions)})
