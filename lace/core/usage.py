"""Usage totals of model calls (tokens, cached tokens, cost, calls), grouped by thread, model or
day, with the calls of models that have no known price counted apart (their cost is unknown,
not $0), and the calls lace cut off apart from those that failed."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

GROUPINGS: Final = ("thread", "model", "day")
UNPRICED = "unpriced"
MAX_CALL_TOKENS: Final = 10_000_000
"""More tokens than any model reads or writes in one call: a provider's count past it is absurd
(and a file's is refused)."""
MAX_CALL_COST_USD: Final = 10_000.0
"""More than any one model call costs: a provider's price past it is absurd."""
MAX_LATENCY_MS: Final = 86_400_000.0
"""A day: a latency from a file past it is refused."""
TURN_CUT_OFF: Final = "cancelled (turn cut off)"
"""The error of a call lace cut off because its turn was stopped or interrupted."""
ANSWER_TOO_LARGE: Final = "AnswerTooLarge"
"""How the error of a call begins when lace stopped reading an answer past its limits."""


def plausible_tokens(value: Any) -> int | None:
    """A token count from outside (a provider's usage), whole, or None when it is missing or
    absurd: not a number, not finite, negative, or past MAX_CALL_TOKENS."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if 0 <= value <= MAX_CALL_TOKENS else None


def held_tokens(value: Any) -> int:
    """A token count from outside held within [0, MAX_CALL_TOKENS]: what a call is counted
    to have used. Past the bound it is the bound, and anything else none, so a figure no
    client checked still counts and can never give tokens back."""
    checked = plausible_tokens(value)
    if checked is not None:
        return checked
    positive = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return MAX_CALL_TOKENS if positive else 0  # NaN, negatives and non-numbers: none


def plausible_cost(value: Any) -> float | None:
    """A price in USD from outside, or None when it is missing or absurd (as for tokens)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= MAX_CALL_COST_USD else None


@dataclass(frozen=True)
class Usage:
    """What a subtree (an agent and everything below it) has used."""

    tokens: int
    cost_usd: float
    turns: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.tokens + other.tokens, self.cost_usd + other.cost_usd,
                     self.turns + other.turns)


@dataclass(frozen=True)
class CallTokens:
    """The tokens of one model call: `prompt` counts every input token, the part read from the
    provider's prompt cache (`cache_read`) and written to it (`cache_write`) too; `reasoning` is
    the part of `completion` spent thinking. None: the provider did not say."""

    prompt: int
    completion: int
    cache_read: int | None = None
    cache_write: int | None = None
    reasoning: int | None = None

    @property
    def uncached_input(self) -> int:
        """Input tokens neither read from nor written to the cache."""
        return self.prompt - (self.cache_read or 0) - (self.cache_write or 0)


_SCHEMA_SIZES: dict[tuple[int, ...], tuple[list[Any], int]] = {}
_SCHEMA_SIZES_KEPT = 64


def schema_characters(tools: list[Any]) -> int:
    """The length of `tools` as JSON, remembered per list of definitions: the registry hands
    every turn the same definition objects, and at 15,000 characters encoding them again for
    each model call cost as much as a third of the request's own encoding. An entry holds its
    objects, so no other object can take their ids while it is remembered."""
    key = tuple(map(id, tools))
    found = _SCHEMA_SIZES.get(key)
    if found is None:
        if len(_SCHEMA_SIZES) >= _SCHEMA_SIZES_KEPT:
            _SCHEMA_SIZES.clear()
        found = _SCHEMA_SIZES[key] = (list(tools), len(json.dumps(tools)))
    return found[1]


def estimate_tokens(messages: Iterable[Mapping[str, Any]], schema_characters: int = 0) -> int:
    """A generous estimate of the tokens of some messages: one for every three characters of
    their texts and tool-call arguments and of the tools' schemas (`schema_characters`)."""
    characters = schema_characters
    for message in messages:
        content = message.get("content")
        characters += len(content) if isinstance(content, str) else len(str(content or ""))
        for call in message.get("tool_calls") or ():
            characters += len(str(call.get("function", {}).get("arguments") or "")) + 40
    return characters // 3


@dataclass(frozen=True)
class CallGroup:
    """The `llm_calls` rows of one thread, model and day (UTC date), summed; `unpriced` of
    them have no known cost (NULL)."""

    thread_id: str
    model: str
    day: str
    calls: int
    failed: int
    cut: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    unpriced: int = 0


@dataclass(frozen=True)
class Totals:
    """Sums over model calls: `tokens_in` counts every input token, those read from
    (`cache_read_tokens`) and written to (`cache_write_tokens`) the prompt cache too;
    `unpriced_calls` had no known price, so `cost_usd` (the known part) leaves them out;
    `failed` calls the provider failed, `cut` calls lace cut off (`TURN_CUT_OFF`,
    `ANSWER_TOO_LARGE`)."""

    calls: int = 0
    failed: int = 0
    cut: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def tokens(self) -> int:
        """Tokens in and out."""
        return self.tokens_in + self.tokens_out

    @property
    def uncached_in(self) -> int:
        """Input tokens neither read from nor written to the cache."""
        return self.tokens_in - self.cache_read_tokens - self.cache_write_tokens

    @property
    def cached_share(self) -> float | None:
        """The share of input tokens read from the cache (None without input)."""
        return self.cache_read_tokens / self.tokens_in if self.tokens_in else None

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def cost_text(self) -> str:
        """`$0.0123`, `unpriced` when every call was to an unpriced model, or `$0.0123 +
        unpriced` when some were: never a bare $0 for a cost that is not known."""
        if self.calls and self.unpriced_calls == self.calls:
            return UNPRICED
        known = dollars(self.cost_usd)
        return f"{known} + {UNPRICED}" if self.unpriced_calls else known

    def as_dict(self) -> dict[str, int | float | str | None]:
        """The totals for JSON: `cost_usd` is null when any call's cost is unknown (the
        known part is `known_cost_usd`), and the cost as text."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "cost_usd": None if self.unpriced_calls else self.cost_usd,
                "known_cost_usd": self.cost_usd, "tokens": self.tokens,
                "uncached_in": self.uncached_in, "cached_share": self.cached_share,
                "cost": self.cost_text()}


def dollars(amount: float) -> str:
    """An amount in USD with at least three significant digits below a cent ($0.0000270,
    $0.00123), two decimals from $1 ($12.50), four between ($0.0123)."""
    if amount == 0:
        return "$0.00"
    decimals = 2 if abs(amount) >= 1 else max(4, 2 - math.floor(math.log10(abs(amount))))
    return f"${amount:.{decimals}f}"


def totals_by(groups: Iterable[CallGroup], by: str) -> dict[str, Totals]:
    """Totals per thread, model or day (`by`, one of GROUPINGS)."""
    totals: dict[str, Totals] = {}
    for group in groups:
        key = {"thread": group.thread_id, "model": group.model, "day": group.day}[by]
        totals[key] = totals.get(key, Totals()) + Totals(
            calls=group.calls, failed=group.failed, cut=group.cut, tokens_in=group.tokens_in,
            tokens_out=group.tokens_out, cost_usd=group.cost_usd,
            unpriced_calls=group.unpriced, cache_read_tokens=group.cache_read_tokens,
            cache_write_tokens=group.cache_write_tokens,
            reasoning_tokens=group.reasoning_tokens)
    return totals


def subtree_totals(threads: Iterable[str], own: Mapping[str, Totals]) -> dict[str, Totals]:
    """Each thread's totals with those of every thread below it (`<id>.N...`): each thread
    adds its own to itself and each of its ancestors."""
    threads = list(threads)
    subtree = {thread: Totals() for thread in threads}
    for thread in threads:
        parts = thread.split(".")
        for depth in range(1, len(parts) + 1):
            owner = ".".join(parts[:depth])
            if owner in subtree:
                subtree[owner] = subtree[owner] + own.get(thread, Totals())
    return subtree
