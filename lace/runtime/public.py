"""The values front ends name that the runtime's verbs take or return but lower layers define:
re-exported here, so that a front end imports the runtime and nothing below it."""

from __future__ import annotations

from lace.runtime.tool_runner import Arguments
from lace.store import Store, Tx
from lace.store.engines import ChangeFeed
from lace.store.export_format import SessionDocument, parse_document
from lace.store.retry import GaveUpError, run_transaction
from lace.tools.base import ToolError, ToolResult
from lace.tools.python_tools import python_tools
from lace.tools.workspace import DaemonThreads, EditorFiles, within

__all__ = ["Arguments", "ChangeFeed", "DaemonThreads", "EditorFiles", "GaveUpError",
           "SessionDocument", "Store", "ToolError", "ToolResult", "Tx", "parse_document",
           "python_tools", "run_transaction", "within"]
