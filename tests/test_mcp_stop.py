"""`lace mcp serve` over stdio stops on SIGINT or SIGTERM while its client still holds its
stdin open (a supervisor's `kill`, systemd, a client that signals before it closes the pipe):
the stdin line it waits for never comes, and waiting for it held the process up for good."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lace_forks import lace_popen
from tests.processes import lace_env

HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"}}}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_stdio_server_while_its_client_keeps_stdin_open(
        tmp_path: Path, signum: signal.Signals) -> None:
    process = lace_popen([sys.executable, "-m", "lace", "mcp", "serve", "--db",
                          str(tmp_path / "lace.db")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=lace_env(tmp_path / "home"))
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(HELLO) + "\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1  # it serves, and reads stdin
        process.send_signal(signum)
        code = process.wait(timeout=60)  # stdin stays open: the client has not left
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdin.close()
    assert process.stderr is not None
    assert code == 0, process.stderr.read()


def test_a_closed_stdin_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Started with stdin closed (`<&-`), descriptor 0 is the first file lace opens (its
    database): it is neither read as the client's messages nor replaced by the null device;
    refused in one line before serving (it was a quiet exit 0)."""
    process = lace_popen([sys.executable, "-m", "lace", "mcp", "serve", "--db",
                          str(tmp_path / "lace.db")], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=lace_env(tmp_path / "home"), preexec_fn=lambda: os.close(0))
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out) == (2, ""), err
    assert err.splitlines()[-1] == ("lace: error: lace mcp serve reads its client's messages on "
                                    "stdin, which is closed (or serve over HTTP: --http "
                                    "HOST:PORT)")
