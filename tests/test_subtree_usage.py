"""A subtree's usage, read before every model call of a capped session: the sum over its
agents' rows, served by `ix_agent_usage` (lace_0018) rather than by reading the rows; the
tools' size in the estimate of what a call sets aside; and the prepared looks a fan-out takes
at every wake (a waiting call's tasks, the watch's stopped agents), on both engines."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from lace.core.assignee import ThreadAssignee
from lace.core.records import Thread
from lace.core.usage import schema_characters
from lace.store import Store
from lace.store import statements as sql
from tests.conftest import spawn_child

pytestmark = pytest.mark.both_engines


def use(store: Store, thread_id: str, tokens: int) -> None:
    with store.transaction() as tx:
        tx.usage.record_call(thread_id, model="demo/x", prompt_tokens=tokens,
                             completion_tokens=1, cost_usd=0.5, latency_ms=1.0)
        tx.agents.count_turn(thread_id)


def test_a_subtree_sums_its_agents_and_no_sibling_whose_id_shares_a_prefix(
        store: Store, session: Thread) -> None:
    children = [spawn_child(store, session.id) for _ in range(10)]  # <root>.1 ... <root>.10
    first, tenth = children[0], children[9]
    grandchild = spawn_child(store, first)
    use(store, session.id, 1000)
    use(store, first, 100)
    use(store, grandchild, 10)
    use(store, tenth, 1)
    with store.transaction() as tx:
        mine = tx.usage.subtree(first)
        everything = tx.usage.subtree(session.id)
    assert (mine.tokens, mine.turns, mine.cost_usd) == (112, 2, 1.0)
    assert (everything.tokens, everything.turns, everything.cost_usd) == (1115, 4, 2.0)


def test_a_sum_read_in_a_transaction_follows_what_the_transaction_writes_after_it(
        store: Store, session: Thread) -> None:
    """The budget checks of many agents of a session in one batch sum its usage once: each
    later one sees what the earlier ones wrote, as if it had summed the rows again."""
    child, other = spawn_child(store, session.id), spawn_child(store, session.id)
    use(store, child, 100)
    with store.transaction() as tx:
        before = tx.usage.subtree(session.id)
        tx.usage.record_call(child, model="demo/x", prompt_tokens=20, completion_tokens=5,
                             cost_usd=0.25, latency_ms=1.0)
        tx.agents.count_turn(other)
        tx.agents.get(child)  # the row as read, which a total set outright differs from
        tx.agents.update(child, tokens_in=1000)
        after = tx.usage.subtree(session.id)
    with store.transaction() as tx:
        fresh = tx.usage.subtree(session.id)
    assert (before.tokens, before.turns, before.cost_usd) == (101, 1, 0.5)
    assert after == fresh
    assert (fresh.tokens, fresh.turns, fresh.cost_usd) == (1006, 2, 0.75)


@pytest.mark.sqlite_only
def test_the_sum_reads_the_index_not_the_agent_rows(db_path: Path, store: Store,
                                                     session: Thread) -> None:
    spawn_child(store, session.id)
    statement = sql.SUBTREE_USAGE.sql
    params = {name: 0 for name in re.findall(r":(\w+)", statement)}  # the literals: 0
    params.update(me=session.id, after=f"{session.id}.", before=f"{session.id}/")
    with sqlite3.connect(db_path) as connection:
        plan = connection.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
    connection.close()
    details = [row[3] for row in plan]
    assert any("COVERING INDEX ix_agent_usage" in detail for detail in details), details


def test_a_schemas_size_is_remembered_per_list_and_follows_a_different_list() -> None:
    first = [{"type": "function", "function": {"name": "a", "parameters": {}}}]
    second = [{"type": "function", "function": {"name": "abc", "parameters": {"x": 1}}}]
    assert schema_characters(first) == len(json.dumps(first))
    assert schema_characters(list(first)) == len(json.dumps(first))  # same objects
    assert schema_characters(second) == len(json.dumps(second))
    assert schema_characters(first + second) == len(json.dumps(first + second))
    for number in range(100):  # more lists than it keeps: still each one's own size
        tools = [{"name": "t" * number}]
        assert schema_characters(tools) == len(json.dumps(tools))


def test_the_looks_of_a_waiting_call_and_of_the_watch_on_both_engines(
        store: Store, session: Thread) -> None:
    helper = spawn_child(store, session.id)
    with store.transaction() as tx:
        first = tx.board.create_task(session_id=session.id, actor=session.id, title="one",
                                     prompt="p", assignee=ThreadAssignee(helper))
        second = tx.board.create_task(session_id=session.id, actor=session.id, title="two",
                                      prompt="p")
        tx.board.complete_task(second.id, session_id=session.id, actor=session.id,
                               message="done")
        tx.agents.update(helper, status="stopped")
    with store.transaction() as tx:
        ids = [first.id, second.id, "no-such-task"]
        assert tx.tasks.count_active(ids) == 1 and tx.tasks.count_active([second.id]) == 0
        assert sorted(task.id for task in tx.tasks.by_ids(ids)) == sorted(ids[:2])
        assert tx.agents.stopped_among([session.id, helper, "nobody"]) == [helper]
