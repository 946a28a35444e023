"""UTC timestamps as ISO-8601 text, which sorts the same as time does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def iso(moment: datetime) -> str:
    """A UTC time as lace writes it, e.g. `2026-11-22T04:18:37.123456Z`."""
    return moment.astimezone(UTC).strftime(ISO_FORMAT)


def now_iso() -> str:
    """The current UTC time as lace writes it."""
    return iso(datetime.now(UTC))


def iso_ago(seconds: float) -> str:
    """The UTC time `seconds` ago, as lace writes it."""
    return iso(datetime.now(UTC) - timedelta(seconds=seconds))


def seconds_since(text: str) -> float:
    """Seconds from a time lace wrote until now (`fromisoformat`: strptime takes 20 times as
    long, and its first call in a process builds its patterns for tens of milliseconds, on the
    store's thread in the middle of a fan-out)."""
    moment = datetime.fromisoformat(text)
    return (datetime.now(UTC) - (moment if moment.tzinfo else moment.replace(tzinfo=UTC))
            ).total_seconds()


def today_compact() -> str:
    """Today's UTC date as `YYYYMMDD`, the date part of lace's ids."""
    return datetime.now(UTC).strftime("%Y%m%d")
