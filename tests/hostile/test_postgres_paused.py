"""A PostgreSQL server paused (SIGSTOP of its postmaster and every backend, as a VM frozen
for a snapshot or a host swapping hard does to it) mid fan-out for longer than the lease, then
let go: the connections stay open and silent, so no error comes for lace to retry until the
server, going on, ends the sessions it finds idle in their transactions. The run must still
end with every task done exactly once, and the reads of a person (`lace tasks`) must answer
once it is back."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.store import Store, open_database
from tests import postgres
from tests.faults import HELPERS, fan_out
from tests.lace_forks import lace_popen
from tests.processes import detached_session, ended_after, lace_env
from tests.workers import assert_delivered_once, ready, rows, value, wait_for, worker

PAUSE_S = 20.0
"""Longer than the lease (`[limits] lease_timeout_s`, 15 s) and than the server's
idle-in-transaction timeout (10 s), which both run out at once when the server goes on."""
BOARD_WAITS_S = 6.0
"""How long before the server goes on `lace tasks` starts: under `connect_timeout` (10 s)."""
ENV = {"OPENAI_API_KEY": "sk-fake-key", "LACE_LIMITS__MAX_CHILDREN": "40",
       "LACE_LIMITS__SPAWNS_PER_MINUTE": "100"}


def server_processes(server: postgres.PostgresServer) -> list[int]:
    """The postmaster and every process it started (backends, checkpointer, walwriter...)."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def _state(pid: int) -> str:
    """The state letter of process `pid` (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _signal(pids: list[int], number: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # a backend that ended meanwhile
            os.kill(pid, number)


@contextmanager
def paused(server: postgres.PostgresServer) -> Iterator[None]:
    """The server stopped in its tracks (SIGSTOP) while the block runs, then continued: the
    postmaster first (it starts no backend after), then every process it had started."""
    postmaster, *children = server_processes(server)
    _signal([postmaster], signal.SIGSTOP)
    wait_for(lambda: _state(postmaster) == "T", "the postmaster stopped")  # forks no more
    stopped = [postmaster, *sorted(set(children) | set(server_processes(server)[1:]))]
    _signal(stopped[1:], signal.SIGSTOP)
    try:
        yield
    finally:
        _signal(stopped[::-1], signal.SIGCONT)

def lace_process(tmp_path: Path, server: FakeOpenAI, *argv: str) -> subprocess.Popen[str]:
    return lace_popen([sys.executable, "-m", "lace", *argv], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True,
                      env=lace_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, **ENV))


def completed(url: str) -> int:
    return int(value(url, "SELECT COUNT(*) FROM tasks WHERE status = 'completed'"))


@pytest.mark.slow
def test_a_fan_out_rides_out_its_server_paused_mid_run(
        tmp_path: Path, postgres_url: str, postgres_server: postgres.PostgresServer) -> None:
    Store(open_database(postgres_url)).close()
    with FakeOpenAI(fan_out, latency_s=0.3, backlog=512) as server, ExitStack() as stack:
        workers = [stack.enter_context(worker(tmp_path, postgres_url, name=name,
                                              OPENAI_BASE_URL=server.base_url, **ENV))
                   for name in ("a", "b")]
        ready(postgres_url, len(workers))
        detached = lace_process(tmp_path, server, "run", "--detach", "--db", postgres_url,
                                "--model", "openai/root", "Fan out.")
        out, err = detached.communicate(timeout=120)
        assert detached.returncode == 0, err
        waiter = lace_process(tmp_path, server, "wait", out.strip(), "--db", postgres_url,
                              "--timeout", "150")
        wait_for(lambda: 0 < completed(postgres_url) < HELPERS // 2, "the run under way")
        with paused(postgres_server):
            time.sleep(PAUSE_S - BOARD_WAITS_S)  # the outage itself: only the clock ends it
            board = lace_process(tmp_path, server, "tasks", "--db", postgres_url, "--all")
            time.sleep(BOARD_WAITS_S)
            assert board.poll() is None  # it waits for the server, as every client does
        shown, said = board.communicate(timeout=30)  # answered once the server is back
        assert "Part 1" in shown, said
        assert board.returncode == 0, said
        answer, said = waiter.communicate(timeout=180)
        assert waiter.returncode == 0, said
        assert f"All {HELPERS} tasks are done." in answer
        for process in workers:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    assert "Traceback" not in "".join((tmp_path / f"{name}.log").read_text() for name in "ab")
    assert value(postgres_url, "SELECT COUNT(*) FROM tasks") == HELPERS
    assert completed(postgres_url) == HELPERS
    assert_delivered_once(postgres_url)
    notes = rows(postgres_url, "SELECT task_id, COUNT(*) FROM task_notes WHERE content = "
                               "'on it' GROUP BY task_id")
    assert len(notes) == HELPERS and {count for _, count in notes} == {1}
    assert {status for (status,) in rows(postgres_url, "SELECT status FROM agent_metadata")} \
        == {"idle"}


WAIT_TIMEOUT_S = 3.0
PAST_TIMEOUT_S = 8.0
"""`lace wait` may read how the session stands for 2 s past its timeout (UNANSWERED_S), and
the machine may be slow (a CI machine runs four test workers at once); before, it waited out
the whole pause, which lasts until the wait is killed."""


@pytest.mark.slow
def test_lace_wait_keeps_its_timeout_while_the_server_is_paused(
        tmp_path: Path, migrated_postgres_url: str,
        postgres_server: postgres.PostgresServer) -> None:
    env = lace_env(tmp_path / "home")
    session = detached_session(migrated_postgres_url, env)
    waiter = lace_popen([sys.executable, "-m", "lace", "wait", session, "--db",
                         migrated_postgres_url, "--timeout", str(WAIT_TIMEOUT_S)], env=env,
                        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert waiter.stderr is not None and waiter.stderr.readline().startswith("Waiting")
    started = time.monotonic()
    with paused(postgres_server):
        ended = ended_after(waiter, started, WAIT_TIMEOUT_S + PAST_TIMEOUT_S)
    _, said = waiter.communicate(timeout=30)
    assert ended < WAIT_TIMEOUT_S + PAST_TIMEOUT_S, "lace wait outlived its timeout"
    assert waiter.returncode == 124, said
    assert "database server does not answer" in said and "Traceback" not in said



def lace_command(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    return lace_popen([sys.executable, "-m", "lace", *argv], env=lace_env(tmp_path / "home"),
                      text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


STOPS_WITHIN_S = 2.0


@pytest.mark.slow
def test_lace_wait_started_while_the_server_is_paused_keeps_its_timeout(
        tmp_path: Path, migrated_postgres_url: str,
        postgres_server: postgres.PostgresServer) -> None:
    """Its timeout, shorter than `connect_timeout` (10 s), holds from the start: before, the
    open waited the whole connect_timeout out, then ended with exit 2."""
    session = detached_session(migrated_postgres_url, lace_env(tmp_path / "home"))
    with paused(postgres_server):
        started = time.monotonic()
        waiter = lace_command(tmp_path, "wait", session, "--db", migrated_postgres_url,
                              "--timeout", str(WAIT_TIMEOUT_S))
        ended = ended_after(waiter, started, WAIT_TIMEOUT_S + PAST_TIMEOUT_S)
    _, said = waiter.communicate(timeout=30)
    assert waiter.returncode == 124, said
    assert ended < WAIT_TIMEOUT_S + PAST_TIMEOUT_S, "lace wait outlived its timeout"
    assert "database server does not answer" in said and "Traceback" not in said


@pytest.mark.slow
def test_lace_follow_started_while_the_server_is_paused_says_so_and_goes_on(
        tmp_path: Path, migrated_postgres_url: str,
        postgres_server: postgres.PostgresServer) -> None:
    """It says once that the server does not answer and keeps trying (before: exit 2 after
    `connect_timeout`); Ctrl+C ends it at once with 130; once the server goes on, it follows."""
    session = detached_session(migrated_postgres_url, lace_env(tmp_path / "home"))
    argv = ("follow", session, "--db", migrated_postgres_url)
    with paused(postgres_server):
        stopped, going_on = lace_command(tmp_path, *argv), lace_command(tmp_path, *argv)
        for follower in (stopped, going_on):
            assert follower.stderr is not None
            assert "does not answer; still trying" in follower.stderr.readline()
        stopped.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert ended_after(stopped, started, STOPS_WITHIN_S) < STOPS_WITHIN_S
        _, said = stopped.communicate(timeout=30)
        assert stopped.returncode == 130, said
        assert "stopped following" in said and "Traceback" not in said
    assert going_on.stderr is not None  # the server answers: it reads the session
    assert "no lace process runs this board" in going_on.stderr.readline()
    assert going_on.poll() is None
    going_on.send_signal(signal.SIGTERM)
    assert ended_after(going_on, time.monotonic(), STOPS_WITHIN_S) < STOPS_WITHIN_S
