"""Reading a config: validation that collects every violation at once, file loading (JSON with duplicate
keys and non-finite numbers refused), secrets from the environment, and the embedded defaults."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from tempomem.config.models import (
    COLLECT_CONTEXT,
    MEMORY_PATH_DEFAULT,
    SKIP_TIER_RULES_CONTEXT,
    ConfigError,
    ConfigViolation,
    MemoryConfig,
    TempomemConfig,
    violation,
)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key (not allowed here)"
    if err["type"] == "model_type":
        return "must be an object"
    if err["type"] == "missing":
        return "required key is missing"
    return str(err["msg"])


_TLS_UNION = "must be true, false, or an object with serverName, serverCaCert, clientCert, clientKey"


def _union_free(err: Any) -> tuple[tuple[int | str, ...], str]:
    """``temporal.tls`` is ``bool | TemporalTLS``: pydantic reports one error per union member, under a
    member tag. Report the key once, or the nested key without the tag."""
    loc = tuple(err["loc"])
    if loc[:2] == ("temporal", "tls") and len(loc) >= 3 and isinstance(loc[2], str):
        tag = loc[2]
        if tag == "bool" or "TemporalTLS" in tag:
            rest = loc[3:]
            return (("temporal", "tls", *rest), _message(err)) if rest else (("temporal", "tls"), _TLS_UNION)
    return loc, _message(err)


def _pydantic_violations(exc: ValidationError) -> list[ConfigViolation]:
    found = [_union_free(err) for err in exc.errors(include_url=False)]
    return [violation(_format_loc(loc), message) for loc, message in dict.fromkeys(found)]


def _validate(data: object) -> tuple[TempomemConfig | None, list[ConfigViolation]]:
    rules: list[ConfigViolation] = []
    try:
        cfg = TempomemConfig.model_validate(
            data, by_alias=True, by_name=False, context={COLLECT_CONTEXT: rules}
        )
    except ValidationError as exc:
        # ``rules`` holds the memory block's rule violations when only other parts (temporal) failed.
        return None, _pydantic_violations(exc) + rules + _rules_despite_errors(data, exc)
    return (cfg if not rules else None), rules


def _rules_despite_errors(data: object, exc: ValidationError) -> list[ConfigViolation]:
    """Cross-field rules for a memory block that also has key-level errors, so all are reported at once.

    The keys with errors are removed (a missing required key removes its block) and the rest is
    validated again; a rule is kept only when its path is unrelated to every removed key. Tier rules
    are skipped when ``mode`` or ``writeMode`` itself is broken: a verdict about the tier would be a guess.
    """
    if not isinstance(data, dict) or not isinstance(data.get("memory"), dict):
        return []
    memory = copy.deepcopy(data["memory"])
    removed: list[tuple[str, ...]] = []
    errors = exc.errors(include_url=False)
    for _attempt in range(4):
        memory_locs = [(tuple(e["loc"]), e["type"]) for e in errors if tuple(e["loc"])[:1] == ("memory",)]
        if not memory_locs:
            break  # memory itself is valid now
        for loc, kind in memory_locs:
            keys = _dict_keys(loc[1:])
            if kind == "missing":
                keys = keys[:-1]
            if not keys or not _remove(memory, keys):
                return []  # the memory block as a whole is unusable
            removed.append(keys)
        rules: list[ConfigViolation] = []
        skip_tier = any(keys[0] in ("mode", "writeMode") for keys in removed)
        context = {COLLECT_CONTEXT: rules, SKIP_TIER_RULES_CONTEXT: skip_tier}
        try:
            MemoryConfig.model_validate(memory, by_alias=True, by_name=False, context=context)
        except ValidationError as again:
            errors = [{**e, "loc": ("memory", *e["loc"])} for e in again.errors(include_url=False)]
            continue
        if not removed:
            return []  # memory validated in the first pass, so its rules already ran
        gone = [".".join(("memory", *keys)) for keys in removed]
        return [r for r in rules if not any(_related(r.path, g) for g in gone)]
    return []


def _dict_keys(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The leading run of object keys in an error location (stops at a list index)."""
    keys: list[str] = []
    for part in loc:
        if not isinstance(part, str):
            break
        keys.append(part)
    return tuple(keys)


def _remove(tree: dict[str, Any], keys: tuple[str, ...]) -> bool:
    node: Any = tree
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and keys[-1] in node:
        del node[keys[-1]]
        return True
    return False


def _related(a: str, b: str) -> bool:
    """``a`` and ``b`` are the same key, or one lies inside the other."""
    return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))


def validate_config_data(data: object) -> list[ConfigViolation]:
    """Every violation in already-parsed config data (e.g. ``json.load`` output); ``[]`` when valid."""
    return _validate(data)[1]


def load_config_data(data: object) -> TempomemConfig:
    """Parse config data, raising ``ConfigError`` with ALL violations."""
    cfg, violations = _validate(data)
    if violations or cfg is None:
        raise ConfigError(violations)
    return cfg


class _Pairs(dict):
    """A JSON object that remembers which keys it saw more than once."""

    duplicates: list[str]


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs()
    obj.duplicates = []
    for key, value in pairs:
        if key in obj and key not in obj.duplicates:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _plain(value: Any, path: str, found: list[ConfigViolation]) -> Any:
    """Turn parsed ``_Pairs`` back into plain dicts, reporting duplicate keys with their paths."""
    if isinstance(value, _Pairs):
        for key in value.duplicates:
            found.append(violation(f"{path}.{key}" if path else key, "duplicate key"))
        return {k: _plain(v, f"{path}.{k}" if path else k, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def load_config_file(path: Path) -> TempomemConfig:
    """Load a JSON config file. Unreadable files and invalid JSON are a ``ConfigError`` at path ``""``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError([violation("", f"cannot read config file {path}: {exc.strerror or exc}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([violation("", f"config file {path} is not UTF-8: {exc.reason}")]) from exc
    try:
        raw = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ConfigError(
            [violation("", f"config file {path} is not valid JSON: {exc.msg} ({where})")]
        ) from exc
    except ValueError as exc:
        raise ConfigError([violation("", f"config file {path} is not valid JSON: {exc}")]) from exc
    duplicates: list[ConfigViolation] = []
    data = _plain(raw, "", duplicates)
    cfg, violations = _validate(data)
    if duplicates or violations or cfg is None:
        raise ConfigError(duplicates + violations)
    cfg._source_dir = path.resolve().parent
    return cfg


class SecretMissingError(ValueError):
    """A config names an environment variable for a key, and it is unset (names the key, not a value)."""


def secret(
    inline: str | None, env_name: str | None, where: str, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """A key from the environment variable a config names (``where`` is its key path), else the inline
    value. Read at use, kept in memory only."""
    if env_name is None:
        return inline
    found = (os.environ if environ is None else environ).get(env_name)
    if not found:
        raise SecretMissingError(f"{where}: environment variable {env_name} is unset")
    return found


def load_config(path: str | Path) -> TempomemConfig:
    """The public name (``from tempomem import load_config``): ``load_config_file``, taking str or Path."""
    return load_config_file(Path(path))


def default_config() -> TempomemConfig:
    """The embedded defaults (used by the demo when no config file exists): Journal with local MiniLM."""
    return load_config_data(
        {
            "memory": {
                "mode": "journal",
                "writeMode": "append-host-summary",
                "path": MEMORY_PATH_DEFAULT,
                "embeddings": {"provider": "local"},
            }
        }
    )
