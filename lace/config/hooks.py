"""`[[hooks.EVENT]]`: commands run at points of every agent's work, in Claude Code's hooks
contract (its settings.json `hooks`, as TOML tables), so a script written for Claude Code works
with lace unchanged."""

from __future__ import annotations

import re
from typing import Any, Literal

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, field_validator

HookEvent = Literal[
    "PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStart", "SubagentStop",
    "SessionStart", "SessionEnd", "Notification", "PreCompact", "TaskCreated", "TaskCompleted"]
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0
EXACT_NAMES = re.compile(r"[A-Za-z0-9_\-,| ]*")
"""A matcher of only these characters names tools exactly (`bash`, `file_edit|file_write`);
any other is a regular expression searched in the name (RE2: linear time), as in Claude
Code."""


class HookCommand(BaseModel):
    """One command: run through `sh -c` with the event's JSON on stdin."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["command"] = "command"
    command: str = Field(min_length=1, max_length=10_000)
    timeout: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S,
                           description="seconds before the hook is killed (it then does "
                                       "not block)")


class HookMatcher(BaseModel):
    """A matcher and the commands run when it matches (no matcher, `""` or `"*"`: always)."""

    model_config = ConfigDict(extra="forbid")
    matcher: str = Field(default="", max_length=1000)
    hooks: list[HookCommand] = Field(min_length=1, max_length=100)

    @field_validator("matcher")
    @classmethod
    def _compiles(cls, matcher: str) -> str:
        if matcher.strip() != "*" and not EXACT_NAMES.fullmatch(matcher):
            try:
                _compiled(matcher)
            except UnicodeEncodeError:
                raise ValueError("not a regular expression (a lone surrogate)") from None
            except re2.error as error:
                problem = error.args[0].decode() if isinstance(error.args[0], bytes) \
                    else str(error.args[0])
                raise ValueError(f"not a regular expression RE2 accepts ({problem})") from None
        return matcher

    def matches(self, subject: str | None) -> bool:
        """Whether the hooks run for `subject` (a tool's name; None for an event that has
        none, which every matcher matches)."""
        matcher = self.matcher.strip()
        if subject is None or matcher in ("", "*"):
            return True
        if EXACT_NAMES.fullmatch(matcher):
            return subject in {name.strip() for name in re.split(r"[|,]", matcher)}
        return _compiled(matcher).search(subject) is not None


Hooks = dict[HookEvent, list[HookMatcher]]


def _compiled(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)
