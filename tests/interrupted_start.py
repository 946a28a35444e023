"""`python -m tests.interrupted_start MODULE ARGV...`: `lace ARGV` as `python -m lace` runs
it, given a Ctrl+C (a real SIGINT, sent to itself) just as it starts importing MODULE: a Ctrl+C
during lace's start-up, at the same moment every time, where a timed `kill` from outside would
land anywhere in the second the imports take."""

from __future__ import annotations

import importlib.abc
import os
import signal
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class InterruptAt(importlib.abc.MetaPathFinder):
    """Sends this process SIGINT at the first import of `module`, once; finds nothing."""

    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname == self.module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


if __name__ == "__main__":
    module, *argv = sys.argv[1:]
    sys.meta_path.insert(0, InterruptAt(module))
    sys.argv = ["lace", *argv]
    from lace.__main__ import entry

    entry()
