"""Pruning decides in its write: a helper a person resumes while `lace worktrees prune` goes
through the list keeps its worktree (even with --force), a stopped helper whose worktree was
pruned cannot be resumed, a helper below a done one that still works in its worktree keeps it,
and when git cannot remove a worktree its row stays as it was."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lace.core.worktrees import WorktreeOrigin, not_resumable
from lace.llm.types import ScriptedReply
from lace.runtime.board import Board
from lace.runtime.person import resume_stopped
from lace.runtime.worktrees import Pruned, prune_worktrees
from lace.store import Store
from tests.conftest import new_session, query, run_cli, spawn_child
from tests.gitrepos import branches, git, new_repository
from tests.scripted import ScriptedModels, assigned_task, reply, tools_called
from tests.worktree_sessions import delegating_root, supervisor

pytestmark = pytest.mark.both_engines


def writer_until_stopped(wrote: asyncio.Event, never: asyncio.Event) -> Any:
    """Writes draft.txt in its worktree, then works on (a model call that does not end) until
    a person stops it."""

    async def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "file_write" not in tools_called(messages):
            return reply(None, ("file_write", {"path": "draft.txt", "content": "draft\n"}))
        wrote.set()
        await never.wait()
        return reply("unreachable")

    return handle


async def two_stopped_helpers(store: Store, models: ScriptedModels, repo: Path) -> list[str]:
    """Two helpers, each with a draft in its worktree, stopped by the person mid-task."""
    never = asyncio.Event()
    wrote = {name: asyncio.Event() for name in ("helper_a", "helper_b")}
    models.on("root", delegating_root())
    for name, event in wrote.items():
        models.on(name, writer_until_stopped(event, never))
    runtime = supervisor(store, repo)
    root = await runtime.start_session("drafts", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in wrote.values())), 60)
    helpers = [f"{root.id}.1", f"{root.id}.2"]
    for helper in helpers:
        await runtime.stop_agent(helper, "enough (by human)", by_person=True)
    await asyncio.wait_for(run, 60)
    runtime.close()
    return helpers


def folders(db_path: Path) -> dict[str, str]:
    return dict(query(db_path, "SELECT thread_id, folder FROM worktrees"))


async def test_a_helper_resumed_while_prune_runs_keeps_its_worktree(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = new_repository(tmp_path / "repo")
    first, second = await two_stopped_helpers(store, models, repo)
    where = folders(db_path)
    board = Board(store, workspace=repo)
    pruning = prune_worktrees(board, force=True)
    done = await asyncio.to_thread(next, pruning)
    assert (done.worktree.thread_id, done.refusal) == (first, None)
    # between two worktrees of one prune, the person resumes the second helper
    await asyncio.to_thread(resume_stopped, board, second)
    rest: list[Pruned] = await asyncio.to_thread(list, pruning)
    assert [(kept.worktree.thread_id, kept.refusal) for kept in rest] == [
        (second, f"its helper is still working (lace stop {second} first)")]
    assert (Path(where[second]) / "draft.txt").read_text() == "draft\n"
    assert not Path(where[first]).exists()
    assert branches(repo) == [f"lace/{second}", "main"]
    assert query(db_path, "SELECT thread_id, status FROM worktrees ORDER BY thread_id") == [
        (first, "pruned"), (second, "active")]
    code, out, err = run_cli(capsys, "resume", first, "--db", str(db_path))
    assert (code, out) == (2, "")
    assert err == f"lace: error: {not_resumable(first, first, f'lace/{first}')}\n"
    assert query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?", first) == [
        ("stopped",)]


async def test_git_failing_to_remove_a_worktree_leaves_its_row_as_it_was(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    repo = new_repository(tmp_path / "repo")
    first, second = await two_stopped_helpers(store, models, repo)
    where = folders(db_path)
    git(repo, "worktree", "lock", "--reason", "the person's", where[first])
    board = Board(store, workspace=repo)
    pruned = await asyncio.to_thread(lambda: list(prune_worktrees(board, force=True)))
    assert [done.worktree.thread_id for done in pruned] == [first, second]
    refusal = pruned[0].refusal
    assert refusal is not None and refusal.startswith(
        "git could not remove it (git worktree failed in ") and "unlock first" in refusal
    assert refusal.endswith("); it is kept, active as before.")
    assert pruned[1].refusal is None
    assert (Path(where[first]) / "draft.txt").read_text() == "draft\n"
    assert query(db_path, "SELECT thread_id, status FROM worktrees ORDER BY thread_id") == [
        (first, "active"), (second, "pruned")]
    assert f"lace/{first}" in branches(repo)


async def test_a_done_helpers_worktree_is_kept_while_a_helper_sharing_it_works(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = new_repository(tmp_path / "repo")
    lead_done, sub_working, never = asyncio.Event(), asyncio.Event(), asyncio.Event()

    def lead(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = tools_called(messages)
        if "spawn" not in done:
            return reply(None, ("spawn", {"task": "Draft it", "model": "scripted/sub",
                                          "isolation": "none"}))
        if "task_complete" not in done:
            return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                                  "message": "the sub drafts it"}))
        return reply("finished")

    async def sub(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "file_write" not in tools_called(messages):
            return reply(None, ("file_write", {"path": "draft.txt", "content": "draft\n"}))
        await lead_done.wait()
        sub_working.set()
        await never.wait()  # mid-task until stopped
        return reply("unreachable")

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "delegate" not in tools_called(messages):
            return reply(None, ("delegate", {"tasks": [{
                "title": "Lead it", "prompt": "Have it drafted.", "expected_response": "done",
                "assigned_to": "new:scripted/lead"}]}))
        lead_done.set()  # the delegate returned: the lead completed its task
        return reply("delegated")

    models.on("root", root)
    models.on("lead", lead)
    models.on("sub", sub)
    runtime = supervisor(store, repo)
    root = await runtime.start_session("draft", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    await asyncio.wait_for(sub_working.wait(), 60)
    lead_id, sub_id = f"{root.id}.1", f"{root.id}.1.1"
    assert query(db_path, "SELECT status FROM tasks WHERE assigned_to = ?", lead_id) == [
        ("completed",)]
    folder = Path(folders(db_path)[lead_id])
    assert (folder / "draft.txt").read_text() == "draft\n"
    assert run_cli(capsys, "worktrees", "prune", "--force", "--db", str(db_path))[:2] == (
        0, f"kept {lead_id}: its helper is still working (lace stop {lead_id} first)\n")
    assert (folder / "draft.txt").read_text() == "draft\n"
    await runtime.stop_agent(sub_id, "enough", by_person=True)
    await asyncio.wait_for(run, 60)
    runtime.close()
    assert run_cli(capsys, "worktrees", "prune", "--force", "--db", str(db_path))[:2] == (
        0, f"pruned {lead_id}: {folder} and lace/{lead_id} are gone\n")
    assert not folder.exists() and branches(repo) == ["main"]


def test_the_worktree_a_thread_works_in_is_its_own_else_its_nearest_ancestors(
        store: Store) -> None:
    root = new_session(store).id
    lead = spawn_child(store, root)
    sub, other = spawn_child(store, lead), spawn_child(store, root)
    for _ in range(8):  # `.10` is no helper of `.1`
        tenth = spawn_child(store, root)
    leaf = spawn_child(store, sub)
    origin = WorktreeOrigin(repository="/r", base_branch="main", base_commit="0" * 40,
                            folders="/w")
    with store.transaction() as tx:
        tx.worktrees.insert(lead, origin)
        tx.worktrees.insert(sub, origin)
        tx.worktrees.set_status(sub, "pruned")
    with store.reading() as tx:
        nearest = {thread: getattr(tx.worktrees.nearest(thread), "thread_id", None)
                   for thread in (root, lead, sub, leaf, other, tenth)}
    assert tenth == f"{root}.10" and leaf == f"{sub}.1"
    assert nearest == {root: None, lead: lead, sub: sub, leaf: sub, other: None, tenth: None}
