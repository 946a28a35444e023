"""JSON schemas as providers like them: no `$ref`, no titles, no nulls, one entry per tool."""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel

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


MAX_REFERENCES = 8
"""How many `$ref`s deep a schema is inlined; a recursive one is cut there to an open object."""


class SchemaTooBigError(ValueError):
    """Inlining a schema's `$ref`s made more nodes than its budget allows."""


def _spend(budget: list[int] | None) -> None:
    if budget is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise SchemaTooBigError("the schema's $refs inline to too many nodes")


def inline_references(node: Any, definitions: dict[str, Any], depth: int = 0,
                      budget: list[int] | None = None) -> Any:
    """A schema with its local `$ref`s replaced by their definitions, titles and `$defs`
    dropped, and optional nulls folded (an unknown or too deep `$ref` becomes `{}`). With a
    `budget` (`[nodes]`), SchemaTooBigError once more lists and objects than that are made: a
    small schema can inline to millions (a type with six fields of itself, 8 levels deep)."""
    if isinstance(node, list):
        _spend(budget)
        return [inline_references(item, definitions, depth, budget) for item in node]
    if not isinstance(node, dict):
        return node
    _spend(budget)
    node = _without_null(node)
    if "$ref" in node:
        target = definitions.get(str(node["$ref"]).rsplit("/", 1)[-1])
        if not isinstance(target, dict) or depth >= MAX_REFERENCES:
            return {}
        extra = {key: value for key, value in node.items() if key != "$ref"}
        return inline_references({**target, **extra}, definitions, depth + 1, budget)
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs", "definitions"):
            continue
        if key == "properties" and isinstance(value, dict):
            cleaned[key] = {name: inline_references(item, definitions, depth, budget)
                            for name, item in value.items()}
        else:
            cleaned[key] = inline_references(value, definitions, depth, budget)
    return cleaned


def describe(tool: Any) -> str:
    """A docstring (a tool class's or a function's) as one paragraph of text."""
    return " ".join(inspect.cleandoc(tool.__doc__ or "").split())


def parameters_schema(tool: type[BaseModel]) -> dict[str, Any]:
    """The tool's arguments (a tool class, or a function's arguments model) as a
    self-contained JSON schema."""
    raw = tool.model_json_schema()
    schema: dict[str, Any] = inline_references(raw, raw.get("$defs", {}))
    schema.pop("description", None)
    return schema


def function_definition(tool: type[Tool]) -> dict[str, Any]:
    """The OpenAI-style `{"type": "function", ...}` entry for one tool."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": describe(tool),
                     "parameters": parameters_schema(tool)},
    }
