"""Masking credential values in text lace writes or prints: every occurrence of each value (and
of its URL-quoted form) becomes `[redacted]`, unless the value is too short to mask blindly."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from lace.core.text import map_strings

MASK = "[redacted]"
MIN_MASKED_LENGTH = 8
"""Values shorter than this are left alone: masking `admin` or `1234` everywhere would mangle
ordinary text, and a key that short is no secret worth the damage."""


@lru_cache(maxsize=16)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    forms = {form for secret in secrets if len(secret) >= MIN_MASKED_LENGTH
             for form in (secret, quote(secret, safe=""))}
    if not forms:
        return None
    # longest first, so a value that contains another is masked whole
    return re.compile("|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True)))


def mask(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced by `[redacted]`."""
    pattern = _pattern(tuple(secrets))
    return text if pattern is None else pattern.sub(MASK, text)


def mask_data(value: Any, secrets: Iterable[str]) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string in it, keys included, masked;
    walked without recursion, so no nesting depth can raise. Unchanged when there is nothing
    to mask."""
    pattern = _pattern(tuple(secrets))
    if pattern is None:
        return value
    return map_strings(value, lambda text: pattern.sub(MASK, text))
