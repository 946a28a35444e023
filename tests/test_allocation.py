"""Thread and task ids stay unique when many writers allocate at the same moment."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from lace.core import ids
from lace.core.records import NewAgent, Thread
from lace.store import Store, open_database
from lace.store.task_rules import TaskDraft
from tests.conftest import new_session


def _spawn_children(path: str, parent_id: str, count: int,
                    barrier: multiprocessing.synchronize.Barrier,  # type: ignore[name-defined]
                    results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    store = Store(open_database(path))
    barrier.wait()
    made = []
    for _ in range(count):
        with store.transaction() as tx:
            made.append(tx.threads.create_child(parent_id).id)
            task = tx.board.create_task(session_id=parent_id, actor=parent_id, title="t",
                                        prompt="p")
            made.append(task.id)
    results.put(made)


def test_child_ids_under_process_contention(db_path: Path, store: Store,
                                            session: Thread) -> None:
    workers, each = 4, 15
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(workers), context.Queue()
    processes = [context.Process(target=_spawn_children,
                                 args=(str(db_path), session.id, each, barrier, results))
                 for _ in range(workers)]
    for process in processes:
        process.start()
    made = [item for _ in processes for item in results.get(timeout=120)]
    for process in processes:
        process.join(timeout=60)
    children = [item for item in made if item.startswith("lace_")]
    tasks = [item for item in made if item.startswith("task_")]
    expected = {ids.child_thread_id(session.id, n) for n in range(1, workers * each + 1)}
    assert len(children) == len(set(children)) == workers * each
    assert set(children) == expected
    assert len(set(tasks)) == workers * each


def test_grandchild_ids_under_thread_contention(store: Store, session: Thread) -> None:
    with store.transaction() as tx:
        parent = tx.threads.create_child(session.id).id
    made: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def spawn() -> None:
        start.wait()
        for _ in range(10):
            with store.transaction() as tx:
                child = tx.threads.create_child(parent).id
            with lock:
                made.append(child)

    workers = [threading.Thread(target=spawn) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(made, key=ids.child_index) == [f"{parent}.{n}" for n in range(1, 61)]


def test_children_past_nine_are_numbered_not_sorted_as_text(store: Store) -> None:
    session = new_session(store)
    with store.transaction() as tx:
        for _ in range(11):
            last = tx.threads.create_child(session.id).id
    assert last == f"{session.id}.11"


def test_a_clashing_task_id_is_retried(store: Store, session: Thread,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with store.transaction() as tx:
        first = tx.board.create_task(session_id=session.id, actor="human", title="a", prompt="p").id
    offered = iter([first, first, "task_20261122_0000ff"])
    monkeypatch.setattr(ids, "new_task_id", lambda: next(offered))
    with store.transaction() as tx:
        second = tx.board.create_task(session_id=session.id, actor="human", title="b",
                                      prompt="p").id
    assert second == "task_20261122_0000ff"


@pytest.mark.both_engines
def test_clashing_ids_in_one_task_create_are_retried_in_order(
        store: Store, session: Thread, monkeypatch: pytest.MonkeyPatch) -> None:
    with store.transaction() as tx:
        first = tx.board.create_task(session_id=session.id, actor="human", title="a", prompt="p").id
    offered = iter([first, "task_20261122_0000a1", "task_20261122_0000a1", first,
                    "task_20261122_0000a2", "task_20261122_0000a3"])
    monkeypatch.setattr(ids, "new_task_id", lambda: next(offered))
    drafts = [TaskDraft(title=title, prompt="p") for title in ("b", "c", "d")]
    with store.transaction() as tx:
        made = tx.board.create_tasks(session_id=session.id, actor="human", drafts=drafts)
    assert [(task.title, task.id) for task in made] == [
        ("b", "task_20261122_0000a1"), ("c", "task_20261122_0000a2"),
        ("d", "task_20261122_0000a3")]


def test_a_hundred_agents_writing_at_once_lose_nothing(store: Store, session: Thread,
                                                       db_path: Path) -> None:
    import sqlite3

    agents, writes = 100, 3
    start = threading.Barrier(agents)
    failures: list[BaseException] = []

    def agent_work() -> None:
        try:
            start.wait()
            with store.transaction() as tx:
                child = tx.threads.create_child(session.id).id
                tx.agents.create(NewAgent(thread_id=child, name="w", provider="demo",
                                          model="worker", parent_thread_id=session.id))
            for n in range(writes):
                with store.transaction() as tx:
                    task = tx.board.create_task(session_id=session.id, actor=child, title=f"t{n}",
                                                prompt="p")
                    tx.board.add_note(task.id, session_id=session.id, actor=child, content="note")
                    tx.events.append(child, "agent_message", {"message": {"content": str(n)}})
        except BaseException as error:  # reported below; "database is locked" would land here
            failures.append(error)

    workers = [threading.Thread(target=agent_work) for _ in range(agents)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    with sqlite3.connect(db_path) as connection:
        counts = [connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                  for table in ("threads", "tasks", "task_notes", "events")]
        children = [row[0] for row in connection.execute(
            "SELECT id FROM threads WHERE parent_id = ?", (session.id,))]
    assert counts == [agents + 1, agents * writes, agents * writes, agents * writes]
    assert sorted(children, key=ids.child_index) == [
        f"{session.id}.{n}" for n in range(1, agents + 1)]
