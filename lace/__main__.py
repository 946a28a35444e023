"""Run the command line with `python -m lace` (and the `lace` script)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from lace.cli import main
from lace.tools.process_groups import kill_running_commands


def entry() -> None:
    """Run the command, then leave at once: every write is committed and the store closed by
    then, so tearing the interpreter down (a second or more with litellm imported) is only
    waiting. Output is flushed first, and a command an agent started that is still running is
    killed (`os._exit` skips `atexit`); the exit code is the command's."""
    code = main()
    kill_running_commands()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):  # a reader that went away must not change the code
        with contextlib.suppress(OSError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
