"""The tempomem config file: one ``memory`` block plus the Temporal connection (CFG-01..CFG-28).

Every model is strict (no ``"1"`` -> ``1`` coercion), forbids unknown keys (CFG-16) and uses the
camelCase keys of the reference page. Python code may also use the snake_case field names; config
*data* (``load_config_data`` / ``load_config_file``) must use camelCase.

Validation collects every problem at once as ``ConfigViolation(path, message)`` where ``path`` is the
dotted camelCase key path (``memory.capture.focus``, list items as ``memory.capture.only[1]``):
pydantic's own errors (unknown keys, wrong types, bad enum values) and the cross-field rules below.

Cross-field rules (``models.memory_rules``):

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

from tempomem.config.loading import (
    SecretMissingError,
    default_config,
    load_config,
    load_config_data,
    load_config_file,
    secret,
    validate_config_data,
)
from tempomem.config.models import (
    AGENT_HOST_MODEL_REF,
    COLLECT_CONTEXT,
    EMBEDDED_PROVIDERS,
    LMSTUDIO_ENDPOINT_DEFAULT,
    MEMORY_PATH_DEFAULT,
    OPENAI_ENDPOINT_DEFAULT,
    SKIP_TIER_RULES_CONTEXT,
    TURN_ARCHIVE_DAYS_MAX,
    AgentHostConfig,
    CaptureConfig,
    ConfigError,
    ConfigViolation,
    EmbeddingsConfig,
    LlmConfig,
    MemoryConfig,
    NonEmptyStr,
    PositiveInt,
    ProfileConfig,
    ProviderConfig,
    RecallConfig,
    TempomemConfig,
    TemporalConfig,
    TemporalTLS,
    ToolToggle,
    config_warnings,
    memory_rules,
    violation,
)

__all__ = [
    "AGENT_HOST_MODEL_REF",
    "COLLECT_CONTEXT",
    "EMBEDDED_PROVIDERS",
    "LMSTUDIO_ENDPOINT_DEFAULT",
    "MEMORY_PATH_DEFAULT",
    "OPENAI_ENDPOINT_DEFAULT",
    "SKIP_TIER_RULES_CONTEXT",
    "TURN_ARCHIVE_DAYS_MAX",
    "AgentHostConfig",
    "CaptureConfig",
    "ConfigError",
    "ConfigViolation",
    "EmbeddingsConfig",
    "LlmConfig",
    "MemoryConfig",
    "NonEmptyStr",
    "PositiveInt",
    "ProfileConfig",
    "ProviderConfig",
    "RecallConfig",
    "SecretMissingError",
    "TempomemConfig",
    "TemporalConfig",
    "TemporalTLS",
    "ToolToggle",
    "config_warnings",
    "default_config",
    "load_config",
    "load_config_data",
    "load_config_file",
    "memory_rules",
    "secret",
    "validate_config_data",
    "violation",
]
