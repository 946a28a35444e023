"""The tool contract: a pydantic model per tool, the context it runs in, and its result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from lace.core.errors import LaceError
from lace.store import Store, Tx

ModelCheck = Callable[[str, str], "str | None"]
"""Given a provider and a model, return why it cannot be called, or None if it can."""


class ToolError(LaceError):
    """A tool failure whose message goes back to the model so it can try again."""


def no_model_check(_provider: str, _model: str) -> str | None:
    """A model check that accepts everything (for contexts with no LLM at all)."""
    return None


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: the store, who is calling, and ports to the rest of lace."""

    store: Store
    thread_id: str
    session_id: str
    check_model: ModelCheck = no_model_check
    profiles: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returns to the model; `is_error` marks a failure it can act on."""

    text: str
    is_error: bool = False


class Tool(BaseModel):
    """Base of every tool: the class docstring is the description, the fields are the arguments."""

    model_config = ConfigDict(extra="forbid")
    name: ClassVar[str]

    def run(self, tx: Tx, context: ToolContext) -> str:
        """Do the work inside the caller's transaction and return the text for the model."""
        raise NotImplementedError
