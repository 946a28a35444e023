"""UTC timestamps as ISO-8601 text, which sorts the same as time does."""

from __future__ import annotations

from datetime import UTC, datetime


def now_iso() -> str:
    """The current UTC time, e.g. `2026-11-22T04:18:37.123456Z`."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def today_compact() -> str:
    """Today's UTC date as `YYYYMMDD`, the date part of lace's ids."""
    return datetime.now(UTC).strftime("%Y%m%d")
