"""`lace` as a child process whose peak memory is measured: the kernel's high-water mark of its
resident set (`ru_maxrss` from `wait4`), which also covers the children it reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Measured:
    """How a `lace` process ended, what it printed, and its peak resident memory in MB."""

    returncode: int
    out: str
    err: str
    peak_mb: float


def measured_lace(argv: list[str], env: dict[str, str], cwd: Path,
                  timeout_s: float = 300) -> Measured:
    """`python -m lace *argv` run to its end in `cwd`; its output goes through files, so the
    process is reaped here by `wait4`, which returns its resource usage."""
    out_path, err_path = cwd / "lace.out", cwd / "lace.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "lace", *argv], cwd=cwd, env=env,
                                   stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.kill(process.pid, signal.SIGKILL)
            os.wait4(process.pid, 0)
            raise AssertionError(f"lace did not end within {timeout_s:g} s: "
                                 f"{err_path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    return Measured(process.returncode, out_path.read_text(errors="replace"),
                    err_path.read_text(errors="replace"), usage.ru_maxrss / 1024)
