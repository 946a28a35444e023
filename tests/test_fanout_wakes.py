"""One wake per fan-out: the tasks an agent creates in one model reply and gives to agents tell
it once, when the last of them settles, with every task's completion block in that one notice.
Tasks for a person, tasks that wait for something outside the batch, and `notify_each` calls
notify on their own. Real `openai/` calls over HTTP to the scripted server, which counts the
coordinator's requests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, Settings
from lace.core.notifications import read_assignment, read_completions
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.runtime import open_runtime
from lace.store import Store, open_database
from tests.conftest import query
from tests.scripted import text

KEY = "sk-test-not-a-real-key"
BATCH_HEADER = "[LACE TASK SYSTEM] All "


def results(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Every completion the coordinator heard of, by task id."""
    return {done.task_id: done.result.strip() for message in messages
            if message["role"] == "user" for done in read_completions(text(message))}


def tasks_of(count: int, assignee: str = "new:openai/worker") -> list[dict[str, Any]]:
    return [{"title": f"Part {number}", "prompt": f"Do part {number}.", "assigned_to": assignee}
            for number in range(1, count + 1)]


class Coordinator:
    """The scripted server's model: `openai/root` fans out in its first reply (the
    `task_create` calls it is given), then acknowledges and sums up; `openai/worker` completes
    its task at once."""

    def __init__(self, *calls: dict[str, Any], expected: int) -> None:
        self.calls, self.expected = calls, expected

    def __call__(self, model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        if model == "worker":
            assigned = next(found for message in messages
                            if (found := read_assignment(text(message))))
            return ScriptedReply(tool_calls=[("task_complete", {
                "task_id": assigned.task_id, "message": f"RESULT of {assigned.title}"})])
        if not any(message["role"] == "assistant" for message in messages):
            return ScriptedReply(tool_calls=[("task_create", call) for call in self.calls])
        if messages[-1]["role"] == "tool":
            return ScriptedReply(text="Created; waiting for the results.")
        heard = results(messages)
        return ScriptedReply(text=f"All {self.expected} jobs are done." if len(heard) >=
                             self.expected else f"{len(heard)} of {self.expected} so far.")


async def fan_out(tmp_path: Path, coordinator: Coordinator, *, helpers: int = 40
                  ) -> tuple[str, FakeOpenAI, Path]:
    """Run the coordinator's session until quiet; the runtime is stopped after."""
    db_path = tmp_path / "lace.db"
    store = Store(open_database(str(db_path)))
    limits = Limits(max_running=helpers + 1, max_children=helpers, spawns_per_minute=helpers,
                    model_retries=0)
    runtime = open_runtime(store, Settings(limits=limits), default_client(),
                           check_model=check_model)
    with FakeOpenAI(coordinator) as fake, pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_BASE_URL", fake.base_url)
        patch.setenv("OPENAI_API_KEY", KEY)
        try:
            root = await runtime.start_session("Fan out the jobs.", "openai/root")
            await asyncio.wait_for(runtime.run_until_quiet(root.id), 120)
        finally:
            await runtime.stop()
            runtime.close()
    return root.id, fake, db_path


def root_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [body for body in fake.requests if body["model"] == "root"]


def notices(db_path: Path, root_id: str) -> list[str]:
    """The texts of the notices the root's turns took, in order."""
    return [row[0] for row in query(
        db_path, "SELECT json_extract(data, '$.message.content') FROM events WHERE thread_id = ? "
                 "AND type = 'notification' ORDER BY id", root_id)]


@pytest.mark.parametrize("helpers", [10, 40])
async def test_a_fan_out_costs_the_coordinator_three_model_calls(
        tmp_path: Path, helpers: int) -> None:
    calls = [{"tasks": tasks_of(helpers)[at:at + 20]} for at in range(0, helpers, 20)]
    root_id, fake, db_path = await fan_out(tmp_path, Coordinator(*calls, expected=helpers),
                                              helpers=helpers)
    requests = root_requests(fake)
    assert len(requests) <= 3, [body["messages"][-1] for body in requests]
    assert fake.exchanges[-1].reply is not None
    assert fake.exchanges[-1].reply.text == f"All {helpers} jobs are done."
    (notice,) = notices(db_path, root_id)  # one notice, each task's block inside it
    assert notice.startswith(f"{BATCH_HEADER}{helpers} tasks you created together")
    heard = read_completions(notice)
    assert sorted(done.result for done in heard) == sorted(
        f"RESULT of Part {number}" for number in range(1, helpers + 1))
    assert all(done.completed_by.startswith(f"{root_id}.") for done in heard)
    assert query(db_path, "SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL") == [(0,)]


async def test_notify_each_gives_a_notice_per_task(tmp_path: Path) -> None:
    coordinator = Coordinator({"tasks": tasks_of(3), "notify_each": True}, expected=3)
    root_id, _, db_path = await fan_out(tmp_path, coordinator)
    texts = notices(db_path, root_id)
    assert len(texts) == 3 and not any(BATCH_HEADER in notice for notice in texts)
    assert all(len(read_completions(notice)) == 1 for notice in texts)


async def test_a_task_for_a_person_does_not_hold_the_batch_back(tmp_path: Path) -> None:
    person = {"title": "Sign off", "prompt": "Sign it off.", "assigned_to": "human"}
    coordinator = Coordinator({"tasks": [*tasks_of(2), person]}, expected=2)
    root_id, fake, db_path = await fan_out(tmp_path, coordinator)
    (notice,) = notices(db_path, root_id)
    assert len(read_completions(notice)) == 2
    assert query(db_path, "SELECT title, status, batch IS NULL FROM tasks WHERE assigned_to = "
                          "'human'") == [("Sign off", "pending", 1)]
    assert len(root_requests(fake)) == 3


async def test_a_task_that_waits_inside_the_batch_joins_it(tmp_path: Path) -> None:
    plan = [*tasks_of(2), {"title": "Sum up", "prompt": "Sum up.",
                           "assigned_to": "new:openai/worker", "blocked_by": ["#1", "#2"]}]
    root_id, fake, db_path = await fan_out(tmp_path, Coordinator({"tasks": plan},
                                                                    expected=3))
    (notice,) = notices(db_path, root_id)
    assert [done.title for done in read_completions(notice)][-1] == "Sum up"
    assert len(root_requests(fake)) == 3


async def test_a_failed_helper_settles_its_task_and_the_notice_says_so(
        tmp_path: Path) -> None:
    """One helper's model fails (a 500, no retries): its task is blocked, which settles it;
    the one notice holds the other's completion and the blocked task's status notice."""
    failing = [{"title": "Part 1", "prompt": "Do part 1.", "assigned_to": "new:openai/worker"},
               {"title": "Part 2", "prompt": "Do part 2.", "assigned_to": "new:openai/broken"}]

    class WithBroken(Coordinator):
        def __call__(self, model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
            if model == "broken":  # the server answers 500; with no retries the agent fails
                raise RuntimeError("the broken model")
            return super().__call__(model, messages)

    root_id, _, db_path = await fan_out(tmp_path, WithBroken({"tasks": failing},
                                                                   expected=1))
    (notice,) = notices(db_path, root_id)
    assert [done.title for done in read_completions(notice)] == ["Part 1"]
    assert "Task '" in notice and "is now blocked" in notice and "model failed" in notice
    assert query(db_path, "SELECT title, status FROM tasks ORDER BY title") == [
        ("Part 1", "completed"), ("Part 2", "blocked")]


async def test_a_task_waiting_outside_the_batch_notifies_on_its_own(tmp_path: Path) -> None:
    """The root's second reply makes a task that waits for the first reply's: it joins no
    batch, and its completion is a notice of its own."""

    class TwoRounds(Coordinator):
        def __call__(self, model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
            replies = sum(message["role"] == "assistant" for message in messages)
            if model == "root" and messages[-1]["role"] == "tool" and replies == 1:
                created = text(messages[-1]).split()[2].rstrip(":")  # "Created task ID: ..."
                return ScriptedReply(tool_calls=[("task_create", {"tasks": [
                    {"title": "Later", "prompt": "Then this.", "assigned_to":
                     "new:openai/worker", "blocked_by": [created]}]})])
            return super().__call__(model, messages)

    root_id, _, db_path = await fan_out(tmp_path, TwoRounds({"tasks": tasks_of(1)},
                                                               expected=2))
    assert query(db_path, "SELECT title, batch IS NULL FROM tasks ORDER BY title") == [
        ("Later", 1), ("Part 1", 0)]
    assert [len(read_completions(notice)) for notice in notices(db_path, root_id)] == [1, 1]

