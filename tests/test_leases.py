"""Two lace processes on one database: a thread is run by one process at a time (a lease with a
heartbeat), a starting process never takes over a live process's turns, a dead one's are taken
over, and each process sees the other's rows."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from lace.store import Store
from lace.tui.factory import create_app
from lace.tui.widgets.thread_tree import ThreadTree
from tests.conftest import new_session, spawn_child
from tests.conftest import query as query_db
from tests.lace_forks import lace_popen
from tests.processes import MANY_PROMPT, final_board, lace_env

pytestmark = pytest.mark.both_engines

def start_lace_run(home: Path, prompt: str, delay: str) -> subprocess.Popen[bytes]:
    return lace_popen([sys.executable, "-m", "lace", "run", prompt],
                            env=lace_env(home, LACE_DEMO_DELAY=delay),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def query(home: Path, sql: str) -> list[tuple[object, ...]]:
    return query_db(home / "lace.db", sql)


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Poll `condition` (a blocking wait: call it before the test's own loop has work)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except sqlite3.OperationalError:
            pass  # the other process is still creating the file
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_interrupted_agents_and_those_of_dead_processes_count_as_cut_off(store: Store) -> None:
    root = new_session(store).id
    children = [spawn_child(store, root) for _ in range(4)]
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    with store.transaction() as tx:
        for process in ("live", "gone", "silent", "remote"):
            tx.processes.register(process, 15.0)
        tx.connection.execute(sa.text("UPDATE processes SET pid = :pid WHERE id = 'gone'"),
                              {"pid": finished.pid})
        tx.connection.exec_driver_sql(
            "UPDATE processes SET expires_at = expires_at - 60 WHERE id = 'silent'")
        tx.connection.exec_driver_sql(
            "UPDATE processes SET host = 'another-host', pid = 1 WHERE id = 'remote'")
        for thread_id, holder, status in zip([root, *children],
                                             ["live", "gone", "silent", "remote", "mine"],
                                             ["running", "running", "waiting", "running",
                                              "running"], strict=True):
            tx.agents.update(thread_id, status=status, lease_holder=holder)
    with store.transaction() as tx:  # it writes (PostgreSQL refuses a write in a read)
        assert tx.leases.cut_off_agents(root, alive={"mine"}) == children[:2]
        assert tx.leases.cut_off_agents(root, alive=set()) == [*children[:2], children[3]]
        tx.agents.update(root, status="interrupted")
        assert tx.leases.cut_off_agents(root, alive={"mine"}) == [root, *children[:2]]
        assert tx.processes.live() == {"live", "remote"}


def test_a_held_agent_with_no_holder_is_cut_off_and_an_inert_one_never(store: Store) -> None:
    root = new_session(store).id
    held, inert, idle = (spawn_child(store, root) for _ in range(3))
    with store.transaction() as tx:
        tx.agents.update(held, status="waiting", lease_holder=None)
        tx.agents.update(inert, status="interrupted", inert=True)
        tx.agents.update(idle, status="idle", lease_holder="gone")
    with store.transaction() as tx:
        assert tx.leases.cut_off_agents(root, alive=set()) == [held]


@pytest.mark.slow
async def test_a_second_process_leaves_live_turns_alone_and_takes_over_a_dead_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lace.config import Limits, Settings
    from lace.llm.checks import check_model
    from lace.llm.client import default_client
    from lace.runtime import open_runtime
    from lace.store import open_database

    home = tmp_path / "home"
    other = start_lace_run(home, MANY_PROMPT, delay="1.0")
    try:
        wait_until(lambda: query(home, "SELECT COUNT(*) FROM agent_metadata WHERE status = "
                                       "'running' AND thread_id LIKE '%.%'")[0][0] >= 2,
                   "two children running in the other process")
        held = query(home, "SELECT thread_id, status, lease_holder FROM agent_metadata "
                           "WHERE status IN ('running', 'waiting') ORDER BY thread_id")
        (root,), = query(home, "SELECT id FROM threads WHERE parent_id IS NULL")
        monkeypatch.setenv("LACE_DEMO_DELAY", "0")
        settings = Settings(limits=Limits(lease_timeout_s=1.0))
        store = Store(open_database(str(home / "lace.db")))
        second = open_runtime(store, settings, default_client(), check_model=check_model)
        assert await second.resume(root) == []
        await asyncio.sleep(0.5)
        assert all(holder != second.process_id for _, _, holder in held)
        assert query(home, "SELECT COUNT(*) FROM inbox WHERE kind = 'resume'") == [(0,)]
        assert set(held) <= set(query(home, "SELECT thread_id, status, lease_holder FROM "
                                            "agent_metadata"))
        assert second.running.isdisjoint(thread for thread, _, _ in held)
    finally:
        other.kill()
        other.wait()
    for _ in range(400):  # the second process's heartbeat notices and takes over
        if query(home, "SELECT COUNT(*) FROM tasks WHERE status != 'completed'") == [(0,)] \
                and not second.running:
            break
        await asyncio.sleep(0.05)
    await second.stop()
    second.close()
    store.close()
    resumed = {thread for (thread,) in query(home, "SELECT thread_id FROM inbox WHERE "
                                                  "kind = 'resume'")}
    assert resumed == {thread for thread, _, _ in held}
    assert len(final_board(home)["tasks"]) == 4  # three parts and the summing-up
    # the second process left cleanly (its row went); the killed one's row stays, expired
    assert query(home, "SELECT pid FROM processes") == [(other.pid,)]


@pytest.mark.slow
async def test_the_app_and_lace_run_see_each_others_rows_within_a_second(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    other = start_lace_run(home, MANY_PROMPT, delay="1.0")  # still running once the app is up
    try:
        wait_until(lambda: query(home, "SELECT id FROM threads"), "the session")
        (root,), = query(home, "SELECT id FROM threads WHERE parent_id IS NULL")
        app = create_app(db=str(home / "lace.db"), continue_thread=str(root),
                         model="demo/coordinator")
        first_seen: dict[str, float] = {}
        shown: dict[str, float] = {}
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.press(*"Also thank the team.", "enter")
            longest_gap, last = 0.0, time.monotonic()
            while True:  # until the run ended and the app shows every thread
                now = time.monotonic()
                longest_gap, last = max(longest_gap, now - last), now
                for (thread,) in query(home, "SELECT id FROM threads"):
                    first_seen.setdefault(str(thread), now)
                for thread in app.query_one(ThreadTree).ordered_threads():
                    shown.setdefault(thread, now)
                if other.poll() is not None and not set(first_seen) - set(shown):
                    break
                await pilot.pause(0.05)
                assert now - min(first_seen.values()) < 60, "the run did not finish"
            await app.action_quit()
    finally:
        other.kill()
        other.wait()
    assert other.returncode == 0
    assert len(first_seen) >= 5  # the root, its four workers (and any the message made)
    late = {thread: shown[thread] - first_seen[thread] for thread in first_seen}
    # within a second (both look every 0.5 s), give or take how late this process, the app's
    # and the test's, was starved of a turn by the test run's other workers
    assert max(late.values()) < 1.0 + longest_gap, (late, longest_gap)
    delivered = query(home, "SELECT COUNT(*) FROM events WHERE type = 'user_message' AND "
                            "json_extract(data, '$.message.content') LIKE 'Also thank the team.%'")
    assert delivered == [(1,)]
