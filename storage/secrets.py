"""Secrets never reach memory (issue #13 item 4, AMB-26 widened).

``redact`` replaces every credential-shaped token with a visible marker before text is written anywhere:
the intake record (summary and capture text), so every tier's projection, the turn archive and the model
prompt only ever see the marker. ``contains_secret`` is the same detector as a yes/no for Remember, which
refuses instead (REM-*, AMB-26).

The rules follow the formats public secret scanners (gitleaks, detect-secrets) know, keyed on fixed
prefixes or on a label, so ordinary chat is left alone (measured on the LoCoMo conversations, see
``bench/secret_detection.py``). Everything here is pure and deterministic: a retried admission redacts the
same way.
"""

from __future__ import annotations

import re

MARKER = "[redacted secret]"

# Tokens recognised by their own shape (a vendor prefix, a fixed layout).
_TOKENS = [
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----)?",
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[0-9A-Z]{16}\b",  # AWS access key id
    r"\bsk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_-]{20,}",  # Anthropic
    r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}",  # OpenAI (and sk- keys of its clones)
    r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"\bgh[pousr]_[A-Za-z0-9]{36,}",  # GitHub tokens (36 characters after the prefix)
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",  # GitHub fine-grained PAT
    r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+",  # Slack webhook
    r"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
    r"\bya29\.[0-9A-Za-z_-]{20,}",  # Google OAuth access token
    r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}",  # JWT
    r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",  # SendGrid
    r"\bSK[0-9a-fA-F]{32}\b",  # Twilio API key
    r"\bnpm_[A-Za-z0-9]{36}\b",  # npm
    r"\bpypi-AgE[A-Za-z0-9_-]{50,}",  # PyPI
    r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"\b\d{8,10}:AA[A-Za-z0-9_-]{33}\b",  # Telegram bot token
    r"\bAccountKey=[A-Za-z0-9+/=]{40,}",  # Azure storage connection string
    r"\b(?:dop|doo|dor)_v1_[a-f0-9]{64}\b",  # DigitalOcean
    r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",  # Shopify
]
# Credentials inside URLs: scheme://user:password@host (keep the scheme and host readable).
_URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]{3,})(@)", re.IGNORECASE)
# A labelled secret: "api key: …", "password = …", "my token is …". Only the value is redacted.
_LABELLED = re.compile(
    r"(?i:\b(?:password|passwd|passphrase|pwd|secret|client[ _-]?secret|token|access[ _-]?token|"
    r"auth[ _-]?token|bearer|api[ _-]?key|access[ _-]?key|secret[ _-]?key|private[ _-]?key)"
    r"(?:\s*[:=]\s*|\s+is\s+|\s+))"
    r"(['\"]?)(?![^\s'\"]*\[redacted)(?=[^\s'\"]*[0-9_\-/+=])([^\s'\"]{6,})\1"
)
_TOKEN = re.compile("|".join(_TOKENS), re.DOTALL)


def redact(text: str) -> tuple[str, int]:
    """``text`` with every secret replaced by ``MARKER``, and how many were replaced."""
    count = 0

    def token(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return MARKER

    def url(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"{match[1]}{MARKER}{match[3]}"

    def labelled(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        start = match.start(2) - match.start(0)
        return match[0][:start] + MARKER + match[0][start + len(match[2]) :]

    out = _TOKEN.sub(token, text)
    out = _URL_PASSWORD.sub(url, out)
    out = _LABELLED.sub(labelled, out)
    return out, count


def contains_secret(text: str) -> bool:
    return redact(text)[1] > 0
