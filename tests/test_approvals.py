"""Approvals: allow, ask (answered once, for the session, or denied), deny; a grandchild's
request answered in the app; `lace approve` from a second process; the timeout."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits, Settings, ToolSettings
from lace.llm.checks import check_model
from lace.llm.client import default_client
from lace.llm.types import ScriptedReply
from lace.runtime import Runtime, open_runtime
from lace.store import Store
from tests.conftest import query
from tests.lace_forks import lace_popen, run_lace
from tests.processes import lace_env
from tests.scripted import ScriptedModels, reply, text, tools_called

pytestmark = pytest.mark.both_engines

def make(store: Store, workspace: Path, policy: dict[str, Any] | None = None,
         **limits: Any) -> Runtime:
    settings = Settings(limits=Limits(**limits), tools=ToolSettings(policy=policy or {}))
    return open_runtime(store, settings, default_client(), check_model=check_model,
                        workspace=workspace)


def writer(*paths: str) -> Any:
    """Writes each path in turn (one call per model call), then reports the results."""

    def handle(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = tools_called(messages).count("file_write")
        if done < len(paths):
            return reply(None, ("file_write", {"path": paths[done], "content": "hi\n"}))
        return reply(" | ".join(text(m) for m in messages if m["role"] == "tool"))

    return handle


async def answer_when_asked(db_path: Path, status: str, runtime: Runtime) -> int:
    for _ in range(400):
        pending = query(db_path, "SELECT id FROM approvals WHERE status = 'pending'")
        if pending:
            assert query(db_path, "SELECT status FROM agent_metadata") == [("waiting",)]
            await runtime.decide(pending[0][0], status)
            return int(pending[0][0])
        await asyncio.sleep(0.02)
    raise AssertionError("no approval request appeared")


async def test_ask_then_deny_leaves_the_file_unwritten(store: Store, models: ScriptedModels,
                                                       db_path: Path, tmp_path: Path) -> None:
    runtime = make(store, tmp_path)
    models.on("root", writer("a.txt"))
    root = await runtime.start_session("write", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    approval_id = await answer_when_asked(db_path, "denied", runtime)
    await asyncio.wait_for(run, 20)
    runtime.close()
    assert not (tmp_path / "a.txt").exists()
    (answer,), = query(db_path, "SELECT json_extract(data, '$.message.content') FROM events "
                                "WHERE type = 'agent_message' ORDER BY id DESC LIMIT 1")
    assert answer.startswith(f"Denied by the person (approval #{approval_id}): you may not run "
                             "file_write")
    assert query(db_path, "SELECT tool, status, decided_by FROM approvals") == [
        ("file_write", "denied", "human")]


async def test_allow_for_the_session_asks_only_once(store: Store, models: ScriptedModels,
                                                    db_path: Path, tmp_path: Path) -> None:
    runtime = make(store, tmp_path)
    models.on("root", writer("a.txt", "b.txt"))
    root = await runtime.start_session("write", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    await answer_when_asked(db_path, "approved_session", runtime)
    await asyncio.wait_for(run, 20)
    runtime.close()
    assert (tmp_path / "a.txt").read_text() == "hi\n" and (tmp_path / "b.txt").exists()
    assert query(db_path, "SELECT COUNT(*) FROM approvals") == [(1,)]
    changed = query(db_path, "SELECT json_extract(data, '$.files_changed[0]') FROM events "
                             "WHERE type = 'tool_result' ORDER BY id")
    assert changed == [("a.txt",), ("b.txt",)]


async def test_allow_and_deny_policies_need_no_person(store: Store, models: ScriptedModels,
                                                      db_path: Path, tmp_path: Path) -> None:
    runtime = make(store, tmp_path, policy={"file_write": "deny", "bash": "allow"})
    models.on("root", lambda messages: reply(None, ("file_write", {"path": "x", "content": ""}),
                                             ("bash", {"command": "echo ran"}))
              if not tools_called(messages) else reply("ok"))
    root = await runtime.start_session("go", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 20)
    runtime.close()
    results = [r for (r,) in query(db_path, "SELECT json_extract(data, '$.message.content') "
                                            "FROM events WHERE type = 'tool_result'")]
    assert results[0].startswith("Denied: the policy for file_write is deny")
    assert results[1] == "ran\n[exit code 0]"
    assert query(db_path, "SELECT COUNT(*) FROM approvals") == [(0,)]


def test_yes_and_read_only() -> None:
    assert ToolSettings().overridden(allow_all=True).policy_for("bash") == "allow"
    read_only = ToolSettings(policy={"bash": "allow"}).overridden(read_only=True)
    assert [read_only.policy_for(t) for t in ("bash", "file_edit", "file_read")] == [
        "deny", "deny", "allow"]
    assert ToolSettings().policy_for("file_write") == "ask"
    assert ToolSettings().policy_for("task_create") == "allow"


async def test_an_unanswered_request_is_denied_after_the_timeout(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path) -> None:
    runtime = make(store, tmp_path, approval_timeout_s=0.3)
    models.on("root", writer("late.txt"))
    root = await runtime.start_session("write", "scripted/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 20)
    runtime.close()
    assert query(db_path, "SELECT status, decided_by FROM approvals") == [
        ("denied", "timeout after 0.3 s ([limits] approval_timeout_s)")]
    assert not (tmp_path / "late.txt").exists()


async def test_a_grandchilds_request_is_answered_in_the_app(
        db_path: Path, models: ScriptedModels, tmp_path: Path) -> None:
    from lace.tui.factory import create_app
    from lace.tui.widgets.approval_modal import ApprovalModal
    from lace.tui.widgets.conversation import ToolCallView

    def spawner(target: str) -> Any:
        return lambda messages: reply(None, ("spawn", {"task": "go", "model": target})) \
            if "spawn" not in tools_called(messages) else reply(None, (
                "spawn_await", {"job_ids": "*"})) if "spawn_await" not in tools_called(
                messages) else reply("done")

    models.on("root", spawner("scripted/middle"))
    models.on("middle", spawner("scripted/leaf"))
    models.on("leaf", writer("deep.txt"))
    app = create_app(db=str(db_path), model="scripted/root", workspace=tmp_path)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press(*"go", "enter")
        for _ in range(600):
            await pilot.pause(0.05)
            if isinstance(app.screen, ApprovalModal):
                break
        assert isinstance(app.screen, ApprovalModal)
        await pilot.pause()
        assert app.screen.approval.thread_id == f"{app.session_id}.1.1"
        assert "approval(s) waiting" in str(app.query_one("#status").render())
        await pilot.press("a")
        assert app.session_id is not None
        await asyncio.wait_for(app.runtime.run_until_quiet(app.session_id), 20)
        await app.switch_to(f"{app.session_id}.1.1")
        await app.refresh_view()
        titles = [str(w.title) for w in app.query(ToolCallView)]
        assert any(t.startswith("✓ file_write(") and t.endswith("[changed deep.txt]")
                   for t in titles), titles
    assert (tmp_path / "deep.txt").read_text() == "hi\n"
    assert query(db_path, "SELECT thread_id, status FROM approvals") == [
        (f"{app.session_id}.1.1", "approved")]


def test_a_headless_run_waits_for_lace_approve_from_another_process(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = lace_env(tmp_path / "home")
    lace = [sys.executable, "-m", "lace"]
    run = lace_popen([*lace, "run", "--workspace", str(workspace),
                            "Write a file with the plan and a file with the risks"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert run.stderr is not None
    asked = ""
    deadline = time.monotonic() + 60
    while "? approval #" not in asked and time.monotonic() < deadline:
        asked = run.stderr.readline()
    assert "wants file_write" in asked and "lace approve" in asked, asked
    approval_id = re.search(r"\? approval #(\d+)", asked)[1]  # type: ignore[index]
    listed = run_lace(["approvals"], env=env)
    assert f"#{approval_id}" in listed.stdout
    assert run_lace(["approve", approval_id, "--session"], env=env).returncode == 0
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 0
    assert "The draft is in" in out
    assert sorted(p.name for p in workspace.iterdir()) == [
        "a-file-with-the-risks.md", "write-a-file-with-the-plan.md"]


@pytest.mark.parametrize("argv", [["approve", "99"], ["deny", "99"]])
def test_answering_an_unknown_request_is_one_line(capsys: Any, db_path: Path, store: Store,
                                                  argv: list[str]) -> None:
    from tests.conftest import run_cli

    code, _, err = run_cli(capsys, *argv, "--db", str(db_path))
    assert code == 2 and err == "lace: error: Unknown approval request 99.\n"


@pytest.mark.parametrize("argv", [["approve", "3000000000"], ["deny", "2147483648"]])
def test_an_id_past_the_largest_integer_is_refused_alike_on_both_engines(
        capsys: Any, db_path: Path, argv: list[str]) -> None:
    """PostgreSQL's ids are 32-bit: a larger one must not reach it ("integer out of range")."""
    from tests.conftest import run_cli

    code, _, err = run_cli(capsys, *argv, "--db", str(db_path))
    assert code == 2 and err.count("\n") == 1 and "must be from 1 to 2147483647" in err, err


PADDED = "ls" + " " * 300 + "; echo pwned > owned.txt"


async def test_a_padded_command_is_never_cut_without_a_mark(
        store: Store, models: ScriptedModels, db_path: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The hidden tail of a bash command (after 300 spaces) is either shown or announced, on
    stderr and in `lace approvals`; `lace approvals --full` shows all of it."""
    import io
    import json

    from lace.cli.progress import progress_printer
    from tests.conftest import run_cli

    runtime = make(store, tmp_path)
    stderr = io.StringIO()
    runtime.bus.subscribe(progress_printer(stderr))
    models.on("root", lambda messages: reply(None, ("bash", {"command": PADDED}))
              if not tools_called(messages) else reply("done"))
    root = await runtime.start_session("go", "scripted/root")
    run = asyncio.create_task(runtime.run_until_quiet(root.id))
    async with asyncio.timeout(20):
        # the row is committed before the request is announced on stderr: wait for both
        while not query(db_path, "SELECT id FROM approvals WHERE status = 'pending'") \
                or "? approval" not in stderr.getvalue():
            await asyncio.sleep(0.02)
    (stored,), = query(db_path, "SELECT arguments FROM approvals")
    whole = json.dumps(json.loads(stored), ensure_ascii=False)
    assert PADDED in whole
    (asked,) = [line for line in stderr.getvalue().splitlines() if line.startswith("? approval")]
    assert "; echo pwned" in asked or f"… ({len(whole) - 200} more characters; lace approvals " \
                                      "--full shows all)" in asked, asked
    code, listed, _ = run_cli(capsys, "approvals", "--db", str(db_path))
    assert code == 0
    assert "; echo pwned" in listed or f"… ({len(whole) - 200} more characters; lace " \
                                       "approvals --full shows all)" in listed, listed
    code, full, _ = run_cli(capsys, "approvals", "--full", "--db", str(db_path))
    assert code == 0 and PADDED in full
    (approval_id,), = query(db_path, "SELECT id FROM approvals")
    await runtime.decide(approval_id, "denied")
    await asyncio.wait_for(run, 20)
    runtime.close()
    assert not (tmp_path / "owned.txt").exists()


def test_a_request_whose_process_died_is_reported_orphaned(tmp_path: Path) -> None:
    """`lace run` asks, then is SIGKILLed: the request is listed as orphaned, `lace approve`
    refuses it (nothing would run) and writes nothing, `lace deny` clears it."""
    import signal

    from tests.conftest import snapshot

    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = lace_env(tmp_path / "home")
    lace = [sys.executable, "-m", "lace"]
    run = lace_popen([*lace, "run", "--workspace", str(workspace), "Write a file"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert run.stderr is not None
    asked = ""
    deadline = time.monotonic() + 60
    while "? approval #" not in asked and time.monotonic() < deadline:
        asked = run.stderr.readline()
    approval_id = re.search(r"\? approval #(\d+)", asked)[1]  # type: ignore[index]
    listed = run_lace(["approvals"], env=env)
    assert f"#{approval_id}" in listed.stdout and "orphaned" not in listed.stdout
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
    listed = run_lace(["approvals"], env=env)
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(f"#{approval_id} ")]
    assert line.endswith("(orphaned: the process that asked is gone; lace run --continue "
                         f"{line.split()[1].split('.')[0]} asks again)"), line
    as_json = run_lace(["approvals", "--json"], env=env)
    assert '"orphaned": true' in as_json.stdout
    db_path = tmp_path / "home" / "lace.db"
    before = snapshot(db_path)
    approved = run_lace(["approve", approval_id], env=env)
    assert approved.returncode == 2 and approved.stdout == ""
    assert approved.stderr.startswith(f"lace: error: Approval request #{approval_id} is orphaned")
    assert approved.stderr.count("\n") == 1 and "lace run --continue" in approved.stderr
    assert snapshot(db_path) == before
    denied = run_lace(["deny", approval_id], env=env)
    assert denied.returncode == 0 and "denied" in denied.stdout and "orphaned" in denied.stdout
    assert query(db_path, "SELECT status FROM approvals WHERE id = ?", approval_id) == [
        ("denied",)]
    assert not list(workspace.iterdir())
