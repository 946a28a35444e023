"""What an MCP server sends, as lace shows it to a model: its tools as function definitions
(the input schema passed through, adapted where providers refuse it) and a call's result as
text (blocks joined, images and other binary content as a short description, capped like
`bash` output)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lace.core.text import MAX_NESTING, value_nesting
from lace.tools.schema import SchemaTooBigError, inline_references
from lace.tools.shell import OUTPUT_CAP, CappedOutput

MAX_SCHEMA_CHARACTERS = 50_000
"""A tool whose input schema is longer than this is left out: it would crowd every request."""
MAX_DESCRIPTION = 2_000
MAX_SERVER_TOOLS = 100
"""The most tools one server offers: every request carries them (OpenAI takes 128 in all)."""
MAX_SERVER_CHARACTERS = 100_000
"""The most characters of function definitions one server adds to every request."""


@dataclass(frozen=True)
class ServerTool:
    """One tool of one server, as agents see it (`name`) and as the server knows it (`tool`)."""

    name: str
    server: str
    tool: str
    description: str
    parameters: dict[str, Any]
    read_only: bool

    def definition(self) -> dict[str, Any]:
        """The OpenAI-style function definition of the tool."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}


def _valid_schema(schema: dict[str, Any]) -> bool:
    """Whether `schema` is a JSON schema (of its `$schema` draft, else 2020-12): one that is
    not (`"properties": [1, 2]`, `"$defs": []`) would break lace's inlining or make a provider
    refuse every request that carries it."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError:
        return False
    return True


def adapted_schema(schema: Any) -> dict[str, Any] | None:
    """A tool's input schema as providers accept it: local `$ref`s inlined (recursive ones
    cut to an open object), titles and `$schema` dropped, and always an object with
    `properties`; None when it is too big or too deeply nested to send."""
    if not isinstance(schema, dict) or value_nesting(schema) > MAX_NESTING or \
            len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARACTERS or \
            not _valid_schema(schema):
        return None
    definitions = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    try:  # each list or object is at least 2 characters: more cannot fit the cap
        adapted: dict[str, Any] = inline_references(schema, definitions,
                                                    budget=[MAX_SCHEMA_CHARACTERS // 2])
    except SchemaTooBigError:
        return None
    for key in ("$schema", "$id", "definitions", "description"):
        adapted.pop(key, None)
    if adapted.get("type") != "object":
        adapted = {"type": "object", **{k: v for k, v in adapted.items() if k != "type"}}
    adapted.setdefault("properties", {})
    return adapted if len(json.dumps(adapted, default=str)) <= MAX_SCHEMA_CHARACTERS else None


def described(description: str | None, server: str, tool: str) -> str:
    """The tool's description (capped), saying which server it comes from."""
    text = " ".join((description or "").split())
    if len(text) > MAX_DESCRIPTION:
        text = text[:MAX_DESCRIPTION - 1] + "…"
    return f"[MCP server {server}, tool {tool}] {text}".rstrip()


def _block_text(block: Any) -> str:
    """One content block: its text, or what it is (an image, audio, a resource)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(str(getattr(block, "data", ""))) * 3 // 4
        return f"[{kind} {getattr(block, 'mime_type', '')}, about {size:,} bytes, not shown]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource {resource.uri}]\n{text}"
        return f"[resource {resource.uri} ({getattr(resource, 'mime_type', None) or 'binary'})" \
               ", not shown]"
    if kind == "resource_link":
        return f"[resource link {block.uri}: {block.name}]"
    return f"[{kind} content, not shown]"


def result_text(result: Any, cap: int = OUTPUT_CAP) -> str:
    """A `CallToolResult` as one text, capped at `cap` characters: its content blocks, else
    its structured content as JSON."""
    parts = [_block_text(block) for block in result.content or ()]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    output = CappedOutput(cap)
    output.add("\n".join(parts).encode(), final=True)
    return output.text() or "(no content)"
