"""What `lace mcp serve` offers of a runtime: the task tools and the person's tools, called as
the person through the runtime's one tool path, and the threads of the session it serves."""

from __future__ import annotations

from lace.runtime.facade import Runtime
from lace.runtime.tool_runner import ToolRunner
from lace.tools.person_tools import SERVED_TOOLS, session_thread
from lace.tools.registry import ToolRegistry

__all__ = ["served_tools", "session_thread"]


def served_tools(runtime: Runtime) -> ToolRunner:
    """The runtime's tool path offering only the served tools, in the order they are listed."""
    return runtime.offering(ToolRegistry(SERVED_TOOLS))
