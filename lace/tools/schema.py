"""JSON schemas as providers like them: no `$ref`, no titles, no nulls, one entry per tool."""

from __future__ import annotations

import inspect
from typing import Any

from lace.tools.base import Tool


def _without_null(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, null]` with a null default becomes plain X: leaving it out means null."""
    options = node.get("anyOf")
    if not options or {"type": "null"} not in options or len(options) != 2:
        return node
    (kept,) = [option for option in options if option != {"type": "null"}]
    merged = {key: value for key, value in node.items() if key != "anyOf"}
    if merged.get("default", ...) is None:
        del merged["default"]
    return {**kept, **merged}


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    node = _without_null(node)
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        extra = {key: value for key, value in node.items() if key != "$ref"}
        return _inline({**target, **extra}, definitions)
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "properties":
            cleaned[key] = {name: _inline(item, definitions) for name, item in value.items()}
        else:
            cleaned[key] = _inline(value, definitions)
    return cleaned


def describe(tool: type[Any]) -> str:
    """A docstring as one paragraph of text."""
    return " ".join(inspect.cleandoc(tool.__doc__ or "").split())


def parameters_schema(tool: type[Tool]) -> dict[str, Any]:
    """The tool's arguments as a self-contained JSON schema."""
    raw = tool.model_json_schema()
    schema: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    schema.pop("description", None)
    return schema


def function_definition(tool: type[Tool]) -> dict[str, Any]:
    """The OpenAI-style `{"type": "function", ...}` entry for one tool."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": describe(tool),
                     "parameters": parameters_schema(tool)},
    }
