"""The reference page's config examples, verbatim, and small builders (tests/test_config*.py)."""

from __future__ import annotations

import copy
from typing import Any

from tempomem.config import (
    validate_config_data,
)

# --- the reference page's examples, verbatim ---

BUJO_CAPTURE = {
    "memory": {
        "mode": "bujo",
        "writeMode": "capture",
        "path": "./.mono-agent/memory",
        "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
        "llm": {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"},
    }
}

FOCUS_ONLY = {
    "memory": {
        "mode": "bujo",
        "writeMode": "capture",
        "path": "./.mono-agent/memory",
        "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
        "llm": {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"},
        "capture": {
            "focus": "Keep durable coding preferences and lessons; skip PR and CI status.",
            "only": ["preference", "lesson"],
        },
    }
}

# The MemoryRecall example: a BuJo block without memory.llm, so it needs the tier's llm block (CFG-06).
RECALL_TOOL_BUJO = {
    "memory": {
        "mode": "bujo",
        "path": "./.mono-agent/memory",
        "embeddings": {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768},
        "recallTool": {"enabled": True},
    }
}

FRAGMENT_APPEND = {"memory": {"writeMode": "append-host-summary"}}
FRAGMENT_BUJO_CAPTURE = {"memory": {"mode": "bujo", "writeMode": "capture"}}
FRAGMENT_RECALL_TOOL = {"memory": {"recallTool": {"enabled": True}}}
FRAGMENT_PROFILE = {"memory": {"profile": {"enabled": True}}}
FRAGMENT_INTENT = {
    "memory": {"capture": {"intentLifecycle": True}, "recall": {"intentExpiry": True, "recency": True}}
}
# What BuJo accepts today: all three intent switches (the profile is accepted too, CFG-25).
FRAGMENT_INTENT_BUILT = FRAGMENT_INTENT

LLM = {"provider": "agent-host", "model": "openai-codex:gpt-5.6-terra"}
EMB = {"provider": "ollama"}


def merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``fragment`` into a copy of ``base`` ("add this block to an otherwise valid config")."""
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def mem(**memory: Any) -> dict[str, Any]:
    return {"memory": memory}


def bujo(**extra: Any) -> dict[str, Any]:
    return mem(mode="bujo", writeMode="capture", embeddings=EMB, llm=LLM, **extra)


def paths(data: object) -> list[str]:
    return [v.path for v in validate_config_data(data)]
