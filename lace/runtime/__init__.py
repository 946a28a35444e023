"""The runtime: one `Runtime` per process, built by `open_runtime`, behind every front end."""

from lace.runtime.assembly import ALONE, Sharing, open_runtime
from lace.runtime.facade import Runtime

__all__ = ["ALONE", "Runtime", "Sharing", "open_runtime"]
