"""The known names nearest a mistyped one, and how a message offers them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(name: str, known: Iterable[str], count: int = 3) -> list[str]:
    """Up to `count` known names close to `name`, closest first (compared case-insensitively);
    none when nothing is close."""
    lowered: dict[str, str] = {}
    for option in known:
        lowered.setdefault(option.lower(), option)
    close = difflib.get_close_matches(name.lower(), lowered, n=count, cutoff=0.6)
    return [lowered[option] for option in close]


def did_you_mean(names: list[str]) -> str:
    """`did you mean 'a' or 'b'?` for a message's end; empty for no names."""
    if not names:
        return ""
    quoted = [repr(name) for name in names]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {listed}?"
