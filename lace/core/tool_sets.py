"""Which tools an agent has: a list of names and prefix patterns (`mcp__git__*`), matched against
the tools that exist now, and narrowed for a helper by an exact intersection (so it only shrinks);
and the name an MCP server's tool has for agents."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from lace.core.tool_names import ALL_TOOL_NAMES

MCP_PREFIX = "mcp__"
EVERY_MCP_TOOL = f"{MCP_PREFIX}*"
EVERY_TOOL = (*ALL_TOOL_NAMES, EVERY_MCP_TOOL)
"""What the root agent (and the person) may use: lace's tools and every MCP server's."""
MAX_NAME_LENGTH = 64
"""The longest function name providers accept (OpenAI, Anthropic: `^[a-zA-Z0-9_-]{1,64}$`)."""
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


def is_pattern(entry: str) -> bool:
    """Whether a tool entry is a prefix pattern (`mcp__git__*`): one `*`, at the end."""
    return entry.endswith("*")


def matches(entry: str, name: str) -> bool:
    """Whether one entry (a name or a prefix pattern) covers the tool `name`."""
    return name.startswith(entry[:-1]) if is_pattern(entry) else name == entry


def grants(entries: Iterable[str], name: str) -> bool:
    """Whether any of `entries` covers the tool `name`."""
    return any(matches(entry, name) for entry in entries)


def granted(entries: Sequence[str], available: Iterable[str]) -> list[str]:
    """The tools of `available` that `entries` cover, in `available`'s order."""
    return [name for name in available if grants(entries, name)]


def _meet(wanted: str, own: str) -> str | None:
    """The entry covering exactly what both entries cover, or None when they share nothing."""
    if not is_pattern(wanted):
        return wanted if matches(own, wanted) else None
    if not is_pattern(own):
        return own if matches(wanted, own) else None
    if wanted.startswith(own[:-1]):
        return wanted
    return own if own.startswith(wanted[:-1]) else None


def intersect(wanted: Sequence[str], own: Sequence[str]) -> tuple[str, ...]:
    """The entries covering exactly the tools both lists cover (a helper's tools: what was
    asked for, within what its creator has); no duplicates, in `wanted`'s order."""
    met = (_meet(entry, mine) for entry in wanted for mine in own)
    return tuple(dict.fromkeys(entry for entry in met if entry is not None))


def uncovered(wanted: Sequence[str], own: Sequence[str]) -> list[str]:
    """The entries of `wanted` that `own` does not cover whole."""
    return [entry for entry in wanted if intersect((entry,), own) != (entry,)]


def is_mcp_tool(name: str) -> bool:
    """Whether a tool name (or pattern) is an MCP server's."""
    return name.startswith(MCP_PREFIX)


def mcp_tool_name(server: str, tool: str, taken: Iterable[str] = ()) -> str:
    """`mcp__<server>__<tool>` with characters providers refuse replaced by `_`; when that is
    longer than 64 characters or already `taken` (two tools that differ only in such
    characters), its first 55 characters, `_` and 8 hex digits of the SHA-256 of the server
    and tool names: stable from run to run."""
    name = _NOT_NAME.sub("_", f"{MCP_PREFIX}{server}__{tool}")
    if len(name) <= MAX_NAME_LENGTH and name not in set(taken):
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME_LENGTH - 9]}_{digest}"


def mcp_server_prefix(server: str) -> str:
    """The pattern that covers every tool of one server (`mcp__git__*`)."""
    return _NOT_NAME.sub("_", f"{MCP_PREFIX}{server}__") + "*"
