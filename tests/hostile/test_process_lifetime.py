"""What lace starts ends with it, however lace ends: a `bash` command that started a child of its
own and a stdio MCP server that ignores the end of its stdin are gone after a quiet exit,
`--timeout`, SIGTERM, and SIGKILL of lace (where no code of lace runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.lace_forks import lace_popen
from tests.mcp_servers.harness import NOTES_SERVER, alive, pids_in
from tests.processes import SHORT_THEN_LONGER_TIMEOUTS, lace_env

ENDINGS = {"quiet": 0, "timeout": 3, "sigterm": 128 + signal.SIGTERM, "sigkill": -signal.SIGKILL}
"""How lace ends, and the exit status each gives."""


def bash_then_answer(command: str) -> Any:
    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if messages[-1]["role"] == "tool":
            return ScriptedReply(text="done")
        return ScriptedReply(text=None, tool_calls=[("bash", {"command": command,
                                                              "timeout_s": 600})])

    return script


@pytest.fixture
def pid_files(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Where the command and the server write their pids; whatever they name is killed after
    the test, pass or fail."""
    files = (tmp_path / "command-pids", tmp_path / "server-pids")
    yield files
    for pid in [pid for path in files for pid in pids_in(path)]:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def wait_for(condition: Any, process: subprocess.Popen[str], what: str) -> None:
    """Wait (at most 60 s) for `condition()`; fail at once if lace ended first."""
    deadline = time.monotonic() + 60
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what} never happened: {process.communicate()}")
        time.sleep(0.05)


def all_gone(pids: list[int]) -> list[int]:
    """Wait (at most 30 s) until none of `pids` runs; the ones still running then."""
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def lace_ended(tmp_path: Path, settings: Path, command: str, ending: str,
               started: Any, pid_files: tuple[Path, ...]) -> str:
    """`lace run` whose model runs `command` with bash, ended as `ending` says (SIGTERM and
    SIGKILL once `started()`, a timeout after it, tried again with a longer one if a loaded
    machine had started nothing by then); lace's stderr, after checking its exit status."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    timeouts = SHORT_THEN_LONGER_TIMEOUTS if ending == "timeout" else (None,)
    with FakeOpenAI(bash_then_answer(command)) as fake:
        env = lace_env(tmp_path / "home", LACE_CONFIG=str(settings),
                       OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
        for timeout in timeouts:
            process = lace_popen(
                [sys.executable, "-m", "lace", "run", "go", "--model", "openai/fake",
                 *(["--timeout", timeout] if timeout else [])],
                cwd=workspace, env=env, text=True, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
            try:
                if ending in ("sigterm", "sigkill"):
                    wait_for(started, process, "the command starting")
                    process.send_signal(signal.SIGTERM if ending == "sigterm" else
                                        signal.SIGKILL)
                _out, err = process.communicate(timeout=120)
            finally:
                if process.poll() is None:
                    process.kill()
            if started() or timeout == timeouts[-1]:
                break
            partly_started = [pid for path in pid_files for pid in pids_in(path)]
            assert all_gone(partly_started) == [], err
            for path in pid_files:
                path.unlink(missing_ok=True)
    assert process.returncode == ENDINGS[ending], err
    return err


@pytest.mark.parametrize("ending", ENDINGS)
def test_commands_and_servers_end_with_lace(tmp_path: Path, pid_files: tuple[Path, Path],
                                            ending: str) -> None:
    command_pids, server_pids = pid_files
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[tools.policy]\nbash = "allow"\n'
                        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\n'
                        f'args = ["{NOTES_SERVER}"]\n'
                        f'env = {{ NOTES_PID_FILE = "{server_pids}", NOTES_STUBBORN = "1" }}\n')
    command = f"sleep 300 & echo $! >> {command_pids}; echo $$ >> {command_pids}"
    if ending != "quiet":  # the command is still running when lace ends
        command += "; sleep 300"
    err = lace_ended(tmp_path, settings, command, ending, lambda: len(
        pids_in(command_pids)) == 2 and pids_in(server_pids), pid_files)
    started = pids_in(command_pids) + pids_in(server_pids)
    assert len(started) == 3, err
    assert all_gone(started) == []


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_command_that_leaves_its_group_still_ends_with_lace(
        tmp_path: Path, pid_files: tuple[Path, Path], ending: str) -> None:
    """`setsid` puts a child in a session (and group) of its own, out of reach of the group's
    kill: the keeper, a subreaper, still finds it among what it started."""
    command_pids, _ = pid_files
    settings = tmp_path / "settings.toml"
    settings.write_text('[tools.policy]\nbash = "allow"\n')
    command = (f"setsid sh -c 'echo $$ >> {command_pids}; exec sleep 300' "
               f"</dev/null >/dev/null 2>&1 &")
    command += f" while ! [ -s {command_pids} ]; do sleep 0.05; done;"
    if ending != "quiet":
        command += f" sleep 300 & echo $! >> {command_pids}; wait"
    wanted = 1 if ending == "quiet" else 2
    err = lace_ended(tmp_path, settings, command, ending,
                     lambda: len(pids_in(command_pids)) == wanted, pid_files)
    started = pids_in(command_pids)
    assert len(started) == wanted, err
    assert all_gone(started) == []
