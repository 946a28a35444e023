"""A person's worktree commands on real repositories: `lace worktrees`, `lace merge` (merge
and squash, into a checked-out branch or one that is not, refused over a dirty target or on a
conflict, changing nothing), and `lace worktrees prune`, which never removes unmerged work
without --force."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lace.llm.types import ScriptedReply
from lace.store import Store
from tests.conftest import query, run_cli
from tests.gitrepos import branches, git, new_repository, status
from tests.scripted import ScriptedModels, assigned_task, reply, tools_called
from tests.worktree_sessions import delegating_root, supervisor


def file_writer(path: str, content: str) -> Any:
    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        task_id, done = assigned_task(messages), tools_called(messages)
        if "file_write" not in done:
            return reply(None, ("file_write", {"path": path, "content": content}))
        if "task_complete" not in done:
            return reply(None, ("task_complete", {"task_id": task_id, "message": f"{path}"}))
        return reply("finished")

    return handle


@pytest.fixture
def helpers(store: Store, models: ScriptedModels, tmp_path: Path,
            db_path: Path) -> tuple[Path, str, str]:
    """A repository and two completed helpers, each on its branch: the first wrote a.txt,
    the second b.txt."""
    repo = new_repository(tmp_path / "repo", {"README.md": "# r\n"})
    models.on("root", delegating_root())
    models.on("helper_a", file_writer("a.txt", "A\n"))
    models.on("helper_b", file_writer("b.txt", "B\n"))

    async def run() -> str:
        runtime = supervisor(store, repo)
        root = await runtime.start_session("two files", "scripted/root")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
        runtime.close()
        return root.id

    root = asyncio.run(run())
    return repo, f"{root}.1", f"{root}.2"


def lace(capsys: pytest.CaptureFixture[str], db_path: Path, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv, "--db", str(db_path))


def test_list_then_merge_one_and_squash_the_other(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, first, second = helpers
    code, out, _ = lace(capsys, db_path, "worktrees")
    assert code == 0
    lines = out.splitlines()
    assert [line.split("  ")[:3] for line in lines] == [
        [first, "done", f"lace/{first} → main"], [second, "done", f"lace/{second} → main"]]
    assert all("(1 unmerged commit(s))" in line for line in lines)
    start = git(repo, "rev-parse", "main")
    code, out, err = lace(capsys, db_path, "merge", first)
    assert (code, err) == (0, "")
    merged = git(repo, "rev-parse", "main")
    assert out == f"lace/{first} merged into main: commit {merged[:12]}.\n"
    code, out, err = lace(capsys, db_path, "merge", second, "--squash")
    assert (code, err) == (0, "")
    squashed = git(repo, "rev-parse", "main")
    assert out == f"lace/{second} squashed into one commit on main: commit {squashed[:12]}.\n"
    assert git(repo, "log", "-1", "--format=%P", squashed) == merged
    assert git(repo, "log", "-1", "--format=%P", merged).split() == [
        start, git(repo, "rev-parse", f"lace/{first}")]
    assert (repo / "a.txt").read_text() == "A\n" and (repo / "b.txt").read_text() == "B\n"
    assert status(repo) == ""
    code, _, err = lace(capsys, db_path, "merge", first)
    assert code == 1 and err == f"lace: lace/{first} is merged already (nothing new on it " \
        "since).\n"
    code, out, _ = lace(capsys, db_path, "worktrees")
    assert [line.split("  ")[1] for line in out.splitlines()] == ["merged", "merged"]


def test_a_dirty_target_or_a_conflict_changes_nothing(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, first, _ = helpers
    (repo / "README.md").write_text("# my own edit\n")
    before = git(repo, "rev-parse", "main")
    code, out, err = lace(capsys, db_path, "merge", first)
    assert (code, out) == (1, "")
    assert err == (f"lace: main is checked out in {repo} with uncommitted changes (README.md); "
                   "commit or stash them, then merge again. Nothing was changed.\n")
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "README.md").read_text() == "# my own edit\n"
    git(repo, "checkout", "--quiet", "README.md")
    # a helper's commit conflicting with main: main moved on in the same line
    (repo / "a.txt").write_text("main's own a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "--quiet", "-m", "main writes a.txt too")
    moved = git(repo, "rev-parse", "main")
    helper_head = git(repo, "rev-parse", f"lace/{first}")
    code, out, err = lace(capsys, db_path, "merge", first)
    assert (code, out) == (1, "")
    assert err.startswith(f"lace: Merging lace/{first} into main conflicts in a.txt. "
                          "Nothing was changed")
    assert git(repo, "rev-parse", "main") == moved
    assert git(repo, "rev-parse", f"lace/{first}") == helper_head
    assert (repo / "a.txt").read_text() == "main's own a\n"
    assert status(repo) == ""
    assert query(db_path, "SELECT status FROM worktrees WHERE thread_id = ?", first) == [
        ("active",)]


def test_a_target_not_checked_out_moves_without_touching_any_tree(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, first, _ = helpers
    git(repo, "checkout", "--quiet", "-b", "elsewhere")
    code, _, err = lace(capsys, db_path, "merge", first)
    assert (code, err) == (0, "")
    assert git(repo, "show", "main:a.txt") == "A"
    assert not (repo / "a.txt").exists()
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "elsewhere"
    assert status(repo) == ""


def test_prune_removes_the_merged_and_keeps_unmerged_work_unless_forced(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, first, second = helpers
    folders = dict(query(db_path, "SELECT thread_id, folder FROM worktrees"))
    assert lace(capsys, db_path, "merge", first)[0] == 0
    code, out, _ = lace(capsys, db_path, "worktrees", "prune")
    assert code == 0
    assert out.splitlines() == [
        f"pruned {first}: {folders[first]} and lace/{first} are gone",
        f"kept {second}: 1 unmerged commit(s) on lace/{second} (lace merge {second}, or "
        "--force to delete them)"]
    assert not Path(folders[first]).exists() and Path(folders[second]).is_dir()
    assert branches(repo) == [f"lace/{second}", "main"]
    (Path(folders[second]) / "b.txt").write_text("changed after completion\n")
    code, out, _ = lace(capsys, db_path, "worktrees", "prune")
    assert out == f"kept {second}: 1 uncommitted file(s) in {folders[second]}\n"
    code, out, _ = lace(capsys, db_path, "worktrees", "prune", "--force")
    assert out == f"pruned {second}: {folders[second]} and lace/{second} are gone\n"
    assert branches(repo) == ["main"] and not Path(folders[second]).exists()
    assert query(db_path, "SELECT thread_id, status FROM worktrees ORDER BY thread_id") == [
        (first, "pruned"), (second, "pruned")]
    code, out, _ = lace(capsys, db_path, "worktrees")
    assert out.startswith("No worktrees.")
    assert lace(capsys, db_path, "worktrees", "--all")[1].count("pruned") == 2


def test_bad_thread_ids_get_one_line(helpers: tuple[Path, str, str], db_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = helpers
    code, _, err = lace(capsys, db_path, "merge", "lace_20990101_zzzzzz.9")
    assert (code, err) == (1, "lace: 'lace_20990101_zzzzzz.9' has no worktree; `lace "
                              "worktrees` lists them.\n")
    code, _, err = lace(capsys, db_path, "merge", "../etc\n--force")
    assert code == 2 and err.count("\n") == 1 and "is not a thread id" in err
    root = first.rsplit(".", 1)[0]
    code, _, err = lace(capsys, db_path, "merge", root)
    assert (code, err) == (1, f"lace: {root!r} has no worktree; `lace worktrees` lists "
                              "them.\n")


def test_work_added_after_a_merge_is_unmerged_again(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, first, _ = helpers
    (folder,), = query(db_path, "SELECT folder FROM worktrees WHERE thread_id = ?", first)
    assert lace(capsys, db_path, "merge", first, "--squash")[0] == 0
    (Path(folder) / "later.txt").write_text("later\n")
    git(Path(folder), "add", "later.txt")
    git(Path(folder), "commit", "--quiet", "-m", "more work after the merge")
    code, out, _ = lace(capsys, db_path, "worktrees")
    assert f"{first}  merged  lace/{first} → main  (1 unmerged commit(s))" in out
    code, out, _ = lace(capsys, db_path, "worktrees", "prune")
    assert f"kept {first}: 1 unmerged commit(s) on lace/{first}" in out
    assert Path(folder, "later.txt").exists()
    code, out, err = lace(capsys, db_path, "merge", first)
    assert (code, err) == (0, ""), err
    assert git(repo, "show", "main:later.txt") == "later"


def test_a_person_assigning_new_agents_gets_worktrees_from_the_folder_they_are_in(
        store: Store, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import new_session, snapshot

    repo = new_repository(tmp_path / "repo")
    config = tmp_path / "lace-config.toml"
    config.write_text('[workspace]\nisolation = "worktree"\n')
    monkeypatch.setenv("LACE_CONFIG", str(config))
    monkeypatch.chdir(repo)
    session = new_session(store)
    code, _, err = lace(capsys, db_path, "task", "add", "Edit the README",
                        "--assign", "new:scripted/helper", "--session", session.id)
    assert code == 0 and err.startswith("lace: no lace process runs this board"), err
    assert query(db_path, "SELECT thread_id, repository, base_branch, status FROM worktrees") \
        == [(f"{session.id}.1", str(repo), "main", "active")]
    (repo / "README.md").write_text("dirty\n")
    before = snapshot(db_path)
    code, _, err = lace(capsys, db_path, "task", "add", "Edit it again",
                        "--assign", "new:scripted/helper", "--session", session.id)
    assert code == 2 and err.startswith(f"lace: error: {repo} has uncommitted changes "
                                        "(README.md)")
    assert snapshot(db_path) == before


async def test_prune_keeps_a_working_helpers_worktree_and_a_stopped_ones_writes(
        store: Store, models: ScriptedModels, tmp_path: Path, db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = new_repository(tmp_path / "repo")
    wrote, never = asyncio.Event(), asyncio.Event()

    async def slow_writer(messages: list[dict[str, Any]]) -> ScriptedReply:
        if "file_write" not in tools_called(messages):
            return reply(None, ("file_write", {"path": "draft.txt", "content": "draft\n"}))
        wrote.set()
        await never.wait()  # mid-task until stopped
        return reply("unreachable")

    models.on("root", lambda messages: reply(None, ("spawn", {
        "task": "Draft it", "model": "scripted/helper"})) if not tools_called(messages)
        else reply("spawned"))
    models.on("helper", slow_writer)
    runtime = supervisor(store, repo)
    root = await runtime.start_session("draft", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    await asyncio.wait_for(wrote.wait(), 60)
    helper = f"{root.id}.1"
    (folder,), = query(db_path, "SELECT folder FROM worktrees")
    assert lace(capsys, db_path, "worktrees", "prune")[:2] == (
        0, f"kept {helper}: 1 uncommitted file(s) in {folder}\n")
    (Path(folder) / "draft.txt").unlink()  # as if it had written nothing yet
    for force in ((), ("--force",)):  # --force deletes unmerged work, never a working place
        assert lace(capsys, db_path, "worktrees", "prune", *force)[:2] == (
            0, f"kept {helper}: its helper is still working (lace stop {helper} first)\n")
    (Path(folder) / "draft.txt").write_text("draft\n")
    await runtime.stop_agent(helper, "enough", by_person=True)
    await asyncio.wait_for(run, 60)
    runtime.close()
    assert lace(capsys, db_path, "worktrees", "prune")[:2] == (
        0, f"kept {helper}: 1 uncommitted file(s) in {folder}\n")
    assert (Path(folder) / "draft.txt").read_text() == "draft\n"
    assert f"lace/{helper}" in branches(repo)


def test_prune_keeps_a_branch_whose_merge_was_undone(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A person who undoes lace's merge (git reset on the base branch) leaves the helper's
    branch as the only copy of its work: prune must not delete it as merged."""
    repo, first, _ = helpers
    (folder,), = query(db_path, "SELECT folder FROM worktrees WHERE thread_id = ?", first)
    before = git(repo, "rev-parse", "main")
    assert lace(capsys, db_path, "merge", first)[0] == 0
    git(repo, "reset", "--quiet", "--hard", before)
    code, out, _ = lace(capsys, db_path, "worktrees", "prune")
    assert code == 0 and f"kept {first}: 1 unmerged commit(s) on lace/{first}" in out
    assert f"lace/{first}" in branches(repo) and Path(folder, "a.txt").exists()


def test_merge_and_prune_print_json_alone(
        helpers: tuple[Path, str, str], db_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, first, second = helpers
    folders = dict(query(db_path, "SELECT thread_id, folder FROM worktrees"))
    code, out, err = lace(capsys, db_path, "merge", first, "--json")
    merged = git(repo, "rev-parse", "main")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"thread_id": first, "strategy": "merge",
                               "message": f"lace/{first} merged into main: commit "
                                          f"{merged[:12]}."}
    code, out, err = lace(capsys, db_path, "worktrees", "prune", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == [
        {"thread_id": first, "folder": folders[first], "branch": f"lace/{first}",
         "pruned": True, "kept_because": None},
        {"thread_id": second, "folder": folders[second], "branch": f"lace/{second}",
         "pruned": False, "kept_because": f"1 unmerged commit(s) on lace/{second} (lace merge "
                                          f"{second}, or --force to delete them)"}]
    code, out, _ = lace(capsys, db_path, "worktrees", "prune", "--json")
    assert (code, json.loads(out)) == (0, [
        {"thread_id": second, "folder": folders[second], "branch": f"lace/{second}",
         "pruned": False, "kept_because": f"1 unmerged commit(s) on lace/{second} (lace merge "
                                          f"{second}, or --force to delete them)"}])
