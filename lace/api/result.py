"""What `lace.run` returns: the root's answer, the session, and what every model call cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

OutputT = TypeVar("OutputT")


@dataclass(frozen=True)
class Usage:
    """Tokens of every model call of a session, the helpers' included."""

    input_tokens: int
    output_tokens: int
    calls: int
    """Model calls, failed ones included (their tokens are 0)."""

    @property
    def total_tokens(self) -> int:
        """Tokens in and out."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Result(Generic[OutputT]):
    """A finished session: `output` is the root's final text, or an instance of the
    `output_type` asked for; `cost_usd` is None when a model of the session has no known price
    (its cost is unknown, not zero)."""

    output: OutputT
    session_id: str
    usage: Usage
    cost_usd: float | None
