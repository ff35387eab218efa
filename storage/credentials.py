"""Pure text guards for memory writes: credential detection (AMB-26) and unsafe text (AMB-25).

Both return content-free answers (a bool or a short reason code), so a rejection can be logged or sent
to Temporal history without leaking the text it rejected. The rules mirror the capture contract guard in
``capture/contracts.py`` (``unsafe_text_reason``); storage cannot import capture, so they live here.
"""

from __future__ import annotations

import re
import unicodedata

from tempomem.storage.secrets import contains_secret

MAX_TEXT_BYTES = 1024  # AMB-25: per memory text, UTF-8 bytes

# AMB-26: a conservative set. JWTs must start like a base64url JSON header ("eyJ") so that version
# strings and dotted identifiers are not mistaken for three base64url segments.
_CREDENTIAL = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    r"|AKIA[0-9A-Z]{16}"
    r"|sk-[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}"
    r"|xox[abpr]-"
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}"
    r"|(?i:password|passwd|secret|token|api[_-]?key)\s*[:=]\s*\S{6,}"
)

_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
# Zero-width and invisible formatting characters; ZWJ (U+200D) is allowed only inside emoji sequences.
_ZERO_WIDTH = frozenset(
    {0x200B, 0x200C, 0x200E, 0x200F, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0xFEFF, 0x180E, 0x061C,
     0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x00AD}
)  # fmt: skip
_ZWJ = 0x200D
_LINE_SEPARATORS = frozenset({0x2028, 0x2029})
# A leading Markdown bullet (-, *, +, "1." / "1)") or ATX heading would change the day file's structure.
_MARKDOWN_PREFIX = re.compile(r"^\s*(?:[-*+](?:\s|$)|\d{1,9}[.)](?:\s|$)|#{1,6}(?:\s|$))")


def contains_credential(text: str) -> bool:
    """AMB-26: whether ``text`` carries something that looks like a secret: the spec's list, widened to
    every format ``storage.secrets`` redacts (#13 item 4)."""
    return _CREDENTIAL.search(text) is not None or contains_secret(text)


def _is_emoji_side(ch: str) -> bool:
    cp = ord(ch)
    return unicodedata.category(ch) == "So" or 0x1F3FB <= cp <= 0x1F3FF or cp == 0xFE0F


def unsafe_reason(text: str, *, max_bytes: int = MAX_TEXT_BYTES) -> str | None:
    """AMB-25: a content-free reason code when ``text`` must not be stored, else ``None``.

    Codes: ``empty``, ``too_long``, ``control``, ``bidi``, ``zero_width``, ``surrogate``,
    ``html_comment``, ``markdown_prefix``, ``credential``.
    """
    if not text.strip():
        return "empty"
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        return "too_long"
    if (reason := unsafe_characters(text)) is not None:
        return reason
    if _MARKDOWN_PREFIX.match(text):
        return "markdown_prefix"
    if contains_credential(text):
        return "credential"
    return None


def unsafe_characters(text: str) -> str | None:
    """The character-level part of AMB-25 (also used to withhold unsafe text on display, AMB-37):
    controls, bidi overrides, invisible characters (ZWJ only inside emoji), lone surrogates and HTML
    comment delimiters."""
    for i, ch in enumerate(text):
        cp = ord(ch)
        if cp < 0x20 or 0x7F <= cp <= 0x9F or cp in _LINE_SEPARATORS:
            return "control"
        if cp in _BIDI:
            return "bidi"
        if cp in _ZERO_WIDTH:
            return "zero_width"
        if cp == _ZWJ and not (
            0 < i < len(text) - 1 and _is_emoji_side(text[i - 1]) and _is_emoji_side(text[i + 1])
        ):
            return "zero_width"
        if 0xD800 <= cp <= 0xDFFF:  # a lone surrogate is not text
            return "surrogate"
    if "<!--" in text or "-->" in text:
        return "html_comment"
    return None
