"""`lace` as a child process whose peak memory is measured: the kernel's high-water mark of its
resident set (`ru_maxrss` from `wait4`, which also covers the children it reaped). A small
Python process starts lace and reaps it: a child forked straight from pytest would count
pytest's own memory, which a fork shares until the exec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REAPER = """
import os, subprocess, sys
lace = subprocess.Popen([sys.executable, "-m", "lace", *sys.argv[2:]])
_, status, usage = os.wait4(lace.pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""
"""Runs `lace *argv`, writes its peak resident set (KiB) to the file named first, and exits
as lace did."""


@dataclass(frozen=True)
class Measured:
    """How a `lace` process ended, what it printed, and its peak resident memory in MB."""

    returncode: int
    out: str
    err: str
    peak_mb: float


def measured_lace(argv: list[str], env: dict[str, str], cwd: Path,
                  timeout_s: float = 300) -> Measured:
    """`python -m lace *argv` run to its end in `cwd`, its output and peak memory."""
    out_path, err_path, peak_path = cwd / "lace.out", cwd / "lace.err", cwd / "lace.peak"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        reaper = subprocess.Popen([sys.executable, "-c", REAPER, str(peak_path), *argv],
                                  cwd=cwd, env=env, stdout=out, stderr=err,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            reaper.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(reaper.pid, signal.SIGKILL)
            reaper.wait()
            raise AssertionError(f"lace did not end within {timeout_s:g} s: "
                                 f"{err_path.read_text(errors='replace')[-2000:]}") from None
    return Measured(reaper.returncode, out_path.read_text(errors="replace"),
                    err_path.read_text(errors="replace"), int(peak_path.read_text()) / 1024)
