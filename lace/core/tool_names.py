"""Every tool lace offers, by name, and the check that a configured name is one of them."""

from __future__ import annotations

import difflib

TASK_TOOL_NAMES = ("task_create", "task_list", "task_view", "task_update", "task_add_note",
                   "task_complete")
DELEGATION_TOOL_NAMES = ("delegate", "spawn", "spawn_await")
MESSAGING_TOOL_NAMES = ("send_message", "subscribe", "unsubscribe", "publish")
LIFETIME_TOOL_NAMES = ("agents_list", "agent_stop")
WORKSPACE_TOOL_NAMES = ("file_read", "file_list", "file_search", "file_write", "file_edit", "bash")
ALL_TOOL_NAMES = (TASK_TOOL_NAMES + DELEGATION_TOOL_NAMES + MESSAGING_TOOL_NAMES
                  + LIFETIME_TOOL_NAMES + WORKSPACE_TOOL_NAMES)


def nearest_tool_name(name: str) -> str | None:
    """The known tool name closest to `name` (`Bash` → `bash`), or None when none is close."""
    lowered = {known.lower(): known for known in ALL_TOOL_NAMES}
    if name.lower() in lowered:
        return lowered[name.lower()]
    close = difflib.get_close_matches(name.lower(), lowered, n=1)
    return lowered[close[0]] if close else None


def unknown_tool_problem(name: str) -> str | None:
    """None for a known tool name, else what is wrong with it and the nearest valid name."""
    if name in ALL_TOOL_NAMES:
        return None
    nearest = nearest_tool_name(name)
    hint = f"did you mean {nearest!r}?" if nearest else f"the tools are {', '.join(ALL_TOOL_NAMES)}"
    return f"unknown tool {name!r}: {hint}"
