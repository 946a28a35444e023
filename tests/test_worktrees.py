"""Helpers in their own git worktrees, in real repositories: two helpers edit the same file at
once, each on its branch, and the main tree is untouched; the creator merges one cleanly and
the other conflicts without changing anything; a spawn over uncommitted changes or outside a
repository is a tool error (or copies the changes, by configuration)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lace.llm.types import ScriptedReply
from lace.runtime import Runtime
from lace.store import Store
from tests.conftest import query
from tests.gitrepos import git, new_repository, status
from tests.scripted import ScriptedModels, assigned_task, reply, text, tools_called
from tests.worktree_sessions import delegating_root, supervisor

pytestmark = pytest.mark.both_engines

def editor(content: str, mine: asyncio.Event, other: asyncio.Event) -> Any:
    """Writes shared.txt, waits until the other editor has written too (so both edit at
    once), then completes its task."""

    async def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        if "file_write" not in done:
            return reply(None, ("file_write", {"path": "shared.txt", "content": content}))
        if "task_complete" not in done:
            mine.set()
            await other.wait()
            return reply(None, ("task_complete", {"task_id": task_id,
                                                  "message": f"wrote {content.strip()}"}))
        return reply("finished")

    return handle


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return new_repository(tmp_path / "repo", {"shared.txt": "base\n", "README.md": "# r\n"})


async def run_session(runtime: Runtime, models: ScriptedModels, prompt: str) -> str:
    """Run a session with the scripted root until quiet; its final answer."""
    root = await runtime.start_session(prompt, "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    return root.id


def final_answer(db_path: Path, thread_id: str) -> str:
    (answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                "WHERE thread_id = ? AND type = 'agent_message' "
                                "ORDER BY id DESC LIMIT 1", thread_id)
    return str(answer)


async def test_two_helpers_edit_one_file_at_once_each_on_its_branch(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path,
        isolated_home: Path) -> None:
    main_before = git(repo, "rev-parse", "main")
    a_wrote, b_wrote = asyncio.Event(), asyncio.Event()
    models.on("root", delegating_root())
    models.on("helper_a", editor("from A\n", a_wrote, b_wrote))
    models.on("helper_b", editor("from B\n", b_wrote, a_wrote))
    runtime = supervisor(store, repo)
    root = await run_session(runtime, models, "edit")
    runtime.close()
    first, second = f"{root}.1", f"{root}.2"
    assert git(repo, "show", f"lace/{first}:shared.txt") == "from A"
    assert git(repo, "show", f"lace/{second}:shared.txt") == "from B"
    assert (repo / "shared.txt").read_text() == "base\n"
    assert git(repo, "rev-parse", "main") == main_before
    assert status(repo) == ""
    for helper, title in ((first, "Edit as helper_a"), (second, "Edit as helper_b")):
        assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", f"lace/{helper}") == \
            f"lace <{helper}>|lace <{helper}>|{title}"
        assert git(repo, "rev-parse", f"lace/{helper}~1") == main_before
    rows = query(db_path, "SELECT thread_id, folder, branch, base_branch, base_commit, status "
                          "FROM worktrees ORDER BY thread_id")
    assert [(row[0], row[2], row[3], row[4], row[5]) for row in rows] == [
        (first, f"lace/{first}", "main", main_before, "active"),
        (second, f"lace/{second}", "main", main_before, "active")]
    for row in rows:
        assert Path(row[1]).is_relative_to(isolated_home.resolve() / "worktrees")
        assert (Path(row[1]) / "shared.txt").read_text() == ("from A\n" if row[0] == first
                                                              else "from B\n")
    answer = final_answer(db_path, root)
    for helper in (first, second):
        commit = git(repo, "rev-parse", f"lace/{helper}")
        assert f"Worktree: branch lace/{helper} at commit {commit[:12]}, not merged" in answer
    assert answer.count("shared.txt | 2 +-") == 2


async def test_the_creator_merges_one_branch_and_the_other_conflicts_changing_nothing(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path) -> None:
    a_wrote, b_wrote = asyncio.Event(), asyncio.Event()
    models.on("helper_a", editor("from A\n", a_wrote, b_wrote))
    models.on("helper_b", editor("from B\n", b_wrote, a_wrote))
    runtime = supervisor(store, repo)
    root_ids: list[str] = []

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        root_id = root_ids[0]
        return delegating_root(("worktree_merge", {"thread_id": f"{root_id}.1"}),
                               ("worktree_merge", {"thread_id": f"{root_id}.2"}))(messages)

    models.on("root", root)
    session = await runtime.start_session("edit", "scripted/root")
    root_ids.append(session.id)
    await asyncio.wait_for(runtime.run_until_quiet(session.id), 60)
    runtime.close()
    first, second = f"{session.id}.1", f"{session.id}.2"
    second_head = git(repo, "rev-parse", f"lace/{second}")
    merged_head = git(repo, "rev-parse", "main")
    results = final_answer(db_path, session.id).split("\n=====\n")
    assert results[1] == (f"lace/{first} merged into main: commit {merged_head[:12]}.")
    assert results[2].startswith(f"Merging lace/{second} into main conflicts in shared.txt. "
                                 "Nothing was changed")
    assert git(repo, "log", "-1", "--format=%P", "main").split() == [
        git(repo, "rev-parse", "main~1"), git(repo, "rev-parse", f"lace/{first}")]
    assert git(repo, "log", "-1", "--format=%an <%ae>", "main") == f"lace <{session.id}>"
    assert (repo / "shared.txt").read_text() == "from A\n"
    assert status(repo) == ""
    assert git(repo, "rev-parse", f"lace/{second}") == second_head
    assert query(db_path, "SELECT thread_id, status, merged_commit FROM worktrees "
                          "ORDER BY thread_id") == [(first, "merged", merged_head),
                                                    (second, "active", None)]


def spawner(**arguments: Any) -> Any:
    """Spawns one helper with `arguments`, then answers with the spawn's result."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "spawn" not in tools_called(messages):
            return reply(None, ("spawn", {"task": "Edit README.md", "model": "scripted/helper",
                                          **arguments}))
        return reply(text(messages[-1]))

    return handle


def readme_writer(messages: list[dict[str, Any]]) -> ScriptedReply:
    if "file_write" not in tools_called(messages):
        return reply(None, ("file_write", {"path": "README.md", "content": "# edited\n"}))
    return reply("README edited")


async def test_a_spawn_over_uncommitted_changes_is_a_tool_error_that_writes_nothing(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path) -> None:
    (repo / "shared.txt").write_text("half done\n")
    models.on("root", spawner())
    runtime = supervisor(store, repo)
    root = await run_session(runtime, models, "spawn")
    runtime.close()
    answer = final_answer(db_path, root)
    assert answer.startswith(f"{repo} has uncommitted changes (shared.txt) that a helper in "
                             "its own worktree would not see. Commit them first")
    assert query(db_path, "SELECT COUNT(*) FROM threads") == [(1,)]
    assert query(db_path, "SELECT COUNT(*) FROM worktrees") == [(0,)]
    assert query(db_path, "SELECT COUNT(*) FROM tasks") == [(0,)]


async def test_copy_puts_the_uncommitted_changes_on_the_helpers_branch_only(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path) -> None:
    (repo / "shared.txt").write_text("half done\n")
    (repo / "new.txt").write_text("untracked\n")
    before = (status(repo), git(repo, "rev-parse", "main"), git(repo, "ls-files", "--stage"))
    models.on("root", spawner())
    models.on("helper", readme_writer)
    runtime = supervisor(store, repo, uncommitted="copy")
    root = await run_session(runtime, models, "spawn")
    runtime.close()
    assert (status(repo), git(repo, "rev-parse", "main"), git(repo, "ls-files", "--stage")) \
        == before
    branch = f"lace/{root}.1"
    assert git(repo, "show", f"{branch}:shared.txt") == "half done"
    assert git(repo, "show", f"{branch}:new.txt") == "untracked"
    assert git(repo, "show", f"{branch}:README.md") == "# edited"
    assert git(repo, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "Edit README.md", "Uncommitted changes of main, copied for a helper"]


async def test_outside_a_repository_or_detached_the_spawn_says_what_to_do(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    models.on("root", spawner())
    runtime = supervisor(store, plain)
    root = await run_session(runtime, models, "spawn")
    assert final_answer(db_path, root) == (
        f"The workspace {plain} is not in a git repository, so a helper cannot get a worktree "
        'of it. Run `git init` and commit there first, or spawn with isolation "none".')
    runtime.close()
    detached = new_repository(tmp_path / "detached")
    git(detached, "checkout", "--quiet", "--detach")
    runtime = supervisor(store, detached)
    root = await run_session(runtime, models, "spawn")
    runtime.close()
    assert "has a detached HEAD" in final_answer(db_path, root)
    assert query(db_path, "SELECT COUNT(*) FROM worktrees") == [(0,)]


async def test_isolation_none_on_the_spawn_overrides_the_setting(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path) -> None:
    (repo / "shared.txt").write_text("half done\n")  # would refuse a worktree
    models.on("root", spawner(isolation="none"))
    models.on("helper", readme_writer)
    runtime = supervisor(store, repo)
    await run_session(runtime, models, "spawn")
    runtime.close()
    assert (repo / "README.md").read_text() == "# edited\n"
    assert query(db_path, "SELECT COUNT(*) FROM worktrees") == [(0,)]


@pytest.mark.parametrize("writes_first", [True, False], ids=["wrote-first", "spawned-first"])
async def test_a_helpers_helper_branches_from_its_branch_and_merges_back_into_it(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path,
        writes_first: bool) -> None:
    """The lead's helper starts from the lead's work so far: committed on the lead's branch
    first when it wrote before spawning, the lead's starting commit when it wrote nothing."""
    session: list[str] = []
    main_before = git(repo, "rev-parse", "main")

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = tools_called(messages)
        if "delegate" not in done:
            return reply(None, ("delegate", {"tasks": [{
                "title": "Lead the work", "prompt": "Write lead.txt, have sub.txt written.",
                "expected_response": "done", "assigned_to": "new:scripted/lead"}]}))
        if "worktree_merge" not in done:
            return reply(None, ("worktree_merge", {"thread_id": f"{session[0]}.1"}))
        return reply(text(messages[-1]))

    def lead(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        write = ("file_write", {"path": "lead.txt", "content": "lead\n"})
        spawn = ("spawn", {"task": "Write sub.txt", "model": "scripted/sub"})
        steps = [*([write, spawn] if writes_first else [spawn, write]),
                 ("spawn_await", {"job_ids": "*"}),
                 ("worktree_merge", {"thread_id": f"{session[0]}.1.1"}),
                 ("task_complete", {"task_id": task_id, "message": "lead and sub written"})]
        for name, arguments in steps:
            if name not in done:
                return reply(None, (name, arguments))
        return reply("finished")

    def sub(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "file_write" not in tools_called(messages):
            return reply(None, ("file_write", {"path": "sub.txt", "content": "sub\n"}))
        return reply("sub.txt written")

    models.on("root", root)
    models.on("lead", lead)
    models.on("sub", sub)
    runtime = supervisor(store, repo)
    started = await runtime.start_session("nested", "scripted/root")
    session.append(started.id)
    await asyncio.wait_for(runtime.run_until_quiet(started.id), 60)
    runtime.close()
    lead_id, sub_id = f"{started.id}.1", f"{started.id}.1.1"
    assert query(db_path, "SELECT thread_id, base_branch FROM worktrees ORDER BY thread_id") \
        == [(lead_id, "main"), (sub_id, f"lace/{lead_id}")]
    start = git(repo, "rev-parse", f"lace/{sub_id}~1")
    if writes_first:
        assert git(repo, "log", "-1", "--format=%s", start) == (
            f"Work in progress of {lead_id}, committed before it started a helper")
        assert git(repo, "show", f"{start}:lead.txt") == "lead"
    else:
        assert start == main_before
    lead_results = [text(m) for m in models.calls_of("lead")[-1] if m["role"] == "tool"]
    assert lead_results[3].startswith(f"lace/{sub_id} merged into lace/{lead_id}: commit ")
    assert final_answer(db_path, started.id).startswith(f"lace/{lead_id} merged into main")
    assert (repo / "lead.txt").read_text() == "lead\n" and (repo / "sub.txt").read_text() == \
        "sub\n"
    assert status(repo) == ""


async def test_hostile_text_in_a_result_is_committed_as_text(
        store: Store, models: ScriptedModels, repo: Path, db_path: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = f"done\0 $(touch {marker}) `touch {marker}` <script>x</script>\n" + "z" * 40_000

    def helper(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "file_write" not in tools_called(messages):
            return reply(None, ("file_write", {"path": "-rf --force.txt", "content": "x\n"}))
        return reply(hostile)

    models.on("root", spawner(task="Line one; $(id)\nsecond line"))
    models.on("helper", helper)
    runtime = supervisor(store, repo)
    root = await run_session(runtime, models, "spawn")
    runtime.close()
    branch = f"lace/{root}.1"
    message = git(repo, "log", "-1", "--format=%B", branch)
    assert message.splitlines()[0] == "Line one; $(id)"
    assert message.splitlines()[2] == (f"done $(touch {marker}) `touch {marker}` "
                                       "<script>x</script>")
    assert len(message) > 40_000 and not marker.exists()
    assert git(repo, "show", f"{branch}:-rf --force.txt") == "x"
