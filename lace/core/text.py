"""Text from models, tools and the database made safe to keep and to show: valid UTF-8, JSON of a
bounded depth, and control characters escaped before they reach a terminal."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

MAX_NESTING = 64
"""The deepest JSON a tool call may send; Python's decoder and encoder recurse once per level
and fail past about 1,000, and no tool's schema needs more than 4."""

MAX_REPLY_CHARACTERS = 1_000_000
"""The most lace keeps of one model reply, its text and its calls' arguments together: models
answer with at most about 128,000 tokens (some 500,000 characters), so a reply past this is
broken or hostile, and storing it whole would grow the database by its size at every turn."""
CUT_ARGUMENTS = "lace_cut_arguments"
"""The one key of the arguments lace puts in place of a call's arguments it cut."""

_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]++")
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")
_PAIR_PASSES = 8
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
"""Control characters (C0 but tab and newline, DEL, C1), bidi controls and lone surrogates."""
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")
"""What `json.dumps(ensure_ascii=False)` leaves unescaped but a terminal would act on."""


def valid_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, so it encodes as UTF-8 (a pair split
    in two code points is joined)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def valid_strings(value: Any) -> Any:
    """A decoded JSON value with `valid_text` applied to every string in it, keys included."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_strings(key): valid_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [valid_strings(item) for item in value]
    return value


def cut_note(cut: int) -> str:
    """What lace adds where it cut a reply's text."""
    return (f"\n\n[lace cut this reply here: {cut:,} more characters; it keeps at most "
            f"{MAX_REPLY_CHARACTERS:,} of one reply]")


def cut_arguments(length: int) -> str:
    """The arguments lace keeps of a call whose own were past what is left of the reply's
    budget; decoding them is a tool error that says so."""
    return json.dumps({CUT_ARGUMENTS: (
        f"the arguments were {length:,} characters, past the {MAX_REPLY_CHARACTERS:,} lace "
        "keeps of one reply, and were cut. Send less in one call (a big file in parts).")})


def json_nesting(text: str, limit: int = MAX_NESTING) -> int:
    """How deep the arrays and objects of a JSON text go, counted without decoding it (brackets
    inside strings do not count); counting stops past `limit`. Linear: 1 MB of the worst
    brackets takes about 0.3 s here, wide JSON of that size 0.03 s."""
    brackets = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", text))
    removed = 0  # each pass takes away the innermost empty pairs: one level, at C speed
    while removed < _PAIR_PASSES and (shorter := _EMPTY_PAIR.sub("", brackets)) != brackets:
        brackets, removed = shorter, removed + 1
    depth = deepest = 0
    for bracket in brackets:
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if removed + deepest > limit:
                break
        else:
            depth = max(depth - 1, 0)
    return removed + deepest


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples as lists, strings) with `change`
    applied to every string in it, keys included; walked without recursion, so no nesting
    depth can raise."""
    if isinstance(value, str):
        return change(value)
    if not isinstance(value, dict | list | tuple):
        return value
    root: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    pending: list[tuple[Any, dict[Any, Any] | list[Any]]] = [(value, root)]
    while pending:
        source, target = pending.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            if isinstance(item, str):
                copied: Any = change(item)
            elif isinstance(item, dict | list | tuple):
                copied = {} if isinstance(item, dict) else []
                pending.append((item, copied))
            else:
                copied = item
            if isinstance(target, dict):
                target[change(key) if isinstance(key, str) else key] = copied
            else:
                target.append(copied)
    return root


def value_nesting(value: Any) -> int:
    """How deep the lists and dicts of a decoded value go, counted without recursion (a
    container met twice counts once)."""
    deepest, stack, seen = 0, [(value, 1)], set()
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list | tuple) or id(item) in seen:
            continue
        seen.add(id(item))
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict)
                                                      else item))
    return deepest


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` safe to print on a terminal: control characters, bidi controls and lone surrogates
    become visible escapes (`\\x1b`, `\\u202e`); newlines and tabs stay unless `one_line`."""
    return (_UNSAFE_ONE_LINE if one_line else _UNSAFE).sub(_escaped, text)


def printable_json(text: str) -> str:
    """JSON from `json.dumps(..., ensure_ascii=False)` with what it left raw but a terminal
    would act on escaped as `\\uXXXX` (still the same JSON)."""
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
