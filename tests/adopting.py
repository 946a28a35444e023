"""Run a command as the child subreaper of everything it starts (Linux's
PR_SET_CHILD_SUBREAPER): a process the command leaves behind, its parent gone before it was
reaped (running still, or dead), becomes this process's child instead of init's. Once the
command ends, this waits for every such process and writes their pids (a JSON list) to the
file named first: a test reads there what a process that must wait for its children before
it ends (`lace run --workers`) did not wait for. The exit code is the command's.

    python tests/adopting.py REPORT COMMAND [ARG ...]

The descriptors it was given are handed to the command, and closed here (a test's `pass_fds`
reach the command, and only it holds them)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
"""prctl(2): orphaned descendants of this process become its children."""


def adopting(report: Path, command: list[str]) -> int:
    """Run `command`, then reap whatever it left behind; its exit code."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    with subprocess.Popen(command, close_fds=False) as started:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # what it was given is the command's alone
        code = started.wait()
    adopted = []
    while True:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:  # none left
            break
        adopted.append(pid)
    report.write_text(json.dumps(adopted))
    return code


if __name__ == "__main__":
    sys.exit(adopting(Path(sys.argv[1]), sys.argv[2:]))
