"""A helper whose worktree a person pruned, woken again (a message to a persistent helper, or
a new task), tries to write, run bash and read: every call is refused with a tool error that
tells it it has no workspace (before any approval is asked), nothing lands in the person's
checkout, and the pruned worktree is not made again. A helper it shares its place with
(spawned without a worktree of its own) is refused the same way, and it cannot start a helper
in a new worktree either."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lace.config import WorkspaceSettings
from lace.core.worktrees import no_workspace, pruned_work
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.runtime.board import Board
from lace.runtime.worktrees import prune_worktrees
from lace.store import Store
from tests.conftest import query
from tests.gitrepos import branches, git, new_repository, status
from tests.hooking import hook, hooked_runtime, logged, logger
from tests.scripted import ScriptedModels, assigned_task, reply, tools_called
from tests.worktree_sessions import WRITERS_ALLOWED, supervisor

pytestmark = pytest.mark.both_engines

WOKEN = "Please also write later.txt."
ATTEMPTS: list[Call | str] = [
    ("file_write", {"path": "later.txt", "content": "written after the prune\n"}),
    ("bash", {"command": "echo from-bash > bash.txt; pwd"}),
    ("file_edit", {"path": "README.md", "old_text": "# r", "new_text": "# owned"}),
    ("file_read", {"path": "README.md"}),
]


def tool_results(db_path: Path, thread_id: str) -> list[dict[str, Any]]:
    return [json.loads(data) for (data,) in query(
        db_path, "SELECT data FROM events WHERE thread_id = ? AND type = 'tool_result' "
                 "ORDER BY id", thread_id)]


Call = tuple[str, dict[str, Any]]


def woken_writer(after_prune: list[Call | str]) -> Any:
    """Writes a.txt and completes its task; woken again (by a person's message or a new
    task), makes the calls `after_prune`, one per model call (`"task_complete"`: of the task
    it was given last), then answers."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = tools_called(messages)
        if "file_write" not in done:
            return reply(None, ("file_write", {"path": "a.txt", "content": "A\n"}))
        if "task_complete" not in done:
            return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                                  "message": "a.txt written"}))
        woken = next((index for index, message in enumerate(messages)
                      if WOKEN in str(message.get("content") or "")), None)
        if woken is None:
            return reply("finished")
        since = len(tools_called(messages[woken:]))
        if since < len(after_prune):
            call = after_prune[since]
            return reply(None, call if isinstance(call, tuple) else (call, {
                "task_id": assigned_task(messages), "message": "nothing: no workspace"}))
        return reply("I have no workspace any more.")

    return handle


def delegate_once(messages: list[dict[str, Any]]) -> ScriptedReply:
    if "delegate" not in tools_called(messages):
        return reply(None, ("delegate", {"tasks": [{
            "title": "Write a.txt", "prompt": "Write a.txt.", "expected_response": "done",
            "assigned_to": "new:scripted/helper"}]}))
    return reply("delegated")


async def merged_and_pruned(store: Store, models: ScriptedModels, repo: Path,
                            after_prune: list[Call | str]) -> tuple[Runtime, str, str]:
    """A session whose helper wrote a.txt in its worktree and completed its task; a person
    then merged its branch and pruned its worktree. The runtime (still open), the root and the
    helper."""
    models.on("root", delegate_once)
    models.on("helper", woken_writer(after_prune))
    runtime = supervisor(store, repo)
    root = await runtime.start_session("write", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    helper = f"{root.id}.1"
    board = Board(store, workspace=repo)
    merged = await asyncio.to_thread(board.merge_worktree, helper, "merge")
    assert merged.is_error is False, merged.text
    pruned = await asyncio.to_thread(lambda: list(prune_worktrees(board)))
    assert [(done.worktree.thread_id, done.refusal) for done in pruned] == [(helper, None)]
    return runtime, root.id, helper


async def test_a_woken_helper_whose_worktree_was_pruned_writes_nowhere(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    repo = new_repository(tmp_path / "repo", {"README.md": "# r\n"})
    runtime, root, helper = await merged_and_pruned(store, models, repo, ATTEMPTS)
    runtime.close()
    (folder,), = query(db_path, "SELECT folder FROM worktrees WHERE thread_id = ?", helper)
    before = (git(repo, "rev-parse", "main"), branches(repo), status(repo))
    # refused before the person would be asked: nobody approves a call that cannot run
    asking = supervisor(store, repo, policy={tool: "ask" for tool in WRITERS_ALLOWED})
    await asking.send(helper, WOKEN)
    await asyncio.wait_for(asking.run_until_quiet(root), 60)
    asking.close()
    results = tool_results(db_path, helper)[-len(ATTEMPTS):]
    refusal = no_workspace(helper, f"lace/{helper}", own=True)
    assert [(result["tool_name"], result["is_error"], result["message"]["content"])
            for result in results] == [(call[0], True, refusal) for call in ATTEMPTS]
    assert (git(repo, "rev-parse", "main"), branches(repo), status(repo)) == before
    assert not (repo / "later.txt").exists() and not (repo / "bash.txt").exists()
    assert (repo / "README.md").read_text() == "# r\n"
    assert query(db_path, "SELECT COUNT(*) FROM approvals") == [(0,)]
    assert not Path(folder).exists()  # not made again for the woken helper
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


async def test_a_helper_sharing_the_pruned_place_is_refused_too(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    repo = new_repository(tmp_path / "repo", {"README.md": "# r\n"})
    shared = ("spawn", {"task": "Write sub.txt", "model": "scripted/sub",
                        "isolation": "none"})
    isolated = ("spawn", {"task": "Write sub.txt", "model": "scripted/sub",
                          "isolation": "worktree"})
    runtime, root, helper = await merged_and_pruned(store, models, repo, [
        isolated, shared, ("spawn_await", {"job_ids": "*"})])
    models.on("sub", lambda messages: reply(None, ("file_write", {
        "path": "sub.txt", "content": "sub\n"})) if not tools_called(messages)
        else reply("could not write"))
    before = (git(repo, "rev-parse", "main"), branches(repo), status(repo))
    await runtime.send(helper, WOKEN)
    await asyncio.wait_for(runtime.run_until_quiet(root), 60)
    runtime.close()
    spawned = tool_results(db_path, helper)[-3]
    assert spawned["is_error"] and spawned["message"]["content"] == no_workspace(
        helper, f"lace/{helper}", own=True)
    sub = f"{helper}.1"
    written, = [result for result in tool_results(db_path, sub)
                   if result["tool_name"] == "file_write"]
    assert written["is_error"] and written["message"]["content"] == no_workspace(
        helper, f"lace/{helper}", own=False)
    assert (git(repo, "rev-parse", "main"), branches(repo), status(repo)) == before
    assert not (repo / "sub.txt").exists()
    assert query(db_path, "SELECT thread_id FROM worktrees ORDER BY thread_id") == [(helper,)]


async def test_a_new_task_for_it_is_completed_with_what_it_has_and_says_so(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    repo = new_repository(tmp_path / "repo", {"README.md": "# r\n"})
    runtime, root, helper = await merged_and_pruned(store, models, repo, [
        ATTEMPTS[0], "task_complete"])
    before = (git(repo, "rev-parse", "main"), branches(repo), status(repo))
    created = await runtime.act_as_human(root, "task_create", {"tasks": [{
        "title": "Write later.txt", "prompt": WOKEN, "assigned_to": helper}]})
    assert not created.is_error, created.text
    await asyncio.wait_for(runtime.run_until_quiet(root), 60)
    runtime.close()
    wrote, completed = tool_results(db_path, helper)[-2:]
    assert (wrote["is_error"], wrote["message"]["content"]) == (
        True, no_workspace(helper, f"lace/{helper}", own=True))
    assert not completed["is_error"], completed
    (task_id,), = query(db_path, "SELECT id FROM tasks WHERE title = 'Write later.txt'")
    assert query(db_path, "SELECT status FROM tasks WHERE id = ?", task_id) == [("completed",)]
    (note,), = query(db_path, "SELECT content FROM task_notes WHERE task_id = ? "
                              "ORDER BY id DESC LIMIT 1", task_id)
    assert note == f"nothing: no workspace\n\n{pruned_work(f'lace/{helper}')}"
    assert (git(repo, "rev-parse", "main"), branches(repo), status(repo)) == before
    assert not (repo / "later.txt").exists()


async def test_its_hooks_run_in_the_runtimes_workspace_and_its_turn_goes_on(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    """Hooks are the person's commands: for a helper with no workspace they run where they
    run for a helper without a worktree, and its turn is not broken by the missing one."""
    repo = new_repository(tmp_path / "repo", {"README.md": "# r\n"})
    runtime, root, helper = await merged_and_pruned(store, models, repo, ATTEMPTS[:1])
    runtime.close()
    log = tmp_path / "hooks.jsonl"
    where = logger(tmp_path, log)
    hooked, _events = hooked_runtime(
        store, repo, {event: [hook(where)] for event in ("SubagentStart", "SubagentStop")},
        policy=WRITERS_ALLOWED, workspace_settings=WorkspaceSettings(isolation="worktree"))
    await hooked.send(helper, WOKEN)
    await asyncio.wait_for(hooked.run_until_quiet(root), 60)
    hooked.close()
    assert [(entry["hook_event_name"], entry["cwd"]) for entry in logged(log)
            if entry["agent_id"] == helper] == [("SubagentStart", str(repo.resolve())),
                                                ("SubagentStop", str(repo.resolve()))]
    written = tool_results(db_path, helper)[-1]
    assert written["message"]["content"] == no_workspace(helper, f"lace/{helper}", own=True)
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", helper) == [
        ("idle",)]
    assert not (repo / "later.txt").exists()
