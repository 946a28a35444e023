"""PostgreSQL faults survived: lace's backends terminated every two seconds, the server
restarted mid-run, a worker killed while the other's connections are dropped, and a COMMIT
whose answer is lost. Each fan-out still ends with every task done exactly once and no agent
left in `error` or `running`."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
import time
from argparse import Namespace
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from lace.llm.openai_fake import FakeOpenAI
from lace.runtime.database import AsyncStore
from lace.store import Later, Store, Tx, open_database
from lace.store.db import Database
from lace.store.engines import engine_for, postgresql, reconnect
from lace.store.retry import GaveUpError, run_transaction
from tests import postgres
from tests.acp_peers import Editor, lace_acp
from tests.faults import (
    HELPERS,
    CommitCutter,
    OutageAt,
    fan_out,
    restart,
    terminate_backends,
    terminating_every,
)
from tests.lace_forks import lace_popen
from tests.processes import free_port, lace_env
from tests.workers import assert_delivered_once, ready, rows, value, wait_for, worker

LIMITS = {"LACE_LIMITS__MAX_CHILDREN": "40", "LACE_LIMITS__SPAWNS_PER_MINUTE": "100"}
RIDDEN_OUT = "30"
"""The lease timeout where a fault must be ridden out by reconnecting alone (no takeover): long,
as no worker dies there (on a swamped machine a transaction can take seconds to get through)."""
TAKEN_OVER = "2"
"""The lease timeout where a killed worker's agents are taken over."""
LATENCY_S = 0.3
STRUCK_LATENCY_S = 1.5
"""The model's latency where the backends are struck every two seconds or a worker is killed: the
fan-out (the root's three calls and each helper's two) then lasts several periods even on an
idle machine, and each worker holds turns while it runs."""


def lace_process(tmp_path: Path, server: FakeOpenAI, *argv: str) -> subprocess.Popen[str]:
    return lace_popen([sys.executable, "-m", "lace", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=lace_env(
                                tmp_path / "home", OPENAI_BASE_URL=server.base_url,
                                OPENAI_API_KEY="sk-fake-key", **LIMITS))


@contextmanager
def fan_out_run(tmp_path: Path, url: str, lease_timeout_s: str,
                latency_s: float = LATENCY_S, **settings: str) -> Iterator[
        tuple[FakeOpenAI, dict[str, subprocess.Popen[bytes]], str]]:
    """Two workers (`a`, `b`) on `url` with leases of `lease_timeout_s` (and `settings`, as
    LACE_ variables), ready, and a 30-task fan-out started by `lace run --detach`: the model
    server, the workers by name and the session's root."""
    Store(open_database(url)).close()
    with FakeOpenAI(fan_out, latency_s=latency_s, backlog=512) as server, ExitStack() as stack:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-fake-key", **LIMITS,
               "LACE_LIMITS__LEASE_TIMEOUT_S": lease_timeout_s, **settings}
        workers = {name: stack.enter_context(worker(tmp_path, url, name=name, **env))
                   for name in ("a", "b")}
        ready(url, len(workers))
        detached = lace_process(tmp_path, server, "run", "--detach", "--db", url,
                                "--model", "openai/root", "Fan out.")
        out, err = detached.communicate(timeout=120)
        assert detached.returncode == 0, err
        yield server, workers, out.strip()


def waiting(tmp_path: Path, server: FakeOpenAI, url: str, root: str) -> subprocess.Popen[str]:
    """`lace wait` on the session, once it waits (it opened the database and looked once)."""
    waiter = lace_process(tmp_path, server, "wait", root, "--db", url, "--timeout", "150")
    assert waiter.stderr is not None and waiter.stderr.readline().startswith("Waiting")
    return waiter


def completed(url: str) -> int:
    return int(value(url, "SELECT COUNT(*) FROM tasks WHERE status = 'completed'"))


def stop_cleanly(tmp_path: Path, workers: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker still running: it exits 0 without a traceback."""
    for name, process in workers.items():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, (tmp_path / f"{name}.log").read_text()
            assert "Traceback" not in (tmp_path / f"{name}.log").read_text()


def assert_answered(waited: subprocess.Popen[str]) -> None:
    """`lace wait` ended with the root's answer, all tasks done."""
    out, err = waited.communicate(timeout=180)
    assert waited.returncode == 0, err
    assert f"All {HELPERS} tasks are done." in out


def assert_exactly_once(url: str) -> None:
    """Every task was noted, completed and announced once; every inbox row consumed once; no
    agent failed or is left running; no turn ended in an error."""
    assert value(url, "SELECT COUNT(*) FROM tasks") == HELPERS
    assert_delivered_once(url)
    for kind_of_row in ("SELECT task_id, COUNT(*) FROM task_notes WHERE content = 'on it' "
                        "GROUP BY task_id",
                        "SELECT task_id, COUNT(*) FROM inbox WHERE kind = 'completion' "
                        "GROUP BY task_id"):
        counts = rows(url, kind_of_row)
        assert len(counts) == HELPERS and {count for _, count in counts} == {1}
    assert {status for (status,) in rows(url, "SELECT status FROM agent_metadata")} == {"idle"}
    assert value(url, "SELECT COUNT(*) FROM events WHERE type = 'error'") == 0


def held_by(url: str, pid: int) -> int:
    """How many agents the lace process `pid` holds running or waiting."""
    return int(value(url, "SELECT COUNT(*) FROM agent_metadata a JOIN processes p ON "
                          "a.lease_holder = p.id WHERE p.pid = ? AND a.status IN "
                          "('running', 'waiting')", pid))


def resumed(url: str) -> int:
    """How many turns were resumed (taken over after their process lost its lease)."""
    return int(value(url, "SELECT COUNT(*) FROM inbox WHERE kind = 'resume'"))


@pytest.mark.slow
def test_a_fan_out_survives_its_backends_terminated_every_two_seconds(
        tmp_path: Path, postgres_url: str) -> None:
    with fan_out_run(tmp_path, postgres_url, RIDDEN_OUT, STRUCK_LATENCY_S) as (
            server, workers, root):
        waited = waiting(tmp_path, server, postgres_url, root)
        with terminating_every(postgres_url, 2.0) as struck:
            assert_answered(waited)
        terminate_backends(postgres_url)
        stop_cleanly(tmp_path, workers)  # right after a drop
    assert len(struck) >= 2 and min(struck) > 0  # it struck lace, more than once
    assert_exactly_once(postgres_url)
    assert resumed(postgres_url) == 0  # every cut transaction was retried, no turn lost


@pytest.mark.slow
def test_a_fan_out_survives_a_server_restart_mid_run(
        tmp_path: Path, postgres_url: str, postgres_server: postgres.PostgresServer) -> None:
    with fan_out_run(tmp_path, postgres_url, RIDDEN_OUT) as (server, workers, root):
        waited = waiting(tmp_path, server, postgres_url, root)
        wait_for(lambda: 0 < completed(postgres_url) < HELPERS // 2, "the run under way")
        restart(postgres_server, down_s=2.0)
        assert completed(postgres_url) < HELPERS  # the restart came mid-run
        assert_answered(waited)
        stop_cleanly(tmp_path, workers)
    assert_exactly_once(postgres_url)
    assert resumed(postgres_url) == 0


@pytest.mark.slow
def test_a_worker_killed_while_the_others_connections_drop_is_taken_over(
        tmp_path: Path, postgres_url: str) -> None:
    with fan_out_run(tmp_path, postgres_url, TAKEN_OVER, STRUCK_LATENCY_S) as (
            server, workers, root):
        waited = waiting(tmp_path, server, postgres_url, root)
        with terminating_every(postgres_url, 2.0):
            wait_for(lambda: 0 < completed(postgres_url) < HELPERS // 2
                     and held_by(postgres_url, workers["a"].pid) > 0,
                     "the run under way, with turns of the worker to kill")
            workers["a"].send_signal(signal.SIGKILL)
            assert_answered(waited)
        stop_cleanly(tmp_path, {"b": workers["b"]})
    assert_exactly_once(postgres_url)
    assert resumed(postgres_url) >= 1  # the killed worker's turns, resumed by the other


TIGHT_CAP = 20_000
"""A session cap that two of the fan-out's calls fill at once (each sets aside its estimate,
about 9,000 tokens), though the whole run uses a few thousand: what a process holds of it
decides whether another's calls may go."""


def tokens_held_by(url: str, pid: int) -> int:
    """What the lace process `pid` holds of the session's tokens (`token_grants`)."""
    return int(value(url, "SELECT COALESCE(SUM(g.tokens), 0) FROM token_grants g JOIN "
                          "processes p ON p.id = g.process_id WHERE p.pid = ?", pid))


@pytest.mark.slow
def test_a_worker_killed_holding_the_tokens_of_a_tight_cap_gives_them_up_with_its_lease(
        tmp_path: Path, postgres_url: str) -> None:
    """SIGKILL the only worker while it holds most of the cap, then start another: the dead
    worker's grant counts until its lease expires, then the new worker's calls get the
    tokens, and the fan-out ends within the cap, no call having given up waiting."""
    Store(open_database(postgres_url)).close()
    settings = {"OPENAI_API_KEY": "sk-fake-key", **LIMITS, "LACE_LIMITS__LEASE_TIMEOUT_S":
                TAKEN_OVER, "LACE_BUDGETS__SESSION_TOKENS": str(TIGHT_CAP)}
    with FakeOpenAI(fan_out, latency_s=LATENCY_S, backlog=512) as server:
        settings["OPENAI_BASE_URL"] = server.base_url
        with worker(tmp_path, postgres_url, name="a", **settings) as first:
            ready(postgres_url, 1)
            detached = lace_process(tmp_path, server, "run", "--detach", "--db", postgres_url,
                                    "--model", "openai/root", "Fan out.")
            out, err = detached.communicate(timeout=120)
            assert detached.returncode == 0, err
            waited = waiting(tmp_path, server, postgres_url, out.strip())
            wait_for(lambda: 0 < completed(postgres_url) < HELPERS // 2
                     and tokens_held_by(postgres_url, first.pid) > TIGHT_CAP // 2,
                     "the run under way, the worker to kill holding most of the cap")
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker(tmp_path, postgres_url, name="b", **settings) as second:
            assert_answered(waited)
            stop_cleanly(tmp_path, {"b": second})
    assert_exactly_once(postgres_url)
    calls = [int(used) for (used,) in rows(
        postgres_url, "SELECT prompt_tokens + completion_tokens FROM llm_calls")]
    assert sum(calls) <= TIGHT_CAP
    assert resumed(postgres_url) >= 1  # the killed worker's turns, resumed by the new one


STOP_BOUND_S = 15.0
"""The docs' systemd unit gives a worker TimeoutStopSec=15 before it is killed."""


@pytest.mark.slow
def test_a_worker_stopped_right_after_its_server_went_down_mid_call_exits_0(
        tmp_path: Path, postgres_url: str, postgres_server: postgres.PostgresServer) -> None:
    """Its turn, cut off inside a model call, records the call's usage as it ends: that write
    must not hold the worker's stop while the server is away."""
    Store(open_database(postgres_url)).close()
    with FakeOpenAI(fan_out, latency_s=12.0) as server, worker(  # ends before its cleanup
            tmp_path, postgres_url, name="a", OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-fake-key", **LIMITS) as process:
        ready(postgres_url, 1)
        detached = lace_process(tmp_path, server, "run", "--detach", "--db", postgres_url,
                                "--model", "openai/root", "Fan out.")
        assert detached.wait(timeout=120) == 0
        wait_for(lambda: len(server.requests) == 1, "the root's model call under way")
        postgres_server.stop_fast()
        try:
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            assert process.wait(timeout=60) == 0
            assert time.monotonic() - started < STOP_BOUND_S
        finally:
            postgres_server.start_again()
    assert "Traceback" not in (tmp_path / "a.log").read_text()


async def test_a_runtime_opened_while_its_server_restarts_waits_for_it(
        migrated_postgres_url: str, postgres_server: postgres.PostgresServer) -> None:
    """The window of `lace worker`'s start-up between opening the board and registering its
    process (its lease): a server restarting there is waited for, as before the open."""
    from lace.config import Settings
    from lace.llm.client import default_client
    from lace.runtime import open_runtime

    store = Store(open_database(migrated_postgres_url))
    postgres_server.stop_fast()
    back = threading.Timer(1.0, postgres_server.start_again)
    back.start()
    try:
        runtime = await asyncio.to_thread(open_runtime, store, Settings(), default_client())
    finally:
        back.join()
    try:
        assert value(migrated_postgres_url, "SELECT COUNT(*) FROM processes WHERE id = ?",
                     runtime.scheduler.process_id) == 1
    finally:
        await runtime.stop()
        runtime.close()


def database_at(url: str) -> Database:
    kind = engine_for(url)
    return Database(url=url, kind=kind, engine=kind.create_engine())


def sessions(connection: sa.Connection) -> int:
    return int(connection.exec_driver_sql("SELECT COUNT(*) FROM threads").scalar() or 0)


async def test_a_commit_whose_answer_is_lost_is_not_written_twice(
        migrated_postgres_url: str) -> None:
    cutter = CommitCutter(int(sa.make_url(migrated_postgres_url).port or 0))
    through_cutter = sa.make_url(migrated_postgres_url).set(port=cutter.port)
    database = database_at(through_cutter.render_as_string(hide_password=False))
    store = AsyncStore(Store(database))
    try:
        cutter.armed.set()
        made = await store.write(lambda tx: tx.threads.create_session(
            provider="openai", model="root", title="once").id)
        assert cutter.cut == 1  # the COMMIT's answer never reached lace
        assert rows(migrated_postgres_url, "SELECT id, title FROM threads") == [(made, "once")]
        cutter.armed.set()  # and a read after it, cut the same way, reads once
        assert await store.read(lambda tx: tx.threads.get(made).title) == "once"
    finally:
        store.close()
        database.close()
        cutter.close()


async def test_an_events_id_sent_with_a_commit_whose_answer_is_lost_is_read_back(
        migrated_postgres_url: str) -> None:
    """An appended event's id rides with the COMMIT (`Later`); when only the COMMIT's answer
    is lost and the transaction is found committed, the id is read back from the table, not
    taken for the id of an undone row (the runtime publishes it as the table holds it)."""
    cutter = CommitCutter(int(sa.make_url(migrated_postgres_url).port or 0))
    through_cutter = sa.make_url(migrated_postgres_url).set(port=cutter.port)
    database = database_at(through_cutter.render_as_string(hide_password=False))
    store = AsyncStore(Store(database))
    try:
        session = await store.write(lambda tx: tx.threads.create_session(
            provider="openai", model="root", title="once").id)

        def appends(tx: Tx) -> tuple[Later[int], Later[list[int]], Later[int]]:
            first = tx.events.append(session, "error", {"n": 0})
            tx.events.of_thread(session)  # a read: the first id comes with it
            return first, tx.events.append_all(session, [
                ("user_message", {"n": 1}), ("notification", {"n": 2})]), \
                tx.events.append(session, "notification", {"n": 3})

        cutter.armed.set()
        first, two, last = await store.write(appends)
        assert cutter.cut == 1  # the COMMIT's answer never reached lace
        after = await store.write(lambda tx: tx.events.append(session, "error", {"n": 4}))
        assert rows(migrated_postgres_url, "SELECT id, type FROM events ORDER BY id") == [
            (first.value, "error"),
            *zip(two.value, ["user_message", "notification"], strict=True),
            (last.value, "notification"), (after.value, "error")]
    finally:
        store.close()
        database.close()
        cutter.close()


def runs_once_again_after(url: str, fault: Callable[[sa.Connection], None]) -> None:
    """A write transaction whose first attempt meets `fault` after its insert runs again, and
    its row is written once."""
    database = database_at(url)
    attempts: list[int] = []

    def work(connection: sa.Connection) -> str:
        attempts.append(1)
        thread = Tx(connection).threads.create_session(provider="openai", model="root")
        if len(attempts) == 1:
            fault(connection)
        return thread.id

    try:
        made = run_transaction(database, work, write=True)
    finally:
        database.close()
    assert len(attempts) == 2
    assert rows(url, "SELECT id FROM threads") == [(made,)]


def test_a_transaction_cut_before_commit_runs_again_on_a_new_connection(
        migrated_postgres_url: str) -> None:
    def terminated(connection: sa.Connection) -> None:  # the server ends it before COMMIT
        with pytest.raises(sa.exc.OperationalError):
            connection.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")

    runs_once_again_after(migrated_postgres_url, terminated)


def test_a_transaction_the_server_ended_for_idling_runs_again(
        migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a lace process paused inside a transaction (SIGSTOP, a laptop's lid), or one whose
    server was paused, meets when it goes on: 25P03, which psycopg raises as an InternalError."""
    monkeypatch.setattr(postgresql, "IDLE_IN_TRANSACTION_MS", 200)

    def idled(connection: sa.Connection) -> None:  # in the transaction past the timeout
        connection.exec_driver_sql("SELECT 1")
        time.sleep(1.0)  # the fault itself: the session idles past 0.2 s

    runs_once_again_after(migrated_postgres_url, idled)


def test_kept_connections_the_server_ended_for_idling_are_made_again(
        migrated_postgres_url: str) -> None:
    """A DBA's `idle_session_timeout` on lace's database (managed servers set one to free
    their slots) ends the connections a process keeps between its transactions: 57P05 on the
    next, which psycopg raises as an IdleSessionTimeout. The write and the read still go
    through, on new connections; they failed, and a turn with them."""
    name = sa.make_url(migrated_postgres_url).database
    with psycopg.connect(migrated_postgres_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET idle_session_timeout = 300')
    store = Store(open_database(migrated_postgres_url))

    def backend(tx: Tx) -> int:
        return int(tx.connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())

    def session(tx: Tx) -> str:
        return tx.threads.create_session(provider="openai", model="root").id

    async def main() -> tuple[str, int]:
        db = AsyncStore(store)
        try:
            await db.write(session)
            kept = {await db.write(backend), await db.read(backend)}
            wait_for(lambda: not kept & {pid for (pid,) in rows(
                migrated_postgres_url, "SELECT pid FROM pg_stat_activity")},
                     "the server ended both kept connections")
            made = await db.write(session)
            return made, await db.read(lambda tx: len(tx.threads.sessions()))
        finally:
            db.close()

    try:
        made, sessions_read = asyncio.run(main())
    finally:
        store.close()
    assert sessions_read == 2
    assert made in {thread for (thread,) in rows(migrated_postgres_url, "SELECT id FROM threads")}


def test_an_unreachable_server_is_named_on_stderr_while_lace_keeps_trying(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(reconnect, "UNREACHABLE_WARN_S", 0.3)
    refused = f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{free_port()}/lace"
    database = database_at(refused)
    started = time.monotonic()

    def after_a_while() -> bool:
        return time.monotonic() - started > 1.5

    try:
        with caplog.at_level(logging.WARNING, "lace.store"), pytest.raises(GaveUpError):
            run_transaction(database, sessions, write=False, stopping=after_a_while)
    finally:
        database.close()
    warnings = [record.getMessage() for record in caplog.records
                if "cannot reach the PostgreSQL server" in record.getMessage()]
    assert len(warnings) >= 2 and "still trying" in warnings[0]  # said, and said again
    assert "s3cret" not in "\n".join(warnings)


async def test_lost_notifications_are_said_once_on_one_line_while_lace_polls(
        caplog: pytest.LogCaptureFixture) -> None:
    """A server away for minutes (a worker's change feed retries every RECONNECT_S) is said
    once, then again every UNREACHABLE_WARN_S, not once a second; libpq's two-line message
    on one line."""
    feed = postgresql.PostgresChanges(f"postgresql://postgres@127.0.0.1:{free_port()}/lace")
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, "lace.runtime"):
            while time.monotonic() - started < 3.5 * postgresql.RECONNECT_S:
                await feed.wait(0.2)
    finally:
        feed.close()
    warnings = [record.getMessage() for record in caplog.records
                if "lost its PostgreSQL notifications" in record.getMessage()]
    assert len(warnings) == 1, warnings
    assert "\n" not in warnings[0] and "Connection refused" in warnings[0]



IDLE_SESSION_MS = 300


async def test_the_change_feed_outlives_an_idle_session_timeout(
        migrated_postgres_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The feed's connection waits idle for notifications on purpose: a DBA's
    `idle_session_timeout` ended it again and again, each time said as lost notifications."""
    name = sa.make_url(migrated_postgres_url).database
    with psycopg.connect(migrated_postgres_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET idle_session_timeout = {IDLE_SESSION_MS}')
    listening = ("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%' "
                 f"AND datname = '{name}'")
    feed = postgresql.PostgresChanges(migrated_postgres_url)
    try:
        with caplog.at_level(logging.WARNING, "lace.runtime"):
            deadline = time.monotonic() + 30
            while not rows(migrated_postgres_url, listening) and time.monotonic() < deadline:
                await feed.wait(0.05)  # the loop runs the feed's listener meanwhile
            first = rows(migrated_postgres_url, listening)
            assert first, "the feed never listened"
            for _ in range(5):  # the fault itself: idle five times past the timeout
                await feed.wait(IDLE_SESSION_MS / 1000)
            assert rows(migrated_postgres_url, listening) == first
    finally:
        feed.close()
    assert not [record for record in caplog.records
                if "lost its PostgreSQL notifications" in record.getMessage()]


def test_the_note_that_no_process_runs_the_board_waits_out_a_dropped_connection(
        postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`lace wait`, `lace follow` and `lace task add` read whether a lace process runs the
    board: a connection cut under that read is made again, never the command's error (`lace
    wait` ended with exit 2 in a fan-out whose backends were terminated)."""
    from lace.cli import main
    from lace.cli.board import board_of, note_unserved

    assert main(["task", "add", "Check it", "--assign", "new:demo/worker",
                 "--db", postgres_url]) == 0
    capsys.readouterr()
    cutter = CommitCutter(int(sa.make_url(postgres_url).port or 0))
    through_cutter = cutter.url(postgres_url)
    try:
        with board_of(Namespace(db=through_cutter)) as board:
            root = board.latest_session()
            assert root is not None
            cutter.armed.set()  # the read's COMMIT passes, its answer never comes back
            note_unserved(board, root.id)
        assert cutter.cut == 1
    finally:
        cutter.close()
    assert capsys.readouterr().err.startswith("lace: no lace process runs this board")


def test_the_apps_parting_line_waits_out_a_dropped_connection(postgres_url: str) -> None:
    """Quitting the app reads whether it left turns cut off: a connection cut under that read
    is made again, never an error once the app has closed."""
    from types import SimpleNamespace

    from lace.cli import main
    from lace.cli.tui import interrupted_note

    assert main(["task", "add", "Check it", "--db", postgres_url]) == 0
    (root,) = [row[0] for row in postgres.query(
        postgres_url, "SELECT thread_id FROM agent_metadata")]
    postgres.query(postgres_url, "UPDATE agent_metadata SET status = 'interrupted'")
    cutter = CommitCutter(int(sa.make_url(postgres_url).port or 0))
    store = Store(database_at(cutter.url(postgres_url)))
    try:
        app = SimpleNamespace(session_id=root, runtime=SimpleNamespace(store=store))
        cutter.armed.set()  # the read's COMMIT passes, its answer never comes back
        note = interrupted_note(app)  # type: ignore[arg-type]
        assert cutter.cut == 1
    finally:
        store.close()
        cutter.close()
    assert note is not None and f"session {root} was interrupted" in note


def test_a_worker_whose_registrations_commit_answer_is_lost_registers_once_and_works(
        tmp_path: Path, migrated_postgres_url: str) -> None:
    """`lace worker`'s start-up adds its process row (its lease); a COMMIT of that insert
    whose answer is lost must leave one row, and a worker that runs the session."""
    cutter = CommitCutter(int(sa.make_url(migrated_postgres_url).port or 0),
                          after=b"INSERT INTO processes")
    through_cutter = cutter.url(migrated_postgres_url)
    cutter.armed.set()
    try:
        with FakeOpenAI(fan_out) as server, worker(
                tmp_path, through_cutter, name="a", OPENAI_BASE_URL=server.base_url,
                OPENAI_API_KEY="sk-fake-key", **LIMITS) as process:
            ready(migrated_postgres_url, 1)
            assert cutter.cut == 1  # the registration's COMMIT went through, its answer lost
            detached = lace_process(tmp_path, server, "run", "--detach", "--db",
                                    migrated_postgres_url, "--model", "openai/root", "Fan out.")
            out, err = detached.communicate(timeout=120)
            assert detached.returncode == 0, err
            assert_answered(waiting(tmp_path, server, migrated_postgres_url, out.strip()))
            assert value(migrated_postgres_url, "SELECT COUNT(*) FROM processes WHERE pid = ?",
                         process.pid) == 1
            stop_cleanly(tmp_path, {"a": process})
    finally:
        cutter.close()
    assert_exactly_once(migrated_postgres_url)


def test_a_detached_run_whose_sessions_commit_answer_is_lost_starts_one_session(
        tmp_path: Path, migrated_postgres_url: str) -> None:
    """`lace run --detach` writes the session in one transaction of the person's command (no
    runtime): a COMMIT whose answer is lost is settled, not an error that invites the person
    to start a second session."""
    cutter = CommitCutter(int(sa.make_url(migrated_postgres_url).port or 0),
                          after=b"INSERT INTO threads")
    through_cutter = cutter.url(migrated_postgres_url)
    cutter.armed.set()
    try:
        with FakeOpenAI(fan_out) as server:
            detached = lace_process(tmp_path, server, "run", "--detach", "--db", through_cutter,
                                    "--model", "openai/root", "Fan out.")
            out, err = detached.communicate(timeout=120)
    finally:
        cutter.close()
    assert cutter.cut == 1  # the session's COMMIT went through, its answer lost
    assert detached.returncode == 0, err
    assert rows(migrated_postgres_url, "SELECT id FROM threads") == [(out.strip(),)]


@pytest.mark.parametrize(("command", "exit_code"), [
    (["worker"], 0), (["mcp", "serve"], 0), (["run", "Plan it.", "--model", "demo/coordinator"],
                                             128 + signal.SIGTERM)])
def test_a_process_whose_registration_meets_an_outage_stops_on_sigterm(
        tmp_path: Path, migrated_postgres_url: str, command: list[str], exit_code: int) -> None:
    """The server goes away just as `lace worker`, `lace mcp serve` or `lace run` registers
    (its board opened): it retries, and a SIGTERM (systemd stopping it, a person's kill) ends
    it within seconds, as a SIGTERM does otherwise, and no traceback. It retried with its
    event loop blocked, so the signal's stop never ran: it outlived SIGTERM (the worker and
    the server Ctrl+C too) for as long as the outage lasted."""
    outage = OutageAt(int(sa.make_url(migrated_postgres_url).port or 0),
                      b"INSERT INTO processes")
    through_proxy = outage.url(migrated_postgres_url)
    log = tmp_path / "lace.log"
    with log.open("wb") as stderr:
        process = lace_popen([sys.executable, "-m", "lace", *command, "--db", through_proxy],
                             env=lace_env(tmp_path / "home"), stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        assert outage.down.wait(60), log.read_text()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        assert code == exit_code, log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


async def test_lace_acp_whose_registration_meets_an_outage_stops_on_sigterm(
        tmp_path: Path, migrated_postgres_url: str) -> None:
    """`lace acp` opens a session's runtime when the editor asks for it (session/new): the
    server goes away as it registers, and a SIGTERM ends it within seconds, exit 0 and no
    traceback. It retried inside the request's handler, on the event loop, so the signal's
    stop never ran: it outlived SIGTERM for as long as the outage lasted."""
    outage = OutageAt(int(sa.make_url(migrated_postgres_url).port or 0),
                      b"INSERT INTO processes")
    through_proxy = outage.url(migrated_postgres_url)
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    async with lace_acp(Editor(), home, "--model", "demo/coordinator", "--db",
                        through_proxy) as (conn, process):
        asked = asyncio.ensure_future(conn.new_session(cwd=str(work), mcp_servers=[]))
        try:
            assert await asyncio.to_thread(outage.down.wait, 60)
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            asked.cancel()
    log = (tmp_path / "home-stderr.log").read_text()
    assert code == 0, log
    assert "Traceback" not in log, log
