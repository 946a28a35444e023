"""`lace worker` and `lace run --workers N`: real processes on one database (SQLite or
PostgreSQL). A worker runs sessions other processes wrote (new ones too); workers share agents
without running one twice; a worker killed mid-turn is taken over once its lease runs out;
SIGTERM interrupts its turns cleanly; a run's workers share its fan-out and never outlive it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.store import Store, open_database
from tests.conftest import snapshot
from tests.lace_forks import lace_popen, run_lace
from tests.processes import MANY_PROMPT, final_board, free_port, lace_env
from tests.workers import (
    assert_delivered_once,
    live_processes,
    new_database,
    ready,
    rows,
    value,
    wait_for,
    worker,
    write_session,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
ADOPTING = Path(__file__).parent / "adopting.py"
HELD = "('running', 'waiting')"


def state(pid: int) -> str:
    """The state letter of process `pid` (`T`: stopped, `Z`: dead, not yet reaped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie, dead but not yet reaped, does not, once its other threads
    are gone too (a killed process's first thread is a zombie while the others still end, and
    until they have, its parent cannot reap it)."""
    try:
        return state(pid) != "Z" or len(list(Path(f"/proc/{pid}/task").iterdir())) > 1
    except (FileNotFoundError, ProcessLookupError):
        return False


def signal_until_it_ends(process: subprocess.Popen[Any], signum: int) -> int:
    """Send `signum` to `process` every half millisecond until it ends (at most 20,000
    times), so that some come while it stops, one as its event loop closes among them; how
    many were sent."""
    signalled = 0
    while process.poll() is None and signalled < 20000:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)
        signalled += 1
        time.sleep(0.0005)
    return signalled


def workers_of(pid: int, named: bool = True) -> list[int]:
    """The `lace worker` processes whose parent is `pid` (the processes, unless `named`: a
    process the tests' fork server started keeps the server's command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if parent == pid and (b"worker" in command or not named):
            found.append(int(entry.name))
    return found


def done(db: Path, root_id: str) -> bool:
    """The demo coordinator summed up, and nothing of the session is running or pending."""
    summed_up = value(db, "SELECT COUNT(*) FROM events WHERE thread_id = ? AND type = "
                          "'agent_message' AND CAST(data AS TEXT) LIKE '%tasks are done%'", root_id)
    busy = value(db, "SELECT COUNT(*) FROM agent_metadata JOIN threads ON threads.id = "
                     "agent_metadata.thread_id WHERE threads.root_id = ? AND status != 'idle'",
                 root_id)
    pending = value(db, "SELECT COUNT(*) FROM inbox JOIN threads ON threads.id = "
                        "inbox.thread_id WHERE threads.root_id = ? AND consumed_at IS NULL",
                    root_id)
    return bool(summed_up) and not busy and not pending


def turn_in_model_call(db: Path, root_id: str) -> str:
    """Wait until the root's first turn is in its model call; the process running it."""
    wait_for(lambda: rows(db, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                          root_id) == [("running",)]
             and value(db, "SELECT COUNT(*) FROM events WHERE thread_id = ? AND type = "
                           "'user_message'", root_id), "the root's turn to start")
    return str(value(db, "SELECT lease_holder FROM agent_metadata WHERE thread_id = ?",
                     root_id))


async def test_the_sqlite_feed_hears_commits_of_other_connections_and_notify(
        store: Store, db_path: Path) -> None:
    feed = store.database.change_feed()
    try:
        waiting = asyncio.create_task(feed.wait(600))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # nothing committed
        with sqlite3.connect(db_path) as other:  # another process's commit
            other.execute("INSERT INTO processes (id, pid, host, started_at, heartbeat_at, "
                          "expires_at) VALUES ('other', 1, 'elsewhere', '', 0, 0)")
        async with asyncio.timeout(30):
            await waiting
        waiting = asyncio.create_task(feed.wait(600))
        feed.notify()  # this process wants another look
        async with asyncio.timeout(30):
            await waiting
    finally:
        feed.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def board(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A migrated database for workers to share: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return new_database(tmp_path)
    url = str(request.getfixturevalue("postgres_url"))
    (tmp_path / "home").mkdir(mode=0o700)
    Store(open_database(url)).close()
    return url


@pytest.mark.slow
def test_a_worker_runs_sessions_other_processes_write_new_ones_too(
        tmp_path: Path, board: Path | str) -> None:
    db = board
    with worker(tmp_path, db, name="worker") as process:
        ready(db, 1)
        (worker_id,) = live_processes(db)
        first = write_session(db)
        wait_for(lambda: done(db, first), "the first session to finish")
        second = write_session(db, "Plan the party and book the room")
        wait_for(lambda: done(db, second), "a session written later to finish")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert_delivered_once(db)
    assert {row[0] for row in rows(db, "SELECT lease_holder FROM agent_metadata")} == {worker_id}
    assert rows(db, "SELECT id FROM processes") == []  # it gave up its lease


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_worker_signalled_again_and_again_while_it_stops_still_exits_0(
        tmp_path: Path, signum: int) -> None:
    """A stopping signal that comes again while the worker stops, even once its event loop
    has closed (systemd signals every process of the unit and `lace worker --processes`
    forwards its own, so each worker gets two), is ignored: it exits 0, not killed by it."""
    db = new_database(tmp_path)
    with worker(tmp_path, db, name="worker") as process:
        ready(db, 1)
        signalled = signal_until_it_ends(process, signum)
        assert process.wait(timeout=30) == 0, (tmp_path / "worker.log").read_text()
    assert signalled > 1


@pytest.mark.slow
def test_two_workers_share_sessions_and_never_run_one_agent_twice(
        tmp_path: Path, board: Path | str) -> None:
    db = board
    with worker(tmp_path, db, name="a", LACE_DEMO_DELAY="0.05") as first, \
            worker(tmp_path, db, name="b", LACE_DEMO_DELAY="0.05") as second:
        ready(db, 2)
        workers = set(live_processes(db))
        roots = [write_session(db, f"{MANY_PROMPT} number {n}") for n in range(4)]
        wait_for(lambda: all(done(db, root) for root in roots), "four sessions to finish")
        for process in (first, second):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    assert_delivered_once(db)
    assert value(db, "SELECT COUNT(*) FROM tasks") == 16  # 4 sessions of 3 parts and a summing-up
    assert {row[0] for row in rows(db, "SELECT lease_holder FROM agent_metadata")} <= workers


@pytest.mark.slow
def test_forked_workers_share_a_session_and_stop_together_reporting_a_killed_one(
        tmp_path: Path, board: Path | str) -> None:
    db = board
    with worker(tmp_path, db, "--processes", "3", name="forked",
                LACE_DEMO_DELAY="0.05") as supervisor:
        ready(db, 3)
        forked = workers_of(supervisor.pid, named=False)
        assert len(forked) == 3 and supervisor.pid not in forked
        assert sorted(int(row[0]) for row in rows(db, "SELECT pid FROM processes")) == sorted(
            forked)  # each fork is a process of its own, registered apart
        roots = [write_session(db, f"{MANY_PROMPT} number {n}") for n in range(4)]
        wait_for(lambda: all(done(db, root) for root in roots), "four sessions to finish")
        os.kill(forked[0], signal.SIGKILL)
        wait_for(lambda: not alive(forked[0]), "the killed worker to be reaped")
        assert supervisor.poll() is None  # the others go on
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 128 + signal.SIGKILL  # the killed one's, named
    assert not any(alive(pid) for pid in forked)
    assert_delivered_once(db)
    assert value(db, "SELECT COUNT(*) FROM tasks") == 16
    assert len({row[0] for row in rows(db, "SELECT lease_holder FROM agent_metadata")}) >= 2
    assert [int(row[0]) for row in rows(db, "SELECT pid FROM processes")] == [forked[0]]


@pytest.mark.slow
def test_no_forked_worker_outlives_its_killed_supervisor(tmp_path: Path) -> None:
    db = new_database(tmp_path)
    with worker(tmp_path, db, "--processes", "2", name="forked") as supervisor:
        ready(db, 2)
        forked = workers_of(supervisor.pid, named=False)
        supervisor.kill()
        supervisor.wait()
        wait_for(lambda: not any(alive(pid) for pid in forked), "the workers to end")
    assert rows(db, "SELECT id FROM processes") == [], (tmp_path / "forked.log").read_text()


@pytest.mark.slow
def test_ctrl_c_stops_a_worker_that_waits_for_its_database_server_cleanly(
        tmp_path: Path) -> None:
    """As once it serves: exit code 0 (it held nothing yet), no traceback. Its supervisor
    (`lace worker --processes`) would name a worker that exited otherwise as a failure."""
    (tmp_path / "home").mkdir(mode=0o700)
    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/lace"
    with worker(tmp_path, unreachable, name="waiting") as process:
        wait_for(lambda: "cannot reach the PostgreSQL server" in (
            tmp_path / "waiting.log").read_text(), "the worker to say it waits for its server")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, (tmp_path / "waiting.log").read_text()
    assert "Traceback" not in (tmp_path / "waiting.log").read_text()


@pytest.mark.slow
def test_a_worker_killed_mid_turn_is_taken_over_after_its_lease_runs_out(
        tmp_path: Path, board: Path | str) -> None:
    db = board
    lease = {"LACE_LIMITS__LEASE_TIMEOUT_S": "1.5"}
    with worker(tmp_path, db, name="stuck", LACE_DEMO_DELAY="600", **lease) as stuck:
        ready(db, 1)
        root = write_session(db)
        (stuck_id,) = live_processes(db)
        assert turn_in_model_call(db, root) == stuck_id
        with worker(tmp_path, db, name="survivor", **lease) as survivor:
            ready(db, 2)
            (survivor_id,) = set(live_processes(db)) - {stuck_id}
            stuck.kill()  # not reaped yet: its pid still exists, so only the lease tells
            wait_for(lambda: done(db, root), "the survivor to finish the session")
            survivor.send_signal(signal.SIGTERM)
            assert survivor.wait(timeout=30) == 0
    assert_delivered_once(db)
    assert {row[0] for row in rows(db, "SELECT lease_holder FROM agent_metadata")} == {
        survivor_id}
    assert rows(db, "SELECT kind FROM inbox WHERE thread_id = ? ORDER BY id", root)[:2] == [
        ("message",), ("resume",)]


@pytest.mark.slow
def test_sigterm_interrupts_a_workers_turns_for_any_process_to_resume(tmp_path: Path) -> None:
    db = new_database(tmp_path)
    with worker(tmp_path, db, name="stopped", LACE_DEMO_DELAY="600") as stopped:
        ready(db, 1)
        root = write_session(db)
        turn_in_model_call(db, root)
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(timeout=30) == 0
    assert rows(db, "SELECT status FROM agent_metadata") == [("interrupted",)]
    assert rows(db, "SELECT id FROM processes") == []
    with worker(tmp_path, db, name="next") as process:
        wait_for(lambda: done(db, root), "another worker to resume and finish the session")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert_delivered_once(db)


@pytest.mark.slow
def test_max_agents_caps_the_turns_a_worker_runs_at_once(tmp_path: Path) -> None:
    db = new_database(tmp_path)
    most = 0
    with worker(tmp_path, db, "--max-agents", "1", name="one", LACE_DEMO_DELAY="0.1") as process:
        ready(db, 1)
        root = write_session(db)

        def finished() -> bool:
            nonlocal most
            most = max(most, value(db, f"SELECT COUNT(*) FROM agent_metadata WHERE status IN "
                                       f"{HELD}"))
            return done(db, root)

        wait_for(finished, "the session to finish one turn at a time")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert most == 1
    assert_delivered_once(db)


# lace run --workers

FANOUT = 8


def fan_out_script(db: Path) -> Callable[[str, list[dict[str, Any]]], ScriptedReply]:
    """The root lists tasks until the run's two workers are up (three live processes), then
    creates FANOUT tasks for `new:openai/worker` agents and sums up once all are done; each
    helper notes and completes its task."""

    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        said = [str(message.get("content") or "") for message in messages]
        if model == "worker":
            task_id = re.findall(r"assigned task '([^']+)'", "\n".join(said))[-1]
            answered = sum(message["role"] == "assistant" for message in messages)
            step: list[tuple[str, dict[str, Any] | str]] = [
                ("task_add_note", {"task_id": task_id, "note": "on it"}),
                ("task_complete", {"task_id": task_id, "message": "done"})]
            return ScriptedReply("Done." if answered >= 2 else None, step[answered:answered + 1])
        if not any("Created task" in text for text in said):
            if len(live_processes(db)) < 3:
                return ScriptedReply(tool_calls=[("task_list", {})])
            return ScriptedReply(tool_calls=[("task_create", {"tasks": [
                {"title": f"Part {n}", "prompt": f"Do part {n}.",
                 "assigned_to": "new:openai/worker"} for n in range(1, FANOUT + 1)]})])
        completed = sum(text.count("has been completed by") for text in said)
        return ScriptedReply(f"All {FANOUT} tasks are done." if completed >= FANOUT
                             else f"{completed} of {FANOUT} done.")

    return script


@pytest.mark.slow
def test_lace_run_with_two_workers_spreads_a_fan_out_and_leaves_no_worker(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = new_database(tmp_path)
    with FakeOpenAI(fan_out_script(db), latency_s=0.2) as server:
        run = run_lace(["run", "--workers", "2", "--model", "openai/root", "--timeout", "120",
                        "Fan out."], env=lace_env(home, OPENAI_BASE_URL=server.base_url,
                                                  OPENAI_API_KEY="sk-fake-key"), timeout=180)
    assert run.returncode == 0, run.stderr
    assert f"All {FANOUT} tasks are done." in run.stdout
    final_board(home)
    helpers = {row[0] for row in rows(db, "SELECT lease_holder FROM agent_metadata "
                                          "WHERE thread_id LIKE '%.%'")}
    assert len(helpers) >= 2, run.stderr  # the helpers ran in more than one process
    pids = [int(pid) for pid in re.findall(r"lace worker \w+ \(pid (\d+)\)", run.stderr)]
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert rows(db, "SELECT id FROM processes") == []


@contextlib.contextmanager
def started_run(tmp_path: Path, *argv: str) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """`start_run`, and after the block the run and its workers killed if still running."""
    run, pids = start_run(tmp_path, *argv)
    try:
        yield run, pids
    finally:
        kill_all(run, pids)


def kill_all(run: subprocess.Popen[Any], pids: list[int]) -> None:
    """A run and its workers killed, those still running."""
    run.kill()
    run.wait()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def start_run(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """`lace run --workers 2 ... MANY_PROMPT` whose demo model never answers, once it forked
    its two workers; the run and the pids of its workers. The run is a job of its own, in a
    process group of its own as a shell with job control starts it: in the test's group,
    which the kernel treats as orphaned where CI starts pytest without job control, it
    discards a stop signal's stop (Ctrl+Z)."""
    home = tmp_path / "home"
    new_database(tmp_path)
    with (tmp_path / "run.log").open("wb") as log:
        run = lace_popen([sys.executable, "-m", "lace", "run", "--workers", "2", *argv,
                          MANY_PROMPT], stdout=subprocess.DEVNULL, stderr=log,
                         env=lace_env(home, LACE_DEMO_DELAY="600", PYTHONFAULTHANDLER="1"),
                         process_group=0)
    wait_for(lambda: len(workers_of(run.pid, named=False)) == 2, "the run's two workers")
    return run, workers_of(run.pid, named=False)


def ended(run: subprocess.Popen[bytes], tmp_path: Path) -> int:
    """The run's exit code; a run still going after a minute fails the test with its threads'
    stacks (SIGABRT makes faulthandler print them to its log)."""
    try:
        return run.wait(timeout=60)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGABRT)
        run.wait()
        raise AssertionError((tmp_path / "run.log").read_text()) from None


def started_for(workspace: Path) -> list[int]:
    """The live processes whose command line names `workspace` and --workers: a run with that
    workspace and the workers it forked (which keep its command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if b"--workers" in command and str(workspace).encode() in command \
                and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_the_workers_of_a_run_that_ends_before_its_session_end_with_it(tmp_path: Path) -> None:
    """The run stops its workers and waits for them before it ends: none is left for the
    signal of its death (or the end of its pipes) to stop, nor for another process to reap."""
    db = new_database(tmp_path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    before = snapshot(db)
    report = tmp_path / "adopted.json"
    run = subprocess.run([sys.executable, str(ADOPTING), str(report), sys.executable, "-m",
                          "lace", "run", "--workers", "2", "--workspace", str(workspace),
                          "--continue", "lace_20990101_abcdef.1", "Go on."],
                         capture_output=True, text=True, env=lace_env(tmp_path / "home"),
                         timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("lace: error: Unknown thread 'lace_20990101_abcdef.1'. (")
    assert json.loads(report.read_text()) == []  # started first thing, then waited for
    assert started_for(workspace) == []
    assert snapshot(db) == before


@pytest.mark.slow
def test_a_timeout_stops_the_runs_workers(tmp_path: Path) -> None:
    run, pids = start_run(tmp_path, "--timeout", "5")
    assert ended(run, tmp_path) == 3
    db = tmp_path / "home" / "lace.db"
    assert not any(alive(pid) for pid in pids)
    assert rows(db, f"SELECT * FROM agent_metadata WHERE status IN {HELD}") == []
    assert rows(db, "SELECT id FROM processes") == []


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_no_worker_outlives_an_interrupted_or_killed_run(tmp_path: Path, signum: int) -> None:
    with started_run(tmp_path) as (run, pids):
        ready(tmp_path / "home" / "lace.db", 3)
        os.kill(run.pid, signum)
        assert ended(run, tmp_path) == (130 if signum == signal.SIGINT else -signal.SIGKILL)
        wait_for(lambda: not any(alive(pid) for pid in pids), "the workers to end")
    db = tmp_path / "home" / "lace.db"
    left = value(db, "SELECT COUNT(*) FROM processes")
    assert left == (0 if signum == signal.SIGINT else 1)  # a killed run leaves its own row


@pytest.mark.slow
def test_ctrl_z_stops_a_runs_workers_with_it_and_fg_goes_on_with_them(tmp_path: Path) -> None:
    """The workers are not in the run's process group (Ctrl+C is the run's to handle): Ctrl+Z
    must still stop them, or they go on calling models while the person thinks all stopped.
    (The run is a job of its own, `start_run`: in an orphaned group the kernel discards
    SIGTSTP's stop, and the run rightly goes on with its workers.)"""
    with started_run(tmp_path) as (run, pids):
        ready(tmp_path / "home" / "lace.db", 3)
        os.kill(run.pid, signal.SIGTSTP)  # what the terminal sends the run's group on Ctrl+Z
        try:
            wait_for(lambda: [state(pid) for pid in (run.pid, *pids)] == ["T"] * 3,
                     "the run and both workers to be stopped")
        except AssertionError as error:
            raise AssertionError(f"{error}: {[(pid, state(pid)) for pid in (run.pid, *pids)]}"
                                 f", now {workers_of(run.pid, named=False)}\n"
                                 f"{(tmp_path / 'run.log').read_text()}") from None
        os.kill(run.pid, signal.SIGCONT)  # `fg`
        wait_for(lambda: "T" not in [state(pid) for pid in (run.pid, *pids)],
                 "the run and both workers to go on")
        assert run.poll() is None and all(alive(pid) for pid in pids)


def held(pid: int) -> set[str]:
    """What process `pid` has open: a file's path, `pipe:[inode]` (the same for both ends)."""
    targets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            targets.add(os.readlink(fd))
    return targets


def opened_for_writing(pid: int, descriptor: int) -> bool:
    """Whether process `pid` opened `descriptor` write-only or read-write (its fdinfo)."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/fdinfo/{descriptor}").read_text().splitlines() if ":" in line)
    return int(fields["flags"], 8) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def pipes_held(pid: int) -> set[str]:
    """The pipes process `pid` has an end of."""
    return {target for target in held(pid) if target.startswith("pipe:")}


@pytest.mark.slow
def test_each_worker_of_a_run_holds_its_own_pipe_from_the_run_and_no_other(
        tmp_path: Path) -> None:
    """A worker sees its stdin end when the run ends (where no signal of the run's death
    reaches it) only if no other worker holds an end of that pipe too."""
    with started_run(tmp_path) as (run, pids):
        stdins = {pid: os.readlink(f"/proc/{pid}/fd/0") for pid in pids}
        assert len(set(stdins.values())) == 2, stdins
        assert all(stdin.startswith("pipe:") for stdin in stdins.values()), stdins
        assert set(stdins.values()) <= pipes_held(run.pid)  # the run writes to each
        for pid in pids:
            assert not pipes_held(pid) & (set(stdins.values()) - {stdins[pid]}), pid


@pytest.mark.slow
def test_the_workers_of_a_run_hold_no_descriptor_the_run_inherited(tmp_path: Path) -> None:
    """What a shell or a program passed to `lace run` (a lock file, the write end of a pipe it
    waits on for its end) is the run's alone: forked without an exec, its workers close it, so
    the end of the pipe comes when the run ends, not when its last worker does. (Here the
    workers are stopped and outlive the killed run: a subreaper in its session adopts them, so
    the kernel does not continue them as it does the stopped members of an orphaned group.)"""
    new_database(tmp_path)
    read, write = os.pipe()
    lock = tmp_path / "lock"
    locked = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o600)
    with (tmp_path / "run.log").open("wb") as log:
        adopter = subprocess.Popen(
            [sys.executable, str(ADOPTING), str(tmp_path / "adopted.json"), sys.executable,
             "-m", "lace", "run", "--workers", "2", MANY_PROMPT], stdout=subprocess.DEVNULL,
            stderr=log, pass_fds=(write, locked),
            env=lace_env(tmp_path / "home", LACE_DEMO_DELAY="600"))
    os.close(write)
    os.close(locked)
    run, pids = 0, []
    try:
        wait_for(lambda: workers_of(adopter.pid, named=False), "the run to start")
        (run,) = workers_of(adopter.pid, named=False)
        wait_for(lambda: len(workers_of(run, named=False)) == 2, "the run's two workers")
        pids = workers_of(run, named=False)
        ready(tmp_path / "home" / "lace.db", 3)  # the workers serve: long past their fork
        inherited = {os.readlink(f"/proc/self/fd/{read}"), str(lock)}
        assert inherited <= held(run)
        for pid in pids:
            assert not held(pid) & inherited, (pid, held(pid))
            os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: [state(pid) for pid in pids] == ["T"] * 2, "the workers to stop")
        os.kill(run, signal.SIGKILL)
        wait_for(lambda: select.select([read], [], [], 0)[0], "the end of the run's pipe")
        assert os.read(read, 1) == b""
        assert [state(pid) for pid in pids] == ["T"] * 2  # the workers are still there
    finally:
        for pid in [pid for pid in (run, *pids) if pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        adopter.wait(timeout=60)  # it reaps them all
        os.close(read)


@pytest.mark.slow
def test_the_workers_of_a_run_with_its_stderr_closed_keep_no_pipe_in_its_place(
        tmp_path: Path) -> None:
    """A run started with standard error closed (`2>&-`) has an end of a worker's pipe where
    its stderr would be: a worker's stderr is /dev/null then, open for writing. Kept, one
    worker would hold an end of another's pipe (which would never see its end); closed, the
    next file the worker opens (its database) would take descriptor 2, and what is written
    to stderr (a crash's trace) would land in it."""
    db = new_database(tmp_path)
    command = f"exec {sys.executable} -m lace run --workers 2 '{MANY_PROMPT}' 2>&-"
    run = subprocess.Popen(["bash", "-c", command], stdout=subprocess.DEVNULL,
                           env=lace_env(tmp_path / "home", LACE_DEMO_DELAY="600"))
    pids = []
    try:
        wait_for(lambda: len(workers_of(run.pid, named=False)) == 2, "the run's two workers")
        pids = workers_of(run.pid, named=False)
        ready(db, 3)
        for pid in pids:
            assert os.readlink(f"/proc/{pid}/fd/2") == os.devnull, pid
            assert opened_for_writing(pid, 2), pid
            assert pipes_held(pid) == {os.readlink(f"/proc/{pid}/fd/0")}, pid
    finally:
        kill_all(run, pids)


@pytest.mark.slow
def test_a_run_names_the_forked_worker_that_was_killed(tmp_path: Path) -> None:
    with started_run(tmp_path) as (run, pids):
        killed = pids[0]
        ready(tmp_path / "home" / "lace.db", 3)
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: not alive(killed), "the killed worker to end")
        run.send_signal(signal.SIGTERM)
        assert ended(run, tmp_path) == 143
    log = (tmp_path / "run.log").read_text()
    named = [line for line in log.splitlines() if "ended with exit code" in line]
    assert named and str(killed) in named[0], f"killed {killed} of {pids}\n{log}"


@pytest.mark.slow
def test_a_run_signalled_again_and_again_while_it_stops_ends_as_one_sigterm_ends_it(
        tmp_path: Path) -> None:
    """SIGTERM again and again while the run stops (a supervisor's, `timeout`'s, a person's):
    it still stops its workers, says how to resume and exits 143, instead of its shutdown cut
    short by the second or the process killed by one that came as its loop closed."""
    with started_run(tmp_path) as (run, pids):
        ready(tmp_path / "home" / "lace.db", 3)
        signalled = signal_until_it_ends(run, signal.SIGTERM)
        code = ended(run, tmp_path)
        log = (tmp_path / "run.log").read_text()
        assert code == 143, log
        assert "lace: terminated session" in log and "Traceback" not in log, log
        wait_for(lambda: not any(alive(pid) for pid in pids), "the workers to end")
    assert signalled > 1


@pytest.mark.slow
def test_a_run_that_times_out_names_the_worker_that_died_alone_once(tmp_path: Path) -> None:
    """The run stops its workers twice (before it reports, and as it leaves): a failure is
    still one line."""
    with started_run(tmp_path, "--timeout", "20") as (run, pids):
        killed = pids[0]
        ready(tmp_path / "home" / "lace.db", 3)
        os.kill(killed, signal.SIGKILL)
        assert ended(run, tmp_path) == 3
    log = (tmp_path / "run.log").read_text()
    named = [line for line in log.splitlines() if "ended with exit code" in line]
    assert named == [f"lace: worker pid {killed} ended with exit code -9"], log


@pytest.mark.slow
def test_a_run_with_its_stdin_and_stdout_closed_runs_its_workers_and_ends_cleanly(
        tmp_path: Path) -> None:
    """A run started with standard input and output closed (`<&- >&-`: Python's sys.stdin and
    sys.stdout are None, and the run's first pipe takes descriptors 0 and 1) forks workers
    that serve all the same, and neither they nor the run end with a traceback."""
    db = new_database(tmp_path)
    command = " ".join([sys.executable, "-m", "lace", "run", "--workers", "2", "--timeout", "60",
                        f"'{MANY_PROMPT}'", "<&-", ">&-"])
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                         env=lace_env(tmp_path / "home"))
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "ended with exit code" not in run.stderr, run.stderr
    assert len(re.findall(r"lace worker \w+ \(pid \d+\) runs the agents", run.stderr)) == 2, \
        run.stderr
    root_id = run.stderr.split("Session ", 1)[1].split()[0]
    assert done(db, root_id), run.stderr


@pytest.mark.slow
def test_a_run_interrupted_while_it_forks_its_workers_leaves_none_behind(tmp_path: Path) -> None:
    """Ctrl+C held while the run forks (signals are blocked meanwhile) arrives once it is done:
    the run ends with 130, and only once every worker it forked is gone."""
    new_database(tmp_path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with (tmp_path / "run.log").open("wb") as log:
        run = subprocess.Popen(  # its own interpreter: the workers keep its command line
            [sys.executable, "-m", "lace", "run", "--workers", "16", "--workspace",
             str(workspace), MANY_PROMPT], stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=True, env=lace_env(tmp_path / "home", LACE_DEMO_DELAY="600"))
    try:
        wait_for(lambda: workers_of(run.pid, named=False), "the run's first worker")
        os.killpg(run.pid, signal.SIGINT)  # while it forks the other fifteen
        assert ended(run, tmp_path) == 130
        assert started_for(workspace) == [], (tmp_path / "run.log").read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        for pid in started_for(workspace):
            os.kill(pid, signal.SIGKILL)
    assert "Traceback" not in (tmp_path / "run.log").read_text()


@pytest.mark.slow
def test_a_runs_worker_that_dies_is_reaped_and_named_while_the_run_goes_on(
        tmp_path: Path) -> None:
    """As `lace worker --processes` does: a person learns of the failure when it happens, not
    when the run ends (hours later, perhaps), and no zombie waits that long."""
    with started_run(tmp_path) as (run, pids):
        killed = pids[0]
        ready(tmp_path / "home" / "lace.db", 3)
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{killed}").exists(), "the killed worker to be reaped",
                 timeout=15)
        wait_for(lambda: f"pid {killed}" in (tmp_path / "run.log").read_text(),
                 "the run to name the worker that died", timeout=15)
        assert run.poll() is None
        run.send_signal(signal.SIGTERM)
        assert ended(run, tmp_path) == 143
    log = (tmp_path / "run.log").read_text()
    assert log.count("ended with exit code") == 1, log


def named_failures(tmp_path: Path) -> list[str]:
    """The lines of the run's log that name a worker which ended with a failure."""
    return [line for line in (tmp_path / "run.log").read_text().splitlines()
            if "ended with exit code" in line]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_a_runs_worker_before_its_session_stops_it_cleanly_unnamed(
        tmp_path: Path, signum: int) -> None:
    """SIGINT to one worker (someone's `kill -INT`: the terminal's Ctrl+C reaches only the
    run's process group) stops it as SIGTERM does, before its session as once it serves: a
    clean exit the run does not name as a failure. (The run cannot start its session while
    the test holds the database's write lock, nor do anything while stopped.)"""
    db = new_database(tmp_path)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        with (tmp_path / "run.log").open("wb") as log:
            run = lace_popen([sys.executable, "-m", "lace", "run", "--workers", "2",
                              MANY_PROMPT], stdout=subprocess.DEVNULL, stderr=log,
                             env=lace_env(tmp_path / "home", LACE_DEMO_DELAY="600"))
        pids: list[int] = []
        try:
            wait_for(lambda: len(workers_of(run.pid, named=False)) == 2, "the run's workers")
            os.kill(run.pid, signal.SIGSTOP)
            pids = workers_of(run.pid, named=False)
            signalled = pids[0]
            os.kill(signalled, signum)
            wait_for(lambda: not alive(signalled), "the signalled worker to end")
            holder.execute("ROLLBACK")
            os.kill(run.pid, signal.SIGCONT)
            ready(db, 2)  # the run and the other worker serve the session
            wait_for(lambda: not Path(f"/proc/{signalled}").exists(), "the run to reap it")
            assert run.poll() is None
            run.send_signal(signal.SIGTERM)
            assert ended(run, tmp_path) == 143
        finally:
            kill_all(run, pids)
    assert named_failures(tmp_path) == [], (tmp_path / "run.log").read_text()
    assert "Traceback" not in (tmp_path / "run.log").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_a_runs_worker_that_serves_stops_it_cleanly_unnamed(
        tmp_path: Path, signum: int) -> None:
    """The same signal once the worker serves the session: its turns interrupted for the run
    and the other worker to resume, its lease given up, and no failure named."""
    with started_run(tmp_path) as (run, pids):
        db = tmp_path / "home" / "lace.db"
        signalled = pids[0]
        ready(db, 3)
        os.kill(signalled, signum)
        wait_for(lambda: not Path(f"/proc/{signalled}").exists(), "the run to reap it")
        assert len(live_processes(db)) == 2  # it gave up its lease
        assert run.poll() is None
        run.send_signal(signal.SIGTERM)
        assert ended(run, tmp_path) == 143
    assert named_failures(tmp_path) == [], (tmp_path / "run.log").read_text()
    assert "Traceback" not in (tmp_path / "run.log").read_text()


@pytest.mark.slow
def test_ctrl_c_as_a_run_starts_its_workers_prints_no_traceback_nor_a_failed_worker(
        tmp_path: Path) -> None:
    new_database(tmp_path)
    with (tmp_path / "run.log").open("wb") as log:
        run = lace_popen([sys.executable, "-m", "lace", "run", "--workers", "2", MANY_PROMPT],
                         stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                         env=lace_env(tmp_path / "home", LACE_DEMO_DELAY="600"))
    try:
        wait_for(lambda: len(workers_of(run.pid, named=False)) == 2, "the run's two workers")
        forked = workers_of(run.pid, named=False)
        os.killpg(run.pid, signal.SIGINT)  # Ctrl+C: the terminal signals the whole group
        assert ended(run, tmp_path) == 130
        wait_for(lambda: not any(alive(pid) for pid in forked), "the workers to end")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    log_text = (tmp_path / "run.log").read_text()
    assert "Traceback" not in log_text and "ended with exit code" not in log_text, log_text


@pytest.mark.slow
def test_a_forked_worker_that_dies_is_reaped_and_named_when_it_dies(tmp_path: Path) -> None:
    db = new_database(tmp_path)
    with worker(tmp_path, db, "--processes", "2", name="forked") as supervisor:
        ready(db, 2)
        last = max(workers_of(supervisor.pid, named=False))  # not the one waited for first
        os.kill(last, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{last}").exists(), "the killed worker to be reaped",
                 timeout=15)  # a zombie until its supervisor waits for it
        wait_for(lambda: f"pid {last}" in (tmp_path / "forked.log").read_text(),
                 "the supervisor to name the worker that died", timeout=15)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 128 + signal.SIGKILL
