"""The fork server the tests run `lace` commands through gives what `python -m lace` gives: the
same output, exit code and files, each command its own process with its own environment and
working folder, and a real interpreter where a fork could not be the same."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lace.cli.run import EXIT_TERMINATED
from tests.lace_forks import (
    LACE,
    REPO_ROOT,
    ForkedLace,
    lace_popen,
    needs_a_new_interpreter,
    run_lace,
)
from tests.processes import lace_env


@pytest.mark.parametrize("argv", [["--help"], ["tsks"], ["config", "--json"], ["tasks"],
                                  ["run", "Write the announcement and list the risks"],
                                  ["threads", "--json"]])
def test_a_forked_command_answers_as_a_new_interpreter_does(tmp_path: Path,
                                                             argv: list[str]) -> None:
    answers = []
    for home, run in ((tmp_path / "forked", run_lace),
                      (tmp_path / "started", _started)):
        done = run(argv, env=lace_env(home), cwd=tmp_path)
        answers.append((done.returncode, *(_unnamed(text, home)
                                           for text in (done.stdout, done.stderr))))
    assert answers[0] == answers[1]
    assert answers[0][0] == (0 if argv[0] in ("--help", "config", "run") else 2)  # no board yet


def test_a_forked_test_driver_runs_its_module_as_main_as_a_new_interpreter_does(
        tmp_path: Path) -> None:
    """`python -m tests.diamond_process ...` (its scripted models installed, then lace's command
    line) forked and started: the same run, to the same final answer."""
    answers = []
    for home, forked in ((tmp_path / "forked", True), (tmp_path / "started", False)):
        argv = ["run", "Plan it.", "--model", "scripted/root"]
        env = lace_env(home, LACE_TEST_PROVIDERS="1")
        done = (run_lace(argv, env=env, cwd=REPO_ROOT, module="tests.diamond_process") if forked
                else subprocess.run([sys.executable, "-m", "tests.diamond_process", *argv],
                                    env=env, cwd=REPO_ROOT, text=True, capture_output=True,
                                    timeout=60, check=False))
        answers.append((done.returncode, _unnamed(done.stdout, home)))
    assert answers[0] == answers[1]
    assert answers[0][0] == 0 and answers[0][1].strip()


def _unnamed(text: str, home: Path) -> str:
    """`text` without what differs between two runs: the home, ids and times."""
    text = text.replace(str(home), "HOME")
    text = re.sub(r"\b(lace|task)_\d{8}_\w+?\b", r"\1_ID", text)
    return re.sub(r"\d{4}-\d\d-\d\d[ T][\d:.]+", "WHEN", text)


def _started(argv: list[str], *, env: dict[str, str],
             cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lace", *argv], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=60, check=False)


def test_each_command_is_its_own_process_in_its_own_folder_and_environment(
        tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first = run_lace(["config"], env=lace_env(tmp_path / "one", LACE_MODEL="openai/one"),
                     cwd=tmp_path / "a")
    second = run_lace(["config"], env=lace_env(tmp_path / "two"), cwd=tmp_path)
    assert "openai/one" in first.stdout and "openai/one" not in second.stdout
    assert str(tmp_path / "one") in first.stdout and str(tmp_path / "two") in second.stdout


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    env = lace_env(tmp_path / "home", LACE_DEMO_DELAY="60")
    with pytest.raises(subprocess.TimeoutExpired):
        run_lace(["run", "Write the announcement"], env=env, timeout=2)
    assert run_lace(["config"], env=env).returncode == 0  # the server goes on


def test_what_a_fork_cannot_give_runs_in_a_new_interpreter(tmp_path: Path) -> None:
    env = dict(os.environ)
    assert not needs_a_new_interpreter(env, tmp_path)
    assert needs_a_new_interpreter({**env, "PYTHONPATH": str(tmp_path)}, tmp_path)
    assert needs_a_new_interpreter({**env, "LANG": "C"} if env.get("LANG") != "C"
                                   else {**env, "LANG": "en_US.UTF-8"}, tmp_path)
    (tmp_path / "sqlalchemy.py").write_text("raise SystemExit('shadowed')\n")
    assert needs_a_new_interpreter(env, tmp_path)  # `-m` would import it first


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_forked_process_is_polled_signalled_and_waited_as_a_child_is(
        tmp_path: Path, how: signal.Signals) -> None:
    ends = []
    for name, start in (("forked", lace_popen), ("started", subprocess.Popen)):
        process = start([*LACE, "run", "Write the announcement"], text=True,
                        env=lace_env(tmp_path / name, LACE_DEMO_DELAY="60"),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert isinstance(process, ForkedLace) == (name == "forked")
        assert process.stderr is not None and process.stderr.readline().startswith("Session")
        assert process.poll() is None
        process.send_signal(how)
        out, err = process.communicate(timeout=60)
        ends.append((process.returncode, _unnamed(out, tmp_path / name),
                     _unnamed(err, tmp_path / name)))
    assert ends[0] == ends[1]
    assert ends[0][0] == (-signal.SIGKILL if how == signal.SIGKILL else EXIT_TERMINATED)


def test_the_fork_server_ends_when_its_test_process_dies_without_closing_it() -> None:
    """A pytest worker killed leaves no fork server behind, even while a process it forked
    still holds its end of the server's socket (so the server never reads the end of it)."""
    program = ("import os, sys, time\nfrom tests import lace_forks\n"
               "server = lace_forks._server()\nholder = os.fork()\n"
               "if holder == 0:\n    null = os.open(os.devnull, os.O_WRONLY)\n"
               "    os.dup2(null, 1)\n    os.dup2(null, 2)\n    time.sleep(60)\n    os._exit(0)\n"
               "print(server.process.pid, holder, flush=True)\nos.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    server, holder = map(int, done.stdout.split())
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{server}").exists() and \
                Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the fork server outlived its test process"
            time.sleep(0.1)
    finally:
        os.kill(holder, signal.SIGKILL)
