"""Every tool lace offers, by name, and the check that a configured name is one of them."""

from __future__ import annotations

import difflib
import re

TASK_TOOL_NAMES = ("task_create", "task_list", "task_view", "task_update", "task_add_note",
                   "task_complete")
DELEGATION_TOOL_NAMES = ("delegate", "spawn", "spawn_await")
MESSAGING_TOOL_NAMES = ("send_message", "subscribe", "unsubscribe", "publish")
LIFETIME_TOOL_NAMES = ("agents_list", "agent_stop")
WORKSPACE_TOOL_NAMES = ("file_read", "file_list", "file_search", "file_write", "file_edit", "bash")
BOARD_TOOL_NAMES = (TASK_TOOL_NAMES + DELEGATION_TOOL_NAMES + MESSAGING_TOOL_NAMES
                    + LIFETIME_TOOL_NAMES)
"""The tools that act on the board only: an agent with no others may run on any host."""
WORKTREE_TOOL_NAMES = ("worktree_merge",)
ALL_TOOL_NAMES = (TASK_TOOL_NAMES + DELEGATION_TOOL_NAMES + MESSAGING_TOOL_NAMES
                  + LIFETIME_TOOL_NAMES + WORKSPACE_TOOL_NAMES + WORKTREE_TOOL_NAMES)


def needs_workspace(tools: list[str] | None) -> bool:
    """Whether an agent with these tools (None: every tool) acts on a workspace folder."""
    return tools is None or any(name not in BOARD_TOOL_NAMES for name in tools)


def nearest_tool_name(name: str) -> str | None:
    """The known tool name closest to `name` (`Bash` → `bash`), or None when none is close."""
    lowered = {known.lower(): known for known in ALL_TOOL_NAMES}
    if name.lower() in lowered:
        return lowered[name.lower()]
    close = difflib.get_close_matches(name.lower(), lowered, n=1)
    return lowered[close[0]] if close else None


MCP_ENTRY = re.compile(r"mcp__(\*|[A-Za-z0-9_-]+\*?)")
"""An MCP tool's name (`mcp__<server>__<tool>`) or a pattern of them (`mcp__git__*`, `mcp__*`):
which servers exist is known only once they start, so the shape is all that is checked."""


def unknown_tool_problem(name: str, also: tuple[str, ...] = ()) -> str | None:
    """None for a known tool name (lace's, or `also`: a process's Python tools), an MCP tool
    name or a prefix pattern (`file_*`, `mcp__git__*`) that covers a tool, else what is wrong
    with it and the nearest valid name."""
    known_names = ALL_TOOL_NAMES + also
    if name in known_names or MCP_ENTRY.fullmatch(name):
        return None
    if name.startswith("mcp__"):
        return (f"bad MCP tool name {name!r}: expected mcp__<server>__<tool> (letters, digits, "
                "_ and -) or a pattern ending in * (mcp__<server>__*)")
    if name.endswith("*") and "*" not in name[:-1] and any(
            known.startswith(name[:-1]) for known in known_names):
        return None
    nearest = nearest_tool_name(name)
    hint = f"did you mean {nearest!r}?" if nearest else f"the tools are {', '.join(ALL_TOOL_NAMES)}"
    return f"unknown tool {name!r}: {hint}"
