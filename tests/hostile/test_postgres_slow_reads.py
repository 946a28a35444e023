"""A PostgreSQL server that keeps lace's reads waiting (a table locked by an operator's
migration, a server paused or swapping): `lace run` waiting for a session another process
runs looks every LOOK_AGAIN_S, and each wait ends at its timeout while its look goes on. Those
looks must not pile up, each a thread and a connection of the server, for as long as the
server keeps silent."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from lace.runtime.board import open_board
from tests.lace_forks import lace_popen
from tests.processes import detached_session, ended_after, lace_env
from tests.workers import value, wait_for

WAITS = 6
WAIT_S = 0.3


def daemon_looks() -> int:
    return sum(thread.name == "lace-daemon" for thread in threading.enumerate())


def test_waits_that_time_out_on_a_locked_table_share_one_look(
        migrated_postgres_url: str) -> None:
    board = open_board(migrated_postgres_url)
    try:
        root = board.store.write(lambda tx: tx.threads.create_session(
            provider="demo", model="demo", title="busy elsewhere").id)
        board.store.write(lambda tx: tx.agents.update(root, status="running"))
        with psycopg.connect(migrated_postgres_url) as locker:
            locker.execute("LOCK TABLE agent_metadata IN ACCESS EXCLUSIVE MODE")
            before = daemon_looks()

            async def waits() -> list[bool]:  # as lace run waits: again and again
                return [await board.until_quiet(root, WAIT_S, lambda: None)
                        for _ in range(WAITS)]

            assert asyncio.run(waits()) == [False] * WAITS
            assert daemon_looks() - before == 1
            assert value(migrated_postgres_url, "SELECT COUNT(*) FROM pg_stat_activity "
                                                "WHERE wait_event_type = 'Lock'") == 1
            locker.rollback()  # the lock is gone: the look under way answers
        board.store.write(lambda tx: tx.agents.update(root, status="idle"))

        async def settled() -> bool:
            return await board.until_quiet(root, 10.0, lambda: None)

        assert asyncio.run(settled())
        wait_for(lambda: daemon_looks() == before, "the look's thread ended")
    finally:
        board.close()


WAIT_TIMEOUT_S = 2.0
PAST_TIMEOUT_S = 8.0
"""`lace wait` reads how the session stands for 2 s past its timeout (UNANSWERED_S), after
starting Python, and the machine may be slow."""


def test_lace_wait_keeps_its_timeout_while_the_processes_table_is_locked(
        tmp_path: Path, migrated_postgres_url: str) -> None:
    """Once it has to wait, `lace wait` says whether a lace process runs the board: that read
    ran on the event loop, so a table locked by an operator (or a server paused just then)
    held the wait past its timeout, for as long as the lock."""
    env = lace_env(tmp_path / "home")
    session = detached_session(migrated_postgres_url, env)
    with psycopg.connect(migrated_postgres_url) as locker:
        locker.execute("LOCK TABLE processes IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        waiter = lace_popen([sys.executable, "-m", "lace", "wait", session, "--db",
                             migrated_postgres_url, "--timeout", str(WAIT_TIMEOUT_S)],
                            env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ended = ended_after(waiter, started, WAIT_TIMEOUT_S + PAST_TIMEOUT_S)
        _, said = waiter.communicate(timeout=30)
    assert ended < WAIT_TIMEOUT_S + PAST_TIMEOUT_S, f"lace wait outlived its timeout: {said}"
    assert waiter.returncode == 124, said
    assert "still runs after 2s" in said and "Traceback" not in said
