"""The one instant format on disk and in every content-free record: UTC, millisecond precision, ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def format_instant(value: datetime) -> str:
    """UTC, millisecond precision, Z suffix: the one instant format on disk."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_instant(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
