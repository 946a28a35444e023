"""Hooks in Claude Code's contract, with real POSIX sh scripts, for every agent of a tree: the
root, its helper and the helper's helper, each on a scripted model served over real HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.config import McpServer, load_settings
from lace.config.hooks import HookCommand, HookMatcher
from lace.core.errors import LaceError
from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from lace.store import Store
from tests.conftest import query, run_cli
from tests.hooking import (
    hook,
    hooked_runtime,
    logged,
    logger,
    script,
    session_run_to_the_end,
    tool_results,
    warnings,
)
from tests.processes import lace_at, trust_folder, user_config
from tests.scripted import ScriptedModels, reply

GUARD = """input=$(cat)
case "$input" in
  *'rm -rf'*) echo "Blocked by the guard: no rm -rf here." >&2; exit 2 ;;
esac
exit 0
"""


def tree(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    """root spawns mid, mid spawns leaf; leaf tries a dangerous bash, then a harmless one."""
    done = tool_results(messages)
    role = model.split("/")[-1]
    if role == "leaf":
        if not done:
            return ScriptedReply(tool_calls=[("bash", {"command": "rm -rf ./precious"})])
        if len(done) == 1:
            return ScriptedReply(tool_calls=[("bash", {"command": "echo from-leaf"})])
        return ScriptedReply(text="leaf done")
    if role == "kinds":  # one call of each kind of tool, at once
        return ScriptedReply(text="kinds done") if done else ScriptedReply(tool_calls=[
            ("task_create", {"tasks": [{"title": "Write it up", "prompt": "later"}]}),
            ("mcp__time__get_current_time", {"timezone": "UTC"}),
            ("add", {"a": 2, "b": 3}), ("file_read", {"path": "notes.txt"})])
    child = {"root": "openai/mid", "mid": "openai/leaf"}.get(role)
    if child is not None and not done:
        return ScriptedReply(tool_calls=[("spawn", {"task": f"job for {child}", "model": child})])
    if child is not None and len(done) == 1:
        return ScriptedReply(tool_calls=[("spawn_await", {"job_ids": "*"})])
    return ScriptedReply(text=f"{role} done")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(tree) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-a-real-key")
        yield fake


def requests_of(server: FakeOpenAI, role: str) -> list[list[dict[str, Any]]]:
    return [request["messages"] for request in server.requests if request["model"] == role]


async def run_session(runtime: Any, prompt: str = "go") -> str:
    root = await runtime.start_session(prompt, "openai/root")
    await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    return str(root.id)


EVERY_EVENT = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStart",
               "SubagentStop", "SessionStart", "SessionEnd", "TaskCreated", "TaskCompleted")


async def test_a_claude_code_hook_reaches_every_agent_of_a_three_level_tree(
        store: Store, server: FakeOpenAI, tmp_path: Path, db_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    guard = script(tmp_path, "guard.sh", GUARD)
    hooks = {event: [hook(logger(tmp_path, log))] for event in EVERY_EVENT}
    hooks["PreToolUse"].append(hook(guard, matcher="bash"))
    runtime, _events = hooked_runtime(store, tmp_path / "ws", hooks, policy={"bash": "allow"})
    (tmp_path / "ws" / "precious").mkdir()
    try:
        root = await run_session(runtime)
    finally:
        await runtime.stop()
        runtime.close()
    leaf_id, mid_id = f"{root}.1.1", f"{root}.1"
    assert (tmp_path / "ws" / "precious").is_dir()  # the guard blocked the call
    assert tool_results(requests_of(server, "leaf")[1]) == ["Blocked by the guard: no rm -rf here."]
    assert "from-leaf" in tool_results(requests_of(server, "leaf")[2])[1]
    seen = logged(log)
    assert {entry["session_id"] for entry in seen} == {root}
    assert all(entry["cwd"] == str((tmp_path / "ws").resolve()) for entry in seen)
    pre = [(entry["agent_id"], entry["tool_name"]) for entry in seen
           if entry["hook_event_name"] == "PreToolUse"]
    assert sorted(pre) == sorted([(root, "spawn"), (root, "spawn_await"), (mid_id, "spawn"),
                                  (mid_id, "spawn_await"), (leaf_id, "bash"), (leaf_id, "bash")])
    post = {(entry["agent_id"], entry["tool_input"].get("command")): entry for entry in seen
            if entry["hook_event_name"] == "PostToolUse"}
    assert (leaf_id, "rm -rf ./precious") not in post  # a blocked call never ran
    echo = post[(leaf_id, "echo from-leaf")]
    assert "from-leaf" in echo["tool_response"] and echo["tool_use_id"]
    assert echo["parent_agent_id"] == mid_id
    by_event: dict[str, list[str]] = {}
    for entry in seen:
        by_event.setdefault(entry["hook_event_name"], []).append(entry["agent_id"])
    assert sorted(by_event["SubagentStart"]) == [mid_id, leaf_id]
    assert sorted(by_event["SubagentStop"]) == [mid_id, leaf_id]
    assert by_event["Stop"] == [root]
    assert by_event["SessionStart"] == by_event["SessionEnd"] == [root]
    assert by_event["UserPromptSubmit"] == [root]
    created = [entry["task"]["assigned_to"] for entry in seen
               if entry["hook_event_name"] == "TaskCreated"]
    completed = [entry["task"]["assigned_to"] for entry in seen
                 if entry["hook_event_name"] == "TaskCompleted"]
    assert sorted(created) == sorted(completed) == [mid_id, leaf_id]  # once per task
    prompt, = [entry for entry in seen if entry["hook_event_name"] == "UserPromptSubmit"]
    assert (prompt["prompt"], prompt["parent_agent_id"]) == ("go", None)
    assert query(db_path, "SELECT COUNT(*) FROM threads") == [(3,)]


async def test_a_stop_hook_that_blocks_sends_the_agent_back_to_work_with_its_stderr(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    once = script(tmp_path, "once.sh", """input=$(cat)
case "$input" in
  *'"stop_hook_active": false'*) echo "Not yet: run the tests first." >&2; exit 2 ;;
esac
exit 0
""")
    runtime, _events = hooked_runtime(store, tmp_path / "ws", {
        "Stop": [hook(once)], "SubagentStop": [hook(once, matcher="helper")]},
        policy={"bash": "allow"})
    try:
        await run_session(runtime)
    finally:
        await runtime.stop()
        runtime.close()
    for role in ("root", "mid", "leaf"):
        last = requests_of(server, role)[-1][-1]
        assert (last["role"], last["content"]) == ("user", "Not yet: run the tests first.")
    assert len(requests_of(server, "leaf")) == 4  # two bash calls, an answer, one more


async def test_a_hook_that_asks_goes_through_the_persons_approvals(
        store: Store, server: FakeOpenAI, tmp_path: Path, db_path: Path) -> None:
    decide = script(tmp_path, "decide.sh", """input=$(cat)
case "$input" in
  *'"spawn"'*) printf '%s' '{"hookSpecificOutput": {"permissionDecision": "ask"},
     "systemMessage": "asked about a spawn"}' ;;
esac
""")
    runtime, events = hooked_runtime(store, tmp_path / "ws", {"PreToolUse": [hook(decide)]},
                                     approval_timeout_s=1)
    try:
        root = await run_session(runtime)
        # the root's spawn was asked about; nobody answered: denied after 1 s
        assert query(db_path, "SELECT thread_id, tool, status FROM approvals") == [
            (root, "spawn", "denied")]
        assert "asked about a spawn" in " ".join(warnings(events))
    finally:
        await runtime.stop()
        runtime.close()


async def test_allow_lifts_no_policy_and_rewritten_input_is_shown_for_approval(
        store: Store, server: FakeOpenAI, tmp_path: Path, db_path: Path) -> None:
    decide = script(tmp_path, "decide.sh", """cat > /dev/null
printf '%s' '{"hookSpecificOutput": {"permissionDecision": "allow",
  "updatedInput": {"command": "echo rewritten"}}}'
""")
    runtime, _events = hooked_runtime(
        store, tmp_path / "ws", {"PreToolUse": [hook(decide, "bash")]}, approval_timeout_s=1)
    await session_run_to_the_end(runtime, "go", "openai/leaf")
    rows = query(db_path, "SELECT tool, arguments, status FROM approvals")
    assert [(tool, json.loads(arguments)["command"], status) for tool, arguments, status in rows] \
        == [("bash", "echo rewritten", "denied")] * 2  # bash asks by default; allow lifts nothing
    assert all("Denied by" in result for result in tool_results(requests_of(server, "leaf")[-1]))


async def test_updated_input_runs_in_place_of_the_models_arguments(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    rewrite = script(tmp_path, "rewrite.sh", """cat > /dev/null
printf '%s' '{"hookSpecificOutput": {"updatedInput": {"command": "echo rewritten"}},
  "suppressOutput": true}'
""")
    runtime, _events = hooked_runtime(
        store, tmp_path / "ws", {"PreToolUse": [hook(rewrite, "bash")]}, policy={"bash": "allow"})
    (tmp_path / "ws" / "precious").mkdir(parents=True)
    await session_run_to_the_end(runtime, "go", "openai/leaf")
    assert (tmp_path / "ws" / "precious").is_dir()
    results = tool_results(requests_of(server, "leaf")[-1])
    assert [result.splitlines()[0] for result in results] == ["rewritten", "rewritten"]


async def test_post_tool_use_context_and_a_block_reason_reach_the_model(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    after = script(tmp_path, "after.sh", """cat > /dev/null
printf '%s' '{"decision": "block", "reason": "formatted the file",
  "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "lint: clean"}}'
""")
    runtime, _events = hooked_runtime(
        store, tmp_path / "ws", {"PostToolUse": [hook(after, "bash")]}, policy={"bash": "allow"})
    await session_run_to_the_end(runtime, "go", "openai/leaf")
    first = tool_results(requests_of(server, "leaf")[1])[0]
    assert first.endswith("[PostToolUse hook] formatted the file\n\n[PostToolUse hook] lint: clean")


async def test_a_refused_prompt_writes_nothing_and_an_allowed_one_carries_the_context(
        store: Store, server: FakeOpenAI, tmp_path: Path, db_path: Path) -> None:
    gate = script(tmp_path, "gate.sh", """input=$(cat)
case "$input" in
  *secret*) echo "This prompt names a secret." >&2; exit 2 ;;
esac
echo "Today is a test day."
""")
    runtime, _events = hooked_runtime(store, tmp_path / "ws", {
        "UserPromptSubmit": [hook(gate)], "SessionStart": [hook(gate, matcher="startup")]},
        policy={"bash": "allow"})
    try:
        with pytest.raises(LaceError, match="refused the prompt: This prompt names a secret"):
            await runtime.start_session("tell me the secret", "openai/root")
        assert query(db_path, "SELECT COUNT(*) FROM threads") == [(0,)]
        assert runtime.tools.hooks.sessions == set()  # no session began: none to end
        root = await runtime.start_session("go", "openai/leaf")
        with pytest.raises(LaceError, match="names a secret"):
            await runtime.send(root.id, "and the secret?")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 60)
    finally:
        await runtime.stop()
        runtime.close()
    first = requests_of(server, "leaf")[0]
    assert first[-1]["content"].startswith("go\n\nToday is a test day.\n\nToday is a test day.")
    assert "secret" not in json.dumps(query(db_path, "SELECT data FROM events"))


async def test_a_waiting_approval_runs_the_notification_hook(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    log = tmp_path / "notify.jsonl"
    runtime, _events = hooked_runtime(store, tmp_path / "ws", {
        "Notification": [hook(logger(tmp_path, log), matcher="permission_prompt")]},
        approval_timeout_s=1)
    root = await session_run_to_the_end(runtime, "go", "openai/leaf")
    seen = logged(log)
    assert [(entry["agent_id"], entry["tool_name"], entry["notification_type"])
            for entry in seen] == [(root.id, "bash", "permission_prompt")] * 2
    assert seen[0]["message"].startswith("lace needs your permission to use bash")


async def test_hooks_finish_before_lace_exits(store: Store, server: FakeOpenAI,
                                              tmp_path: Path) -> None:
    marker = tmp_path / "ended"
    slow = script(tmp_path, "slow.sh", f'cat > /dev/null\nsleep 1\necho ended > "{marker}"\n')
    runtime, _events = hooked_runtime(store, tmp_path / "ws", {"SessionEnd": [hook(slow)]},
                                      policy={"bash": "allow"})
    try:
        await run_session(runtime)
        assert not marker.exists()
    finally:
        await runtime.stop()
        runtime.close()
    assert marker.read_text() == "ended\n"


NAMES = ["bash", "file_edit", "file_write", "mcp__git__log", "spawn"]


@pytest.mark.parametrize(("matcher", "matched"), [
    ("bash", ["bash"]), ("file_edit|file_write", ["file_edit", "file_write"]),
    ("file_edit, file_write", ["file_edit", "file_write"]), ("", NAMES), ("*", NAMES),
    ("mcp__git__.*", ["mcp__git__log"]),
    ("^file_", ["file_edit", "file_write"]), ("mcp__git", []), ("Bash", [])])
def test_matchers_name_tools_exactly_or_are_regular_expressions(
        matcher: str, matched: list[str]) -> None:
    rule = HookMatcher(matcher=matcher, hooks=[HookCommand(command="true")])
    assert [name for name in NAMES if rule.matches(name)] == matched


def test_hooks_come_from_the_persons_config_file(isolated_home: Path) -> None:
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "config.toml").write_text(
        '[[hooks.PreToolUse]]\nmatcher = "bash"\n'
        'hooks = [{ type = "command", command = "./check.sh", timeout = 30 }]\n'
        '[[hooks.Stop]]\nhooks = [{ type = "command", command = "./done.sh" }]\n')
    settings = load_settings()
    assert settings.hooks["PreToolUse"][0].matcher == "bash"
    assert settings.hooks["PreToolUse"][0].hooks[0].timeout == 30
    assert settings.hooks["Stop"][0].hooks[0].timeout == 60


@pytest.mark.parametrize(("toml", "problem"), [
    ('[[hooks.PreToolUze]]\nhooks = [{ command = "x" }]\n', "hooks.PreToolUze"),
    ('[[hooks.PreToolUse]]\nmatcher = "(bash"\nhooks = [{ command = "x" }]\n',
     "not a regular expression"),
    ('[[hooks.Stop]]\nhooks = [{ type = "prompt", command = "x" }]\n', "hooks.Stop.0.hooks.0.type"),
    ('[[hooks.Stop]]\nhooks = [{ command = "x", timeout = 0 }]\n', "hooks.Stop.0.hooks.0.timeout"),
    ('[[hooks.Stop]]\nhooks = []\n', "hooks.Stop.0.hooks")])
def test_a_bad_hook_table_is_one_clear_error(isolated_home: Path, toml: str,
                                             problem: str) -> None:
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "config.toml").write_text(toml)
    with pytest.raises(LaceError, match="Bad setting") as error:
        load_settings()
    assert problem in str(error.value) and "config.toml" in str(error.value)


def test_lace_hooks_lists_every_files_hooks_and_where_each_comes_from(
        isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "config.toml").write_text(
        '[[hooks.PreToolUse]]\nmatcher = "bash"\nhooks = [{ command = "./guard.sh" }]\n')
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "lace.toml").write_text(
        '[[hooks.PreToolUse]]\nhooks = [{ command = "./audit.sh", timeout = 5 }]\n'
        '[[hooks.PostToolUse]]\nmatcher = "file_edit|file_write"\n'
        'hooks = [{ command = "ruff format" }]\n')
    code, out, err = run_cli(capsys, "hooks", "--workspace", str(repo), "--json")
    assert code == 0 and "ignoring lace.toml" in err
    assert [(row["event"], row["command"]) for row in json.loads(out)["hooks"]] == [
        ("PreToolUse", "./guard.sh")]  # the project's are not trusted yet
    code, out, err = run_cli(capsys, "hooks", "--workspace", str(repo))
    assert "its hooks do not run" in out and "lace trust" in out
    trust_folder(repo)
    code, out, err = run_cli(capsys, "hooks", "--workspace", str(repo), "--json")
    rows = [(row["event"], row["matcher"], row["command"], row["timeout"], row["kind"])
            for row in json.loads(out)["hooks"]]
    assert rows == [("PreToolUse", "bash", "./guard.sh", 60, "home"),
                    ("PreToolUse", "*", "./audit.sh", 5, "project"),
                    ("PostToolUse", "file_edit|file_write", "ruff format", 60, "project")]
    settings = load_settings(workspace=repo)  # both files' PreToolUse hooks run
    assert [matcher.hooks[0].command for matcher in settings.hooks["PreToolUse"]] == [
        "./guard.sh", "./audit.sh"]
    code, out, err = run_cli(capsys, "hooks", "--workspace", str(repo))
    assert (code, err) == (0, "")
    assert out.splitlines()[0].split() == ["PreToolUse", "bash", "./guard.sh", "(timeout", "60",
                                           "s)", "#", str(isolated_home / "config.toml")]


def test_lace_run_runs_the_persons_hooks_and_waits_for_them_before_it_exits(
        tmp_path: Path, server: FakeOpenAI) -> None:
    home, log = tmp_path / "home", tmp_path / "run.jsonl"
    logging = logger(tmp_path, log)
    slow = logger(tmp_path, log, first="sleep 1")
    gate = script(tmp_path, "gate.sh", 'case "$(cat)" in *forbidden*) '
                                      'echo "not that prompt" >&2; exit 2 ;; esac\n')
    user_config(home, "".join(
        f'[[hooks.{event}]]\nhooks = [{{ command = "{command}" }}]\n'
        for event, command in [("SessionStart", logging), ("UserPromptSubmit", gate),
                               ("Stop", logging), ("SessionEnd", slow)]))
    done = lace_at(tmp_path, home, "run", "--model", "openai/plain", "hi",
                   OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="not-a-real-key")
    assert done.returncode == 0, done.stderr
    assert [entry["hook_event_name"] for entry in logged(log)] == [
        "SessionStart", "Stop", "SessionEnd"]  # SessionEnd, a second late, before lace exited
    refused = lace_at(tmp_path, home, "run", "--model", "openai/plain", "the forbidden prompt",
                      OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="not-a-real-key")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1] == (
        "lace: error: A UserPromptSubmit hook refused the prompt: not that prompt")
    assert "Traceback" not in refused.stderr


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_hooks_see_every_kind_of_tool_and_a_regex_matcher_blocks_mcp_tools(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    time_server = shutil.which("mcp-server-time", path=str(Path(sys.executable).parent))
    assert time_server is not None, "mcp-server-time is a dev dependency"
    log = tmp_path / "kinds.jsonl"
    no_mcp = script(tmp_path, "no_mcp.sh", "cat > /dev/null\necho 'no MCP today' >&2\nexit 2\n")
    runtime, _events = hooked_runtime(
        store, tmp_path / "ws", {"PreToolUse": [hook(logger(tmp_path, log)),
                                                hook(no_mcp, matcher="mcp__time__.*")],
                                 "PostToolUse": [hook(logger(tmp_path, log))]},
        policy={"mcp__time__*": "allow"}, python_tools=[add],
        mcp_servers={"time": McpServer(command=time_server, args=["--local-timezone", "UTC"])})
    (tmp_path / "ws" / "notes.txt").write_text("a note\n")
    await session_run_to_the_end(runtime, "go", "openai/kinds")
    seen = [(entry["hook_event_name"], entry["tool_name"]) for entry in logged(log)]
    kinds = ["task_create", "mcp__time__get_current_time", "add", "file_read"]
    assert sorted(name for event, name in seen if event == "PreToolUse") == sorted(kinds)
    assert sorted(name for event, name in seen if event == "PostToolUse") == sorted(
        ["task_create", "add", "file_read"])  # the blocked MCP call never ran
    task, mcp, added, read = tool_results(requests_of(server, "kinds")[-1])
    assert mcp == "no MCP today"
    assert "Write it up" in task and added == "5" and "a note" in read


async def test_continue_false_ends_the_agents_turn_after_the_call(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    halt = script(tmp_path, "halt.sh", "cat > /dev/null\nprintf '%s' "
                  "'{\"continue\": false, \"stopReason\": \"enough for today\"}'\n")
    runtime, _events = hooked_runtime(store, tmp_path / "ws", {"PreToolUse": [hook(halt)]},
                                      policy={"bash": "allow"})
    (tmp_path / "ws" / "precious").mkdir(parents=True)
    await session_run_to_the_end(runtime, "go", "openai/leaf")
    assert len(requests_of(server, "leaf")) == 1  # no model call after the stopped call
    assert (tmp_path / "ws" / "precious").is_dir()
    assert query_results(store) == ["Stopped by a hook: enough for today"]


def query_results(store: Store) -> list[str]:
    with store.reading() as tx:
        return [event.data["content"] if "content" in event.data else
                event.data["message"]["content"] for thread in tx.threads.sessions()
                for event in tx.events.of_thread(thread.id) if event.type == "tool_result"]


async def test_pre_compact_runs_before_an_agents_context_is_trimmed(
        store: Store, models: ScriptedModels, tmp_path: Path) -> None:
    from lace.llm.litellm_setup import litellm

    def model(messages: list[dict[str, Any]]) -> ScriptedReply:
        done = tool_results(messages)
        if len(done) < 2:
            return reply(None, ("task_list", {}))
        if not any(result.startswith("[trimmed") for result in done):
            raise litellm().ContextWindowExceededError("too long", model="x",
                                                       llm_provider="scripted")
        return reply("fits now")

    models.on("root", model)
    log = tmp_path / "compact.jsonl"
    runtime, _events = hooked_runtime(store, tmp_path / "ws", {
        "PreCompact": [hook(logger(tmp_path, log), matcher="auto")]})
    try:
        root = await runtime.start_session("go", "scripted/root")
        await asyncio.wait_for(runtime.run_until_quiet(root.id), 30)
    finally:
        await runtime.stop()
        runtime.close()
    assert [(entry["agent_id"], entry["trigger"]) for entry in logged(log)] == [
        (root.id, "auto")]


async def test_the_app_shows_a_refused_prompt_and_keeps_it_in_the_input(
        db_path: Path, models: ScriptedModels, isolated_home: Path, tmp_path: Path) -> None:
    from textual.widgets import Input

    from tests.piloted_app import SIZE, make_app

    gate = script(tmp_path, "gate.sh", 'case "$(cat)" in *secret*) '
                                      'echo "not that prompt" >&2; exit 2 ;; esac\n')
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "config.toml").write_text(
        f'[[hooks.UserPromptSubmit]]\nhooks = [{{ command = "{gate}" }}]\n')
    app = make_app(db_path, models)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"the secret", "enter")
        await pilot.pause()
        assert app.session_id is None
        assert app.query_one("#message", Input).value == "the secret"
        said = [notification.message for notification in app._notifications]
        assert said == ["A UserPromptSubmit hook refused the prompt: not that prompt"]
    assert query(db_path, "SELECT COUNT(*) FROM threads") == [(0,)]


async def test_a_helper_in_its_own_worktree_has_its_hooks_run_there(
        store: Store, server: FakeOpenAI, tmp_path: Path) -> None:
    from lace.config import WorkspaceSettings
    from tests.gitrepos import new_repository

    log = tmp_path / "where.jsonl"
    where = logger(tmp_path, log, first=f'pwd > "$(mktemp -p "{tmp_path}")"')
    repo = new_repository(tmp_path / "ws", {"README.md": "hi\n"})
    runtime, _events = hooked_runtime(
        store, repo, {"PostToolUse": [hook(where, "bash")]}, policy={"bash": "allow"},
        workspace_settings=WorkspaceSettings(isolation="worktree"))
    try:
        root = await run_session(runtime)
    finally:
        await runtime.stop()
        runtime.close()
    leaf_runs = [entry for entry in logged(log) if entry["agent_id"] == f"{root}.1.1"]
    assert [entry["tool_input"]["command"] for entry in leaf_runs] == [
        "rm -rf ./precious", "echo from-leaf"]
    folder, = {Path(entry["cwd"]) for entry in leaf_runs}
    assert folder != repo.resolve() and (folder / "README.md").is_file()
    assert (repo / "README.md").is_file()
    ran_in = {Path(path.read_text().strip()) for path in tmp_path.glob("tmp*")}
    assert ran_in == {folder}  # the hook's own folder, as its `cwd` says


def test_a_detached_runs_prompt_passes_the_user_prompt_submit_hooks_too(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    gate = script(tmp_path, "gate.sh", 'case "$(cat)" in *forbidden*) '
                                      'echo "not that prompt" >&2; exit 2 ;; esac\n'
                                      'echo "context from the hook"\n')
    odd = script(tmp_path, "odd.sh", "cat > /dev/null\nprintf 'odd\\033[31m' >&2\nexit 3\n")
    user_config(home, f'[[hooks.UserPromptSubmit]]\nhooks = [{{ command = "{gate}" }}, '
                      f'{{ command = "{odd}" }}]\n')
    refused = lace_at(tmp_path, home, "run", "--detach", "the forbidden prompt")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "lace: error: A UserPromptSubmit hook refused the prompt: not that prompt")
    assert not (home / "lace.db").exists() or query(
        home / "lace.db", "SELECT COUNT(*) FROM threads") == [(0,)]
    done = lace_at(tmp_path, home, "run", "--detach", "plan it")
    assert done.returncode == 0, done.stderr
    root_id = done.stdout.strip()
    assert done.stderr.splitlines()[0] == (  # shown to the person, escaped; the prompt goes on
        f"! UserPromptSubmit hook {str(odd)[:80]!r} failed (exit code 3): odd\\x1b[31m")
    (prompt,), = query(home / "lace.db", "SELECT text FROM inbox WHERE thread_id = ?", root_id)
    assert prompt == "plan it\n\ncontext from the hook"
