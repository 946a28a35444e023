"""The runtime: one `Runtime` per process, built by `open_runtime`, behind every front end."""

from lace.runtime.assembly import ALONE, Sharing, open_runtime
from lace.runtime.facade import Runtime
from lace.runtime.tool_runner import Arguments

__all__ = ["ALONE", "Arguments", "Runtime", "Sharing", "open_runtime"]
