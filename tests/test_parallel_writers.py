"""Writers in parallel on PostgreSQL: no global write lock, yet every verb's read-decide-write
holds as if writers took turns (SERIALIZABLE, run again after a conflict), claims skip locked
rows, and four `lace worker` processes writing one board at once leave every effect once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lace.core.notifications import read_assignment
from lace.llm.demo import assignment_message, completed_calls
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.store import Store, Tx, open_database
from tests.conftest import new_session
from tests.scripted import text
from tests.workers import assert_delivered_once, ready, rows, value, wait_for, worker

PARTS = 19  # with the summing task, the 20 a task_create takes at most
WORKERS = 4
LIMITS = {"LACE_LIMITS__MAX_CHILDREN": "40", "LACE_LIMITS__SPAWNS_PER_MINUTE": "200"}
DATABASE_FAULTS = ("Traceback", "could not serialize", "deadlock detected", "lock timeout",
                   "canceling statement")


@pytest.fixture
def pg_store(migrated_postgres_url: str) -> Iterator[Store]:
    store = Store(open_database(migrated_postgres_url))
    yield store
    store.close()


def test_a_writer_does_not_wait_for_another_writer_of_other_rows(
        pg_store: Store, migrated_postgres_url: str) -> None:
    first, second = new_session(pg_store), new_session(pg_store)
    holding, release = threading.Event(), threading.Event()

    def hold(tx: Tx) -> int:
        event_id = tx.events.append(first.id, "user_message", {"text": "held"}).value  # sent
        holding.set()
        assert release.wait(30), "the other writer never committed"
        return event_id

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(pg_store.write, hold)
        assert holding.wait(10)
        # with one write lock this would wait for `hold`, which waits for it: never
        other = pg_store.write(
            lambda tx: tx.events.append(second.id, "user_message", {"text": "free"})).value
        release.set()
        first_id = held.result(timeout=30)
    committed = rows(migrated_postgres_url,
                     "SELECT id, thread_id FROM events WHERE type = 'user_message' ORDER BY id")
    assert committed == [(first_id, first.id), (other, second.id)]


def test_writers_that_read_what_the_other_writes_commit_as_if_in_turn(
        pg_store: Store, migrated_postgres_url: str) -> None:
    session = new_session(pg_store)
    task_id = pg_store.write(lambda tx: tx.tasks.insert(
        session_id=session.id, created_by=session.id, title="Count", prompt="Count.").id)
    both_read = threading.Barrier(2, timeout=10)
    attempts: list[str] = []

    def number_the_next_note(tx: Tx) -> str:
        count = tx.notes.count(task_id)  # read, decide, write: a second writer must see the first
        attempts.append(threading.current_thread().name)
        if len(attempts) <= 2:
            both_read.wait()  # both first attempts read before either writes
        tx.notes.insert(task_id, author=session.id, content=f"note {count + 1}")
        return f"note {count + 1}"

    with ThreadPoolExecutor(2) as pool:
        written = sorted(future.result(timeout=30) for future in
                         [pool.submit(pg_store.write, number_the_next_note) for _ in range(2)])
    assert written == ["note 1", "note 2"]
    assert rows(migrated_postgres_url, "SELECT content FROM task_notes ORDER BY id") \
        == [("note 1",), ("note 2",)]
    assert len(attempts) == 3  # the one that lost ran again and saw the other's note


def test_two_children_added_to_one_parent_at_once_get_the_next_two_ids(
        pg_store: Store, migrated_postgres_url: str) -> None:
    """Two spawns under one parent in two processes at once (an agent's task_create, and the
    release of a helper it planned, by a blocker completed elsewhere): each reads the highest
    child and takes the next id; the later must be run again, not fail on the key."""
    session = new_session(pg_store)
    waiting = ("SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
               "AND datname = current_database()")
    with ThreadPoolExecutor(1) as pool:
        with pg_store.transaction() as tx:
            first = tx.threads.create_child(session.id).id
            other = pool.submit(pg_store.write,
                                lambda tx: tx.threads.create_child(session.id).id)
            wait_for(lambda: other.done() or value(migrated_postgres_url, waiting) > 0,
                     "the second spawn to wait for the first's id")
        second = other.result(timeout=30)
    assert (first, second) == (f"{session.id}.1", f"{session.id}.2")


def parts_then_sum(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """The root creates PARTS tasks and one that waits for all of them, each for a
    `new:openai/worker`; every worker notes, then completes its task."""
    if model == "worker":
        assigned = read_assignment(text(assignment_message(messages)))
        if assigned is None:
            return ScriptedReply("no task")
        done = completed_calls(messages)
        if "task_add_note" not in done:
            return ScriptedReply(tool_calls=[("task_add_note", {"task_id": assigned.task_id,
                                                                "note": "on it"})])
        if "task_complete" not in done:
            return ScriptedReply(tool_calls=[("task_complete", {
                "task_id": assigned.task_id, "message": f"done: {assigned.title}"})])
        return ScriptedReply("finished")
    if "task_create" not in completed_calls(messages):
        parts = [{"title": f"Part {n}", "prompt": f"Do part {n}.",
                  "assigned_to": "new:openai/worker"} for n in range(1, PARTS + 1)]
        total = {"title": "Sum", "prompt": "Add the parts up.", "assigned_to":
                 "new:openai/worker", "blocked_by": [f"#{n}" for n in range(1, PARTS + 1)]}
        # a notice per task (no batch): the nineteen completions each tell the root
        return ScriptedReply(tool_calls=[("task_create", {"tasks": [*parts, total],
                                                          "notify_each": True})])
    said = [str(message.get("content") or "") for message in messages]
    completed = sum("has been completed by" in line for line in said)
    return ScriptedReply(f"All {PARTS + 1} tasks are done." if completed >= PARTS + 1
                         else f"{completed} done.")


def board_state(url: str) -> str:
    """What a failed wait saw: tasks and agents by status, and the pending inbox rows."""
    return "\n".join(str(rows(url, sql)) for sql in (
        "SELECT status, COUNT(*) FROM tasks GROUP BY 1",
        "SELECT status, COUNT(*) FROM agent_metadata GROUP BY 1",
        "SELECT thread_id, kind, wakes FROM inbox WHERE consumed_at IS NULL"))


ALL_DONE = ("SELECT CASE WHEN (SELECT COUNT(*) FROM agent_metadata WHERE status NOT IN "
            "('idle', 'stopped')) = 0 AND (SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL)"
            " = 0 THEN (SELECT COUNT(*) FROM tasks WHERE status = 'completed') ELSE -1 END")
"""The completed tasks once every agent is idle and every notice delivered, else -1: in one
statement, so one snapshot (three queries let a turn begin between them: the root idle in
the second, its last notice consumed by the third, its turn then cut off by SIGTERM)."""


@pytest.mark.slow
def test_four_workers_writing_one_board_at_once_leave_every_effect_once(
        tmp_path: Path, postgres_url: str) -> None:
    Store(open_database(postgres_url)).close()
    with FakeOpenAI(parts_then_sum, latency_s=0.05, backlog=512) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-fake-key", **LIMITS}
        names = [f"w{n}" for n in range(WORKERS)]
        with worker(tmp_path, postgres_url, name=names[0], **env) as w0, \
                worker(tmp_path, postgres_url, name=names[1], **env) as w1, \
                worker(tmp_path, postgres_url, name=names[2], **env) as w2, \
                worker(tmp_path, postgres_url, name=names[3], **env) as w3:
            ready(postgres_url, WORKERS)
            store = Store(open_database(postgres_url))
            root = store.write(lambda tx: tx.threads.create_session(
                provider="openai", model="root"))
            store.write(lambda tx: tx.inbox.post(root.id, sender="human", kind="message",
                                                 text="Plan the parts."))
            store.close()
            try:
                wait_for(lambda: value(postgres_url, ALL_DONE) == PARTS + 1,
                         "every task completed and every agent idle", timeout=180)
            except AssertionError as error:
                raise AssertionError(f"{error}\n{board_state(postgres_url)}\n" + "\n".join(
                    (tmp_path / f"{name}.log").read_text()[-3000:] for name in names)) from None
            for process in (w0, w1, w2, w3):
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0
    logs = {name: (tmp_path / f"{name}.log").read_text(errors="replace") for name in names}
    for name, log in logs.items():
        assert not [fault for fault in DATABASE_FAULTS if fault in log], (name, log)
    assert_delivered_once(postgres_url)  # every task completed, every inbox row consumed once
    assert value(postgres_url, "SELECT COUNT(*) FROM tasks") == PARTS + 1
    assert value(postgres_url, "SELECT COUNT(*) FROM agent_metadata") == PARTS + 2
    assert rows(postgres_url, "SELECT task_id, content, COUNT(*) FROM task_notes "
                              "GROUP BY task_id, content HAVING COUNT(*) > 1") == []
    # one completion notice per task, in the root's inbox; the sum released once, last
    assert rows(postgres_url, "SELECT task_id, COUNT(*) FROM inbox WHERE thread_id = ? AND "
                              "kind = 'completion' GROUP BY task_id HAVING COUNT(*) != 1",
                root.id) == []
    assert value(postgres_url, "SELECT COUNT(*) FROM inbox WHERE thread_id = ? AND "
                               "kind = 'completion'", root.id) == PARTS + 1
    summed = value(postgres_url, "SELECT id FROM tasks WHERE title = 'Sum'")
    assert value(postgres_url, "SELECT COUNT(*) FROM agent_metadata WHERE created_for_task "
                               "= ?", summed) == 1
    assert rows(postgres_url, "SELECT thread_id, error FROM llm_calls "
                              "WHERE error IS NOT NULL") == []
    ran_helpers = {holder for (holder,) in rows(
        postgres_url, "SELECT DISTINCT lease_holder FROM agent_metadata WHERE thread_id != ?",
        root.id)}
    assert len(ran_helpers) >= 2  # the writers were in parallel processes
    # each inbox's ids follow the order its rows were consumed in
    for (thread_id,) in rows(postgres_url, "SELECT DISTINCT thread_id FROM inbox"):
        consumed = [inbox_id for inbox_id, _ in rows(
            postgres_url, "SELECT id, consumed_at FROM inbox WHERE thread_id = ? "
                          "ORDER BY consumed_at, id", thread_id)]
        assert consumed == sorted(consumed), thread_id
