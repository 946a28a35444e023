"""Plain Python functions as tools: the arguments' schema comes from the type hints, the
description from the docstring and the name from the function, so a person hands lace their own
code (`lace.run(..., tools=[my_function])`) without writing a tool class."""

from __future__ import annotations

import asyncio
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_json

from lace.core.errors import LaceError
from lace.core.secrets import mask
from lace.core.text import valid_text
from lace.core.tool_names import ALL_TOOL_NAMES
from lace.core.tool_sets import MAX_NAME_LENGTH, is_mcp_tool
from lace.paths import credential_values
from lace.tools.base import ToolError
from lace.tools.registry import decoded_arguments, describe_validation_error
from lace.tools.schema import describe, parameters_schema
from lace.tools.shell import OUTPUT_CAP, CappedOutput
from lace.tools.workspace import off_loop

VALID_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_NAME_LENGTH}}}")
"""What providers accept as a function name (OpenAI, Anthropic)."""


class ToolDefinitionError(LaceError):
    """A function that cannot be offered as a tool (its name or signature); raised when the
    runtime is assembled, never during a turn."""


def _arguments_model(function: Callable[..., Any], name: str) -> type[BaseModel]:
    """A pydantic model of the function's parameters (unknown keys refused, as lace's tools do)."""
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as error:  # an annotation that names something undefined
        raise ToolDefinitionError(f"Cannot read the type hints of the Python tool {name!r}: "
                                  f"{error}") from None
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"The Python tool {name!r} takes *{parameter.name}: a tool's arguments are "
                "named, so give each one its own parameter.")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"The Python tool {name!r} has the positional-only parameter "
                f"{parameter.name!r}: a tool's arguments are passed by name.")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints.get(parameter.name, Any), default)
    try:
        model: type[BaseModel] = create_model(
            f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        model.model_json_schema()  # a type pydantic cannot describe fails here, not in a turn
    except Exception as error:
        raise ToolDefinitionError(f"Cannot build the arguments of the Python tool {name!r}: "
                                  f"{error}") from None
    return model


def result_text(value: Any) -> str:
    """What a function returned, as the model reads it: a str as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return to_json(value, fallback=str).decode()


def shown(text: str, cap: int = OUTPUT_CAP) -> str:
    """Text from the person's code as the model may read it: lace's credentials masked (the
    function runs in lace's process, with its environment), then capped as bash output is."""
    output = CappedOutput(cap)
    output.add(mask(valid_text(text), credential_values()).encode(), final=True)
    return output.text()


@dataclass(frozen=True)
class PythonTool:
    """One function offered as a tool; a sync function runs on a thread of its own, so a slow
    one cannot freeze the event loop (and every other agent with it)."""

    name: str
    description: str
    function: Callable[..., Any]
    arguments: type[BaseModel]
    parameters: dict[str, Any]
    """The arguments' JSON schema, as providers like it."""

    @classmethod
    def from_function(cls, function: Callable[..., Any], *, name: str | None = None,
                      ) -> PythonTool:
        """The tool of `function`, named after it unless `name` is given; ToolDefinitionError
        for a name providers refuse or that belongs to lace or to MCP servers."""
        chosen = name if name is not None else getattr(function, "__name__", "")
        check_tool_name(chosen)
        if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
            raise ToolDefinitionError(
                f"The Python tool {chosen!r} is a generator function: a tool returns its "
                "answer, so return a list instead of yielding.")
        arguments = _arguments_model(function, chosen)
        return cls(name=chosen, description=describe(function), function=function,
                   arguments=arguments, parameters=parameters_schema(arguments))

    def definition(self) -> dict[str, Any]:
        """The OpenAI-style function definition the model sees."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}

    def validated(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """A call's arguments checked against the signature, or a ToolError the model can act
        on (the same shape as lace's own tools)."""
        try:
            model = self.arguments.model_validate(decoded_arguments(self.name, arguments))
        except ValidationError as error:
            raise ToolError(describe_validation_error(self.name, error)) from None
        return {field: getattr(model, field) for field in type(model).model_fields}

    async def invoke(self, arguments: dict[str, Any], timeout_s: float) -> str:
        """Call the function (a sync one off the event loop, on a daemon thread left behind if
        it never returns) for at most `timeout_s`, and return its answer as text; anything it
        raises, even SystemExit or KeyboardInterrupt, becomes a ToolError naming it (a
        ToolError's message is kept)."""
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                value = await self._called(arguments)
            return shown(result_text(value))
        except ToolError as error:
            raise ToolError(shown(str(error))) from None
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # the person's code: nothing it raises may end lace
            if isinstance(error, TimeoutError) and deadline.expired():
                raise ToolError(f"{self.name} did not return within {timeout_s:g} s (the "
                                "turn's limit, [limits] turn_timeout_s).") from None
            raise ToolError(shown(f"{self.name} raised {type(error).__name__}: "
                                  f"{_message(error)}")) from None

    async def _called(self, arguments: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**arguments)
        value = await off_loop(lambda: self.function(**arguments))
        if inspect.isawaitable(value):  # a callable object with an async __call__
            value = await value
        return value


def _message(error: BaseException) -> str:
    """An exception's message, or a note that it has none that can be read."""
    try:
        return str(error)
    except Exception:
        return "(its message cannot be shown)"


def check_tool_name(name: str, taken: Sequence[str] = ALL_TOOL_NAMES) -> None:
    """Refuse a Python tool's name that providers would reject, that lace's own tools (`taken`)
    use, or that looks like an MCP server's tool."""
    if not VALID_NAME.fullmatch(name):
        raise ToolDefinitionError(
            f"{name!r} is not a valid tool name: use 1 to {MAX_NAME_LENGTH} letters, digits, _ "
            "or - (pass name=... for a lambda or a callable object).")
    if is_mcp_tool(name):
        raise ToolDefinitionError(f"The Python tool {name!r} starts with mcp__, which names MCP "
                                  "servers' tools; rename it.")
    if name in taken:
        raise ToolDefinitionError(f"The Python tool {name!r} has the name of one of lace's "
                                  "tools; rename it.")


def python_tools(functions: Iterable[Callable[..., Any] | PythonTool],
                 ) -> dict[str, PythonTool]:
    """The tools of a list of functions (or tools already built), by name, for `ToolRunner`;
    ToolDefinitionError when two share a name."""
    tools: dict[str, PythonTool] = {}
    for item in functions:
        tool = item if isinstance(item, PythonTool) else PythonTool.from_function(item)
        if tool.name in tools:
            raise ToolDefinitionError(f"Two Python tools are named {tool.name!r}; rename one.")
        tools[tool.name] = tool
    return tools


def check_python_tools(tools: Mapping[str, PythonTool], taken: Sequence[str]) -> None:
    """Refuse Python tools filed under another name, or clashing with the `taken` names."""
    for name, tool in tools.items():
        if name != tool.name:
            raise ToolDefinitionError(f"The Python tool {tool.name!r} is filed as {name!r}.")
        check_tool_name(name, taken)
