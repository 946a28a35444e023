"""Text and lists shown to a person whole, or cut with a mark that says how much was left out:
what a person approves must never end silently where a hidden part begins."""

from __future__ import annotations

from collections.abc import Sequence


def shown(text: str, limit: int, see_all: str = "") -> str:
    """`text` if it has at most `limit` characters, else its first `limit` characters and
    `… (N more characters)`, with `see_all` (how to see the rest) inside the parentheses."""
    if len(text) <= limit:
        return text
    hidden = len(text) - limit
    hint = f"; {see_all}" if see_all else ""
    return f"{text[:limit]}… ({hidden} more characters{hint})"


def shown_briefly(text: str, limit: int) -> str:
    """`text` in a listing: whole when cutting it at `limit` would not make it shorter (a mark
    longer than what it hides helps no one), else cut as `shown` cuts it."""
    cut = shown(text, limit)
    return cut if len(cut) < len(text) else text


def named_few(names: Sequence[str], most: int) -> str:
    """The first `most` names, and how many more there are: `a, b, c and 4 more`."""
    rest = len(names) - most
    return ", ".join(names[:most]) + (f" and {rest} more" if rest > 0 else "")
