"""Every tool lace offers, by name: what `new:` agents get unless their tools are narrowed."""

from __future__ import annotations

TASK_TOOL_NAMES = ("task_create", "task_list", "task_view", "task_update", "task_add_note",
                   "task_complete")
DELEGATION_TOOL_NAMES = ("delegate", "spawn", "spawn_await")
MESSAGING_TOOL_NAMES = ("send_message", "subscribe", "unsubscribe", "publish")
LIFETIME_TOOL_NAMES = ("agents_list", "agent_stop")
WORKSPACE_TOOL_NAMES = ("file_read", "file_list", "file_search", "file_write", "file_edit", "bash")
ALL_TOOL_NAMES = (TASK_TOOL_NAMES + DELEGATION_TOOL_NAMES + MESSAGING_TOOL_NAMES
                  + LIFETIME_TOOL_NAMES + WORKSPACE_TOOL_NAMES)
