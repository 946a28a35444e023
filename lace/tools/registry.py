"""Describes the tools: their schemas per agent, and a call's arguments validated into its model
(running a call is the runtime's `ToolRunner.call`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from lace.core.text import (
    CUT_ARGUMENTS,
    MAX_NESTING,
    json_nesting,
    valid_strings,
    value_nesting,
)
from lace.core.tool_sets import grants
from lace.tools.base import Tool, ToolError
from lace.tools.delegation import DELEGATION_TOOLS, Spawn
from lace.tools.files import FILE_TOOLS
from lace.tools.lifetime import LIFETIME_TOOLS
from lace.tools.messaging import MESSAGING_TOOLS
from lace.tools.schema import function_definition
from lace.tools.shell import SHELL_TOOLS
from lace.tools.spawning import SPAWNING_TOOLS
from lace.tools.task_tools import TASK_TOOLS
from lace.tools.worktree_tools import WORKTREE_TOOLS

KEY_SUGGESTIONS = {
    "assignTo": "assigned_to",
    "assignedTo": "assigned_to",
    "assign_to": "assigned_to",
    "assignee": "assigned_to",
    "taskId": "task_id",
    "includeCompleted": "include_completed",
}


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_validation_error(tool_name: str, error: ValidationError) -> str:
    """Validation problems as lines a model can act on: where, what, and what it sent."""
    lines = [f"Invalid arguments for {tool_name}:"]
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"]) or "(arguments)"
        message = problem["msg"]
        if problem["type"] == "extra_forbidden":
            key = str(problem["loc"][-1])
            hint = KEY_SUGGESTIONS.get(key)
            message = f"unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
        elif problem["type"] != "missing":
            message += f" (got {_shown(problem.get('input'))})"
        lines.append(f"- {where}: {message}")
    return "\n".join(lines)


class ToolRegistry:
    """The tools lace offers, each by name."""

    def __init__(self, tools: Iterable[type[Tool]] = TASK_TOOLS + DELEGATION_TOOLS
                 + MESSAGING_TOOLS + LIFETIME_TOOLS + FILE_TOOLS + SHELL_TOOLS
                 + WORKTREE_TOOLS) -> None:
        self.tools: dict[str, type[Tool]] = {tool.name: tool for tool in tools}
        self._definitions: dict[tuple[tuple[str, ...] | None, tuple[str, ...], bool,
                                      tuple[str, ...]], list[dict[str, Any]]] = {}

    def names(self) -> list[str]:
        """Every tool name, in registration order."""
        return list(self.tools)

    def definitions(self, allowed: Sequence[str] | None = None, *,
                    profiles: Sequence[str] = (), can_spawn: bool = True,
                    also_granted: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Function definitions for the lace tools an agent may call (all when `allowed` is
        None; its entries may be patterns): `spawn` lists only the agent's own tools (with
        `also_granted`, its MCP tools) and the profile names as enums, and an agent at the
        depth limit does not see the spawning tools at all."""
        key = (None if allowed is None else tuple(allowed), tuple(sorted(profiles)), can_spawn,
               tuple(also_granted))
        if key not in self._definitions:  # building schemas costs ms; every turn asks
            own = tuple(name for name in self.tools if allowed is None or grants(allowed, name))
            self._definitions[key] = self._build_definitions(own, key[1], can_spawn,
                                                             key[3])
        return self._definitions[key]

    def _build_definitions(self, own: tuple[str, ...], profiles: tuple[str, ...],
                           can_spawn: bool, also_granted: tuple[str, ...],
                           ) -> list[dict[str, Any]]:
        definitions = []
        for name in own:
            if not can_spawn and name in SPAWNING_TOOLS:
                continue
            definition = function_definition(self.tools[name])
            if self.tools[name] is Spawn:
                definition["function"]["parameters"] = Spawn.schema_for(
                    own + also_granted, list(profiles))
            definitions.append(definition)
        return definitions

    def parse(self, name: str, arguments: str | dict[str, Any] | None,
              allowed: Sequence[str] | None = None) -> Tool:
        """Validate a call's arguments into the tool's model, or raise ToolError."""
        tool = self.tools.get(name)
        if tool is None or (allowed is not None and not grants(allowed, name)):
            raise ToolError(self.unknown(name, allowed))
        try:
            return tool.model_validate(decoded_arguments(name, arguments))
        except ValidationError as error:
            raise ToolError(describe_validation_error(name, error)) from None

    def unknown(self, name: str, allowed: Sequence[str] | None,
                also_granted: Sequence[str] = ()) -> str:
        """The error for a call of a tool the caller does not have."""
        available = ", ".join([n for n in self.tools if allowed is None or grants(allowed, n)]
                              + list(also_granted))
        return f"Unknown tool {name!r}. Available tools: {available}."


def decoded_arguments(name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """A call's arguments as one JSON object (text made valid), or a ToolError the model can
    act on; nesting is measured before decoding (Python's decoder recurses per level)."""
    depth = json_nesting(arguments) if isinstance(arguments, str) else value_nesting(arguments)
    if depth > MAX_NESTING:
        raise ToolError(f"Invalid arguments for {name}: the JSON is nested deeper than "
                        f"{MAX_NESTING} levels (arrays and objects inside each other). Send "
                        "a flatter object.")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise ToolError(f"Invalid JSON arguments for {name}: {error.msg} at position "
                            f"{error.pos}. Send one JSON object.") from None
    if not isinstance(arguments, dict):
        raise ToolError(f"Arguments for {name} must be a JSON object, "
                        f"got {type(arguments).__name__}.")
    if list(arguments) == [CUT_ARGUMENTS]:
        raise ToolError(f"Invalid arguments for {name}: {arguments[CUT_ARGUMENTS]}")
    decoded: dict[str, Any] = valid_strings(arguments)
    return decoded
