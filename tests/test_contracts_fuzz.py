"""Fuzz: mutations of valid extraction output are never accepted (CAP-11..CAP-16)."""

from __future__ import annotations

import copy
import json
import random
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempomem.capture.contracts import (
    ContractViolation,
    parse_extraction,
)
from tempomem.storage.limits import EXTRACTION_MAX_MEMORIES

# -- fuzz: mutations of valid extraction output are never accepted -------------------------------------------
#
# Hypothesis picks a base plan, a mutation and a seed; the mutation runs on random.Random(seed). Drawing
# whole plans through Hypothesis costs ~150 ms per example on these machines; this keeps 10,000 examples
# well under a minute while Hypothesis still explores the (base, mutation, seed) space.

WORDS = [
    "Ada",
    "likes",
    "green",
    "tea",
    "works",
    "at",
    "Acme",
    "on",
    "billing",
    "Oslo",
    "moved",
    "in",
    "2026",
    "zielona",
    "herbata",
    "緑茶",
    "𝔸lpha",
    "café",
    "naïve",
    "O'Brien",
    "3.5",
    "kg",
    "(draft)",
    "v2",
]
REFS = [f"e{i}" for i in range(6)] + ["ada", "acme_corp", "x" * 32]
REQUIRED = {
    "plan": ["memories", "entities", "relations"],
    "memory": ["text", "kind", "source", "salience", "entities"],
    "entity": ["ref", "name", "type"],
    "relation": ["from", "to", "relation"],
    "label": ["kind", "scope", "key", "value"],
}
ALLOWED = {kind: set(keys) | ({"labels"} if kind == "memory" else set()) for kind, keys in REQUIRED.items()}
UNSAFE_INSERTS = (
    [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]
    + [chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]
    + ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u2028", "\u2029", "\ud800", "\udfff"]
    + ["<!--", "-->", "AKIAABCDEFGHIJKLMNOP", "token=abcdef123"]
)
MARKDOWN_PREFIXES = ["- ", "* ", "+ ", "# ", "### ", "1. ", "2) ", "   - ", "-", "#"]
WRONG_VALUES: list[Any] = [None, True, False, 0, 1, -3, 0.5, "", "0.7", "x", [], [1], ["ada"], {}, {"a": 1}]
EXPECTED_TYPE = {
    "text": str,
    "name": str,
    "value": str,
    "kind": str,
    "source": str,
    "type": str,
    "ref": str,
    "from": str,
    "to": str,
    "relation": str,
    "scope": str,
    "key": str,
    "salience": float,
    "entities": list,
    "memories": list,
    "relations": list,
    "labels": list,
}
OPS = [
    "drop_key",
    "duplicate_key",
    "wrong_type",
    "salience_range",
    "non_finite",
    "extra_field",
    "truncate",
    "trailing",
    "prose_before",
    "fence",
    "unsafe_char",
    "markdown_prefix",
    "long_text",
    "dangling_ref",
    "duplicate_entity",
    "bad_ref",
    "bad_vocabulary",
    "bad_relation",
    "too_many",
    "two_values",
    "wrap_array",
]


def random_plan(rng: random.Random) -> dict[str, Any]:
    def text() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))

    refs = rng.sample(REFS, rng.randint(1, 5))
    entities = [
        {"ref": r, "name": text(), "type": rng.choice(["person", "project", "concept", "place", "time"])}
        for r in refs
    ]
    memories = []
    for _ in range(rng.randint(1, EXTRACTION_MAX_MEMORIES)):
        m: dict[str, Any] = {
            "text": text(),
            "kind": rng.choice(["fact", "preference", "lesson", "task", "event", "note"]),
            "source": rng.choice(["user", "assistant", "tool", "document"]),
            "salience": rng.choice([0, 1, 0.0, 1.0, 0.5, round(rng.random(), rng.randint(1, 17))]),
            "entities": rng.sample(refs, rng.randint(0, len(refs))),
        }
        if rng.random() < 0.5:
            m["labels"] = [
                {
                    "kind": rng.choice(["fact", "preference", "lesson"]),
                    "scope": rng.choice(["agent", "user:42", "conversation:c-1"]),
                    "key": rng.choice(["topic:name", "food:favorite_drink"]),
                    "value": text(),
                }
                for _ in range(rng.randint(0, 3))
            ]
        memories.append(m)
    relations = [
        {
            "from": rng.choice(refs),
            "to": rng.choice(refs),
            "relation": rng.choice(["knows", "works at", "part_of"]),
        }
        for _ in range(rng.randint(0, 4))
    ]
    return {"memories": memories, "entities": entities, "relations": relations}


BASE_PLANS = [random_plan(random.Random(seed)) for seed in range(64)]


def objects(plan: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("plan", plan)]
    for m in plan["memories"]:
        out.append(("memory", m))
        out.extend(("label", lb) for lb in m.get("labels", []))
    out.extend(("entity", e) for e in plan["entities"])
    out.extend(("relation", r) for r in plan["relations"])
    return out


def text_slots(plan: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    slots = [(m, "text") for m in plan["memories"]] + [(e, "name") for e in plan["entities"]]
    return slots + [(lb, "value") for m in plan["memories"] for lb in m.get("labels", [])]


def is_wrong_type(field: str, value: Any) -> bool:
    want = EXPECTED_TYPE[field]
    if want is float:
        return isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
    if want is str:  # a string in a vocabulary or grammar field may be right: only other types are wrong
        return not isinstance(value, str)
    return not isinstance(value, want)


def garbage(rng: random.Random) -> str:
    piece = rng.choice(["x", "Done.", "}", "]", "{}", "0", "null", "```", "<|eot|>", "ok\n", "\u00a0", "%"])
    return piece + "".join(chr(rng.randint(0x21, 0x2FF)) for _ in range(rng.randint(0, 6)))


def mutate(plan: dict[str, Any], op: str, rng: random.Random) -> str:
    """Return ``plan`` (a deep copy is mutated) broken by ``op``; every branch yields an invalid output."""
    plan = copy.deepcopy(plan)
    if op == "drop_key":
        kind, obj = rng.choice(objects(plan))
        del obj[rng.choice(REQUIRED[kind])]
    elif op == "wrong_type":
        _, obj = rng.choice(objects(plan))
        field = rng.choice(sorted(obj))
        obj[field] = rng.choice([v for v in WRONG_VALUES if is_wrong_type(field, v)])
    elif op == "salience_range":
        rng.choice(plan["memories"])["salience"] = rng.choice(
            [
                -rng.uniform(1e-9, 100),
                1 + rng.uniform(1e-9, 100),
                rng.randint(2, 100),
                -rng.randint(1, 100),
                1.0000000000000002,
                -5e-324,
                1e300,
            ]
        )
    elif op == "extra_field":
        kind, obj = rng.choice(objects(plan))
        names = [
            "validTo",
            "intentState",
            "from_ref",
            "id",
            "confidence",
            "Text",
            "text ",
            "",
            "memory",
            "ref_",
        ]
        obj[rng.choice([n for n in names if n not in ALLOWED[kind]])] = rng.choice(WRONG_VALUES)
    elif op in ("unsafe_char", "markdown_prefix", "long_text"):
        obj, field = rng.choice(text_slots(plan))
        text = obj[field]
        if op == "unsafe_char":
            pos = rng.randint(0, len(text))
            obj[field] = text[:pos] + rng.choice(UNSAFE_INSERTS) + text[pos:]
        elif op == "markdown_prefix":
            obj[field] = rng.choice(MARKDOWN_PREFIXES) + (" " if obj[field][0] != " " else "") + text
        else:
            obj[field] = (text + " ") * (1025 // (len(text.encode()) + 1) + 1)
    elif op == "dangling_ref":
        declared = {e["ref"] for e in plan["entities"]}
        undeclared = rng.choice([r for r in [*REFS, "zz"] if r not in declared])
        if rng.random() < 0.5 or not plan["relations"]:
            rng.choice(plan["memories"])["entities"].append(undeclared)
        else:
            rng.choice(plan["relations"])[rng.choice(["from", "to"])] = undeclared
    elif op == "duplicate_entity":
        plan["entities"].append(copy.deepcopy(rng.choice(plan["entities"])))
    elif op == "bad_ref":
        rng.choice(plan["entities"])["ref"] = rng.choice(["Ada", "1a", "a-b", "a" * 33, "", "_a", "a b", "é"])
    elif op == "bad_vocabulary":
        kind, obj = rng.choice([o for o in objects(plan) if o[0] in ("memory", "entity", "label")])
        field = rng.choice(
            {"memory": ["kind", "source"], "entity": ["type"], "label": ["kind", "scope", "key"]}[kind]
        )
        obj[field] = rng.choice(["", "Fact", "USER", "animal", "task ", "team", "Key:Name", "x", "user:"])
    elif op == "bad_relation":
        if not plan["relations"]:
            plan["relations"].append({"from": plan["entities"][0]["ref"], "to": plan["entities"][0]["ref"]})
        rng.choice(plan["relations"])["relation"] = rng.choice(["Works at", "", "knows!", "a" * 49, " knows"])
    elif op == "too_many":
        field, limit = rng.choice([("memories", 8), ("relations", 24), ("entities", 24)])
        if field == "entities":
            plan["entities"] += [{"ref": f"z{i}", "name": "Z", "type": "concept"} for i in range(25)]
        else:
            items = plan[field] or [
                {"from": plan["entities"][0]["ref"], "to": plan["entities"][0]["ref"], "relation": "knows"}
            ]
            plan[field] = (items * (limit + 1))[: limit + 1 + rng.randint(0, 3)]
    raw = json.dumps(plan, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 1]))
    if op == "duplicate_key":
        _, obj = rng.choice(objects(plan))
        key = rng.choice(sorted(obj))
        obj["\x00dup"] = 0  # marker pair, replaced by a second copy of `key` (same or other value)
        dup = json.dumps({key: rng.choice([obj[key], None, 1])})[1:-1]
        raw = json.dumps(plan).replace(json.dumps({"\x00dup": 0})[1:-1], dup)
    elif op == "non_finite":
        rng.choice(plan["memories"])["salience"] = "\x00num"
        raw = json.dumps(plan).replace('"\\u0000num"', rng.choice(["NaN", "Infinity", "-Infinity", "1e999"]))
    elif op == "truncate":
        raw = raw[: rng.randrange(len(raw.rstrip()))]
    elif op == "trailing":
        raw += rng.choice(["", " ", "\n"]) + garbage(rng)
    elif op == "prose_before":
        raw = garbage(rng) + rng.choice(["", " ", "\n"]) + raw
    elif op == "fence":
        raw = rng.choice(["```json\n", "```\n", "<think>ok</think>\n"]) + raw + rng.choice(["\n```", ""])
    elif op == "two_values":
        raw = raw + rng.choice(["", " ", "\n"]) + rng.choice([raw, "{}", "[]", "1", '"x"'])
    elif op == "wrap_array":
        raw = "[" + raw + "]"
    return raw


FUZZ_EXAMPLES = 10_000


def test_fuzz_base_plans_are_valid() -> None:
    """The fuzz oracle is only meaningful if every unmutated base plan parses, in every encoding used."""
    for plan in BASE_PLANS:
        for ascii_only in (True, False):
            for indent in (None, 1):
                parse_extraction(json.dumps(plan, ensure_ascii=ascii_only, indent=indent))
    assert {len(p["memories"]) for p in BASE_PLANS} == set(range(1, EXTRACTION_MAX_MEMORIES + 1))


@pytest.mark.slow  # thousands of generated documents
def test_fuzz_malformed_extractions_are_all_rejected() -> None:
    outcomes = {"rejected": 0, "accepted": 0}
    reasons: set[str] = set()

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None)
    @given(st.integers(0, len(BASE_PLANS) - 1), st.sampled_from(OPS), st.integers(0, 2**32 - 1))
    def check(base: int, op: str, seed: int) -> None:
        raw = mutate(BASE_PLANS[base], op, random.Random(seed))
        try:
            parse_extraction(raw)
        except ContractViolation as exc:
            outcomes["rejected"] += 1
            reasons.add(exc.reason)
            return
        outcomes["accepted"] += 1
        raise AssertionError(f"malformed extraction accepted ({op})")

    started = time.monotonic()
    check()
    elapsed = time.monotonic() - started
    assert outcomes["accepted"] == 0
    assert outcomes["rejected"] >= FUZZ_EXAMPLES
    assert reasons == {
        "duplicate_key",
        "nan",
        "not_json",
        "trailing_content",
        "unsafe_text",
        "unknown_field",
        "missing_field",
        "bounds",
        "type",
        "unresolved_ref",
        "duplicate_ref",
        "grammar",
        "vocabulary",
    }
    print(f"\nfuzz: {outcomes['rejected']} malformed extractions rejected, 0 accepted, {elapsed:.1f} s")
