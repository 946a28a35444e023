"""Every tool lace offers, by name: what `new:` agents get unless their tools are narrowed (the
list lives in the core, so the settings can check names without importing the tools)."""

from __future__ import annotations

from lace.core.tool_names import (
    ALL_TOOL_NAMES,
    DELEGATION_TOOL_NAMES,
    LIFETIME_TOOL_NAMES,
    MESSAGING_TOOL_NAMES,
    TASK_TOOL_NAMES,
    WORKSPACE_TOOL_NAMES,
    WORKTREE_TOOL_NAMES,
)

__all__ = ["ALL_TOOL_NAMES", "DELEGATION_TOOL_NAMES", "LIFETIME_TOOL_NAMES",
           "MESSAGING_TOOL_NAMES", "TASK_TOOL_NAMES", "WORKSPACE_TOOL_NAMES",
           "WORKTREE_TOOL_NAMES"]
