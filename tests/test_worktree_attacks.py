"""A hostile helper in its own worktree: symlinks it made with bash to the main tree, to a
sibling's worktree and to `.git`, `..` paths, absolute paths and `.git` itself are all refused
by its file tools; `bash` runs in its worktree; it cannot merge a sibling's branch. The main
tree, the sibling's worktree and git's files are byte for byte as they were."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from lace.llm.types import ScriptedReply
from lace.store import Store
from lace.tools.worktrees import worktree_folders
from tests.conftest import query
from tests.gitrepos import git, new_repository, status
from tests.scripted import ScriptedModels, assigned_task, reply, tools_called
from tests.worktree_sessions import delegating_root, supervisor

OWNED = "owned\n"
ATTACKS: list[tuple[str, dict[str, str]]] = [
    ("file_write", {"path": "main_link/README.md", "content": OWNED}),
    ("file_edit", {"path": "main_link/shared.txt", "old_text": "base", "new_text": "owned"}),
    ("file_read", {"path": "main_link/shared.txt"}),
    ("file_list", {"path": "main_link"}),
    ("file_write", {"path": "other_link/victim.txt", "content": OWNED}),
    ("file_read", {"path": "other_link/victim.txt"}),
    ("file_search", {"pattern": "mine", "path": "other_link"}),
    ("file_write", {"path": "../{sibling}/victim.txt", "content": OWNED}),
    ("file_write", {"path": "sub/../../{sibling}/victim.txt", "content": OWNED}),
    ("file_write", {"path": "up_link/{sibling}/victim.txt", "content": OWNED}),
    ("file_write", {"path": "{repo}/README.md", "content": OWNED}),
    ("file_write", {"path": ".git", "content": "gitdir: /tmp\n"}),
    ("file_write", {"path": ".GIT", "content": "gitdir: /tmp\n"}),
    ("file_write", {"path": "git_link/config", "content": "[core]\n"}),
    ("file_write", {"path": "git_link/hooks/post-commit", "content": "#!/bin/sh\n"}),
]
"""Each is refused; `{repo}` is the main tree, `{sibling}` the other helper's folder name."""
JAILED = ("leaves the workspace", "is absolute", "is protected: it belongs to git")


def tree_bytes(root: Path, *, skip: str = ".git") -> dict[str, bytes]:
    """Every regular file under `root` but those in `skip` (symlinks not followed)."""
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file() and not path.is_symlink() and
            path.relative_to(root).parts[0] != skip}


def tool_results(db_path: Path, thread_id: str) -> list[dict[str, Any]]:
    return [json.loads(data) for (data,) in query(
        db_path, "SELECT data FROM events WHERE thread_id = ? AND type = 'tool_result' "
                 "ORDER BY id", thread_id)]


async def test_a_helper_cannot_reach_the_main_tree_a_sibling_or_git(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path) -> None:
    repo = new_repository(tmp_path / "repo", {"README.md": "# main\n", "shared.txt": "base\n"})
    folders = worktree_folders(repo)
    victim_wrote = asyncio.Event()
    session: list[str] = []

    def victim(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        if "file_write" not in done:
            return reply(None, ("file_write", {"path": "victim.txt", "content": "mine\n"}))
        if "worktree_merge" not in done:
            victim_wrote.set()
            return reply(None, ("worktree_merge", {"thread_id": f"{session[0]}.1"}))
        if "task_complete" not in done:
            return reply(None, ("task_complete", {"task_id": task_id, "message": "done"}))
        return reply("finished")

    async def attacker(messages: list[dict[str, Any]]) -> ScriptedReply:
        await victim_wrote.wait()
        task_id, done = assigned_task(messages), tools_called(messages)
        sibling = folders / f"{session[0]}.2"
        if "bash" not in done:
            return reply(None, ("bash", {"command": (
                f"pwd; ln -s '{repo}' main_link; ln -s '{sibling}' other_link; "
                f"ln -s '{repo}/.git' git_link; ln -s .. up_link")}))
        attempts = len(done) - 1
        if attempts < len(ATTACKS):
            tool, arguments = ATTACKS[attempts]
            filled = {key: value.format(repo=repo, sibling=sibling.name)
                      for key, value in arguments.items()}
            return reply(None, (tool, filled))
        if "task_complete" not in done:
            return reply(None, ("task_complete", {"task_id": task_id, "message": "tried"}))
        return reply("finished")

    models.on("root", delegating_root())
    models.on("helper_a", attacker)
    models.on("helper_b", victim)
    before_main, before_git = tree_bytes(repo), tree_bytes(repo / ".git")
    runtime = supervisor(store, repo)
    root = await runtime.start_session("attack", "scripted/root")
    session.append(root.id)
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    runtime.close()
    attacker_id, victim_id = f"{root.id}.1", f"{root.id}.2"
    results = tool_results(db_path, attacker_id)
    pwd = results[0]["message"]["content"].splitlines()[0]
    assert pwd == str((folders / attacker_id).resolve())
    for (tool, _), result in zip(ATTACKS, results[1:], strict=False):
        said = result["message"]["content"]
        assert result["is_error"] and any(reason in said for reason in JAILED), (tool, said)
    assert len(results) == 1 + len(ATTACKS) + 1  # bash, every attack, task_complete
    assert tree_bytes(repo) == before_main
    git_now = tree_bytes(repo / ".git")  # lace only adds: branches, worktrees, objects
    assert {name: git_now.get(name) for name in before_git} == before_git
    assert status(repo) == ""
    assert (folders / victim_id / "victim.txt").read_text() == "mine\n"
    assert git(repo, "show", f"lace/{victim_id}:victim.txt") == "mine"
    merge_try = next(result for result in tool_results(db_path, victim_id)
                     if result["tool_name"] == "worktree_merge")
    assert merge_try["is_error"] and merge_try["message"]["content"].startswith(
        f"Only {attacker_id}'s creator ({root.id}) or a person may merge")
    assert query(db_path, "SELECT status FROM worktrees WHERE thread_id = ?", attacker_id) == [
        ("active",)]
