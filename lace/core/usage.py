"""Usage totals of model calls (tokens, cost, calls), grouped by thread, model or day, with the
calls of models that have no known price counted apart: their cost is unknown, not $0."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
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


def plausible_tokens(value: Any) -> int | None:
    """A token count from outside (a provider's usage), whole, or None when it is missing or
    absurd: not a number, not finite, negative, or past MAX_CALL_TOKENS."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if 0 <= value <= MAX_CALL_TOKENS else None


def plausible_cost(value: Any) -> float | None:
    """A price in USD from outside, or None when it is missing or absurd (as for tokens)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= MAX_CALL_COST_USD else None


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
    """The `llm_calls` rows of one thread, model and day (UTC date), summed."""

    thread_id: str
    model: str
    day: str
    calls: int
    failed: int
    tokens_in: int
    tokens_out: int
    cost_usd: float


@dataclass(frozen=True)
class Totals:
    """Sums over model calls; `unpriced_calls` were made to models with no known price, so
    `cost_usd` leaves them out."""

    calls: int = 0
    failed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    @property
    def tokens(self) -> int:
        """Tokens in and out."""
        return self.tokens_in + self.tokens_out

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def cost_text(self) -> str:
        """`$0.0123`, `unpriced` when every call was to an unpriced model, or `$0.0123 +
        unpriced` when some were: never a bare $0 for a cost that is not known."""
        if self.calls and self.unpriced_calls == self.calls:
            return UNPRICED
        known = f"${self.cost_usd:.4f}"
        return f"{known} + {UNPRICED}" if self.unpriced_calls else known

    def as_dict(self) -> dict[str, int | float | str]:
        """The totals for JSON, with `tokens` and the cost as text."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "tokens": self.tokens, "cost": self.cost_text()}


def priced_models(groups: Iterable[CallGroup], known_price: Callable[[str], bool]) -> set[str]:
    """Models whose price is known: the price table lists them, or a call to them was costed
    (a price registered at run time)."""
    return {group.model for group in groups if group.cost_usd > 0 or known_price(group.model)}


def totals_by(groups: Iterable[CallGroup], by: str, priced: set[str]) -> dict[str, Totals]:
    """Totals per thread, model or day (`by`, one of GROUPINGS)."""
    totals: dict[str, Totals] = {}
    for group in groups:
        key = {"thread": group.thread_id, "model": group.model, "day": group.day}[by]
        totals[key] = totals.get(key, Totals()) + Totals(
            calls=group.calls, failed=group.failed, tokens_in=group.tokens_in,
            tokens_out=group.tokens_out, cost_usd=group.cost_usd,
            unpriced_calls=0 if group.model in priced else group.calls)
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
