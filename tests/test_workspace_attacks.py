"""The file tools under attack, with real files and processes: hostile patterns, files that
give an agent powers, hard links, a folder swapped for a symlink mid-call, FIFOs and sockets,
and files too big to read whole."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.config import ToolSettings, load_settings
from lace.tools.base import ToolError
from lace.tools.registry import ToolRegistry
from lace.tools.workspace import Workspace, WorkspaceResult, WorkspaceTool
from tests.processes import SHORT_THEN_LONGER_TIMEOUTS, lace_env, trust_folder

HOSTILE_PATTERN = "(.*a){12}x"
"""Backtracking regex engines take hours on a line of 60 a's; RE2 takes microseconds."""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "outside").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside\n")
    return root


def workspace_of(folder: Path, **extra: Any) -> Workspace:
    return Workspace.for_lace(folder, database_url=extra.pop("database_url", None),
                              protected_paths=extra.pop("protected_paths", ()))


async def run(workspace: Workspace, tool: str, **arguments: Any) -> WorkspaceResult:
    parsed = ToolRegistry().parse(tool, arguments)
    assert isinstance(parsed, WorkspaceTool)
    return await parsed.perform(workspace)


async def refused(workspace: Workspace, tool: str, fragment: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await run(workspace, tool, **arguments)
    assert fragment in str(caught.value), str(caught.value)
    return str(caught.value)


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root`: file contents, `<dir>`, or where a symlink points."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[name] = "<dir>"
        elif path.is_file():
            found[name] = path.read_bytes()
        else:
            found[name] = "<special>"
    return found


# item 2: a regular expression cannot stall the process

async def test_patterns_run_in_linear_time_and_re2_refusals_are_tool_errors(
        folder: Path) -> None:
    (folder / "many.txt").write_text("a" * 60 + "\n" + "abc abc\n")
    workspace = workspace_of(folder)
    found = await run(workspace, "file_search", pattern=HOSTILE_PATTERN)
    assert found.text == "No matches."
    assert (await run(workspace, "file_search", pattern=r"(abc) abc")).text == \
        "many.txt:2: abc abc"
    message = await refused(workspace, "file_search", "RE2", pattern=r"(abc) \1")
    assert "backreferences" in message and "(abc)" in message
    await refused(workspace, "file_search", "look-around", pattern=r"abc(?= abc)")
    await refused(workspace, "file_search", "Bad regular expression", pattern="(unclosed")


DRIVER = '''
"""`lace ARGV` whose `scripted/root` makes the tool calls of argv[1] in turn, then answers."""
import asyncio, json, sys, threading

from lace.llm.scripted import install_script
from lace.llm.types import ScriptedReply

calls = json.loads(sys.argv[1])


def script(model, messages):
    made = sum(1 for message in messages if message.get("role") == "tool")
    if made < len(calls):
        return ScriptedReply(tool_calls=[tuple(calls[made])])
    return ScriptedReply(text="done")


install_script(script)
if sys.argv[2] == "--stuck-file-read":
    from lace.tools.files import FileRead

    async def stuck(self, workspace):
        """A read that never returns, as on a hung network file system."""
        print("stuck in file_read", file=sys.stderr, flush=True)
        await asyncio.to_thread(threading.Event().wait)

    FileRead.perform = stuck
    del sys.argv[2]
from lace.cli import main
sys.exit(main(sys.argv[2:]))
'''


def lace_process(tmp_path: Path, folder: Path, calls: list[tuple[str, dict[str, Any]]],
                 *argv: str, stuck: bool = False) -> subprocess.Popen[str]:
    """`lace run` in a child process on a scripted root that makes `calls` (stderr goes to
    tmp_path/stderr.txt); `stuck` makes file_read never return."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    with (tmp_path / "stderr.txt").open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, str(driver), json.dumps(calls), *(["--stuck-file-read"] * stuck),
             "run", "go", "--model", "scripted/root", "--yes", "--workspace", str(folder),
             "--db", str(tmp_path / "lace.db"), *argv],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
            env=lace_env(tmp_path / "home", LACE_TEST_PROVIDERS="1"),
            cwd=tmp_path)


def ended(process: subprocess.Popen[str], tmp_path: Path, timeout: float) -> tuple[str, str]:
    """The process's stdout and stderr once it ends; it is killed (and the test fails) if it
    has not ended within `timeout` seconds."""
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return out, (tmp_path / "stderr.txt").read_text()


def tool_results(database: Path) -> list[str]:
    with sqlite3.connect(database) as connection:
        return [row[0] for row in connection.execute(
            "SELECT json_extract(data, '$.message.content') FROM events WHERE type = 'tool_result' "
            "ORDER BY id")]


@pytest.mark.slow
def test_a_hostile_pattern_leaves_the_process_responsive(tmp_path: Path, folder: Path) -> None:
    (folder / "many.txt").write_text("a" * 60 + "\n")
    process = lace_process(tmp_path, folder, [("file_search", {"pattern": HOSTILE_PATTERN})],
                           "--timeout", "30")
    out, err = ended(process, tmp_path, timeout=90)
    assert process.returncode == 0, err
    assert out == "done\n" and tool_results(tmp_path / "lace.db") == ["No matches."]


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["timeout", "ctrl+c"])
def test_the_process_ends_while_a_tool_thread_is_stuck(tmp_path: Path, folder: Path,
                                                      ending: str) -> None:
    timeouts = SHORT_THEN_LONGER_TIMEOUTS if ending == "timeout" else (None,)
    for timeout in timeouts:
        process = lace_process(tmp_path, folder, [("file_read", {"path": "src/app.py"})],
                               *(["--timeout", timeout] if timeout else []), stuck=True)
        deadline = time.monotonic() + 60
        while "stuck in file_read" not in (tmp_path / "stderr.txt").read_text():
            if process.poll() is not None and timeout not in (None, timeouts[-1]):
                break  # timed out before the tool ran (a loaded machine): a longer timeout
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError((tmp_path / "stderr.txt").read_text())
            time.sleep(0.05)
        else:
            break
        for leftover in tmp_path.glob("lace.db*"):
            leftover.unlink()
    if ending == "ctrl+c":
        process.send_signal(signal.SIGINT)
    _, err = ended(process, tmp_path, timeout=60)
    if ending == "timeout":
        assert process.returncode == 3 and "timed out" in err, err
    else:
        assert process.returncode == 130 and "interrupted" in err, err
    assert "Traceback" not in err
    with sqlite3.connect(tmp_path / "lace.db") as connection:
        statuses = {row[0] for row in connection.execute("SELECT status FROM agent_metadata")}
    assert statuses == {"interrupted"}


# item 3: file tools never write what gives an agent powers

PROTECTED = ["lace.toml", "deep/er/lace.toml", "LACE.TOML", ".mcp.json", "sub/.mcp.json",
             ".git/config", ".git/hooks/pre-commit", "sub/.git/config", ".lace/lace.db",
             ".lace-demo/lace.db", ".lacerc", "work.db", "work.db-wal", "work.db-shm",
             "work.db-journal", "home/config.toml", "home/lace.db", "named.toml",
             "keys/deploy.pem", "ops/prod/app.yml", "ops/prod/new/app.yml", "id.pem",
             "xdg/lace/config.toml", "home/keys.json"]


@pytest.fixture
def guarded(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A workspace holding lace's home, its named configuration and its database."""
    for name in PROTECTED:
        if name not in ("ops/prod/new/app.yml", ".git/hooks/pre-commit", "work.db-journal"):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(f"original {name}\n")
    monkeypatch.setenv("LACE_HOME", str(folder / "home"))
    monkeypatch.setenv("LACE_CONFIG", str(folder / "named.toml"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / "xdg"))  # the person's own config
    return workspace_of(folder, database_url=f"sqlite:///{folder / 'work.db'}",
                        protected_paths=["*.pem", "ops/prod"])


@pytest.mark.parametrize("path", PROTECTED)
async def test_file_tools_never_write_what_configures_lace_or_git(
        guarded: Workspace, path: str) -> None:
    before = tree(guarded.folder)
    message = await refused(guarded, "file_write", "protected", path=path, content="bash=allow")
    assert path in message and "a person" in message
    if (guarded.folder / path).exists():
        await refused(guarded, "file_edit", "protected", path=path, old_text="original",
                      new_text="changed")
        if path == "home/keys.json":  # a secret is not even read
            await refused(guarded, "file_read", "lace's own secrets", path=path)
        else:
            assert (await run(guarded, "file_read", path=path)).text.endswith(
                f"original {path}")
    assert tree(guarded.folder) == before


async def test_a_symlink_or_dotted_path_to_a_protected_file_is_refused(
        guarded: Workspace) -> None:
    folder = guarded.folder
    os.symlink("lace.toml", folder / "settings.toml")
    os.symlink(".git", folder / "repo")
    before = tree(folder)
    await refused(guarded, "file_write", "protected", path="settings.toml", content="x")
    await refused(guarded, "file_write", "protected", path="repo/hooks/post-checkout",
                  content="x")
    await refused(guarded, "file_write", "protected", path="src/../.git/config", content="x")
    assert tree(folder) == before
    written = await run(guarded, "file_write", path="src/ok.pemx", content="fine\n")
    assert written.files_changed == ("src/ok.pemx",)


def test_protected_paths_is_a_setting_that_survives_the_run_flags(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lace.toml").write_text('[tools]\nprotected_paths = ["secrets", "*.key"]\n')
    trust_folder(tmp_path)
    settings = load_settings()
    assert settings.tools.protected_paths == ["secrets", "*.key"]
    assert settings.tools.overridden(allow_all=True, read_only=True).protected_paths == \
        ["secrets", "*.key"]
    assert ToolSettings().protected_paths == []
    assert ToolSettings(protected_paths=["a"]).policy_for("file_write") == "ask"


async def test_an_agent_cannot_rewrite_lace_toml_or_the_database_through_the_runtime(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one tool path hands the file tools a workspace that knows lace's own files."""
    from lace.llm.checks import check_model
    from lace.llm.client import default_client
    from lace.runtime import open_runtime
    from lace.store import Store, open_database
    from tests.scripted import ScriptedModels, reply, text, tools_called

    folder = tmp_path / "workspace"
    folder.mkdir()
    monkeypatch.chdir(folder)
    (folder / "lace.toml").write_text('[tools.policy]\nfile_write = "allow"\nbash = "deny"\n')
    (folder / "keep.txt").write_text("keep\n")
    attempts = [("lace.toml", '[tools.policy]\nbash = "allow"\n'), ("work.db-wal", "x"),
                ("keep.txt", "changed\n")]

    def writer(messages: list[dict[str, Any]]) -> Any:
        done = tools_called(messages).count("file_write")
        if done < len(attempts):
            path, content = attempts[done]
            return reply(None, ("file_write", {"path": path, "content": content}))
        return reply(" | ".join(text(m) for m in messages if m["role"] == "tool"))

    ScriptedModels().on("root", writer)
    store = Store(open_database(str(folder / "work.db")))
    settings = load_settings().model_copy(update={"tools": ToolSettings(
        policy={"file_write": "allow"}, protected_paths=["keep.txt"])})
    supervisor = open_runtime(store, settings, default_client(), check_model=check_model,
                              workspace=folder)
    try:
        root = await supervisor.start_session("rewrite the settings", "scripted/root")
        async with asyncio.timeout(30):
            await supervisor.run_until_quiet(root.id)
    finally:
        await supervisor.stop()
        supervisor.close()
    answer = tool_results(folder / "work.db")
    assert len(answer) == 3 and all("protected" in result for result in answer), answer
    assert (folder / "lace.toml").read_text().endswith('bash = "deny"\n')
    assert (folder / "keep.txt").read_text() == "keep\n"


# item 6: nothing outside the workspace is read or written, even racing

async def test_a_hard_link_to_an_outside_file_is_neither_read_nor_written_in_place(
        folder: Path) -> None:
    outside = folder.parent / "outside" / "secret.txt"
    os.link(outside, folder / "linked.txt")
    workspace = workspace_of(folder)
    await refused(workspace, "file_read", "hard link", path="linked.txt")
    await refused(workspace, "file_edit", "hard link", path="linked.txt", old_text="outside",
                  new_text="changed")
    found = await run(workspace, "file_search", pattern="outside")
    assert found.text == "No matches."
    written = await run(workspace, "file_write", path="linked.txt", content="replaced\n")
    assert written.files_changed == ("linked.txt",)
    assert outside.read_text() == "outside\n" and outside.stat().st_nlink == 1
    assert (folder / "linked.txt").read_text() == "replaced\n"


async def test_a_rewrite_keeps_the_file_mode(folder: Path) -> None:
    script = folder / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o751)
    workspace = workspace_of(folder)
    await run(workspace, "file_edit", path="run.sh", old_text="one", new_text="two")
    assert script.read_text() == "echo two\n" and script.stat().st_mode & 0o777 == 0o751
    assert sorted(path.name for path in folder.iterdir()) == ["outside", "run.sh", "src"]


def exchange(first: Path, second: Path) -> None:
    """Swap two directory entries atomically (Linux renameat2 with RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_cwd, rename_exchange = -100, 2
    if libc.renameat2(at_cwd, bytes(first), at_cwd, bytes(second), rename_exchange) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


@pytest.fixture
def swapping(folder: Path) -> Iterator[dict[str, int]]:
    """`folder/a` flips between a real folder and a symlink to a folder outside, as fast as
    a thread can swap them, until the test ends."""
    if not hasattr(ctypes.CDLL(None), "renameat2"):
        pytest.skip("needs Linux renameat2")
    outside = folder.parent / "outside"
    (outside / "b").mkdir()
    (outside / "b" / "f.txt").write_text("SECRET\n")
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "f.txt").write_text("inside\n")
    os.symlink(outside, folder / "swap")
    stop, counts = threading.Event(), {"swaps": 0}

    def swap() -> None:
        while not stop.is_set():
            exchange(folder / "a", folder / "swap")
            counts["swaps"] += 1
            time.sleep(0)  # let the tool's threads run between swaps

    racer = threading.Thread(target=swap, daemon=True)
    racer.start()
    yield counts
    stop.set()
    racer.join()


@pytest.mark.slow
async def test_a_folder_swapped_for_a_symlink_mid_call_never_leads_outside(
        folder: Path, swapping: dict[str, int]) -> None:
    outside = folder.parent / "outside"
    before = tree(outside)
    workspace = workspace_of(folder)
    outcomes: dict[str, int] = {"written": 0, "read": 0, "refused": 0}
    for number in range(3000):
        try:
            await run(workspace, "file_write", path="a/b/f.txt", content=f"write {number}\n")
            outcomes["written"] += 1
            read = await run(workspace, "file_read", path="a/b/f.txt")
            assert "SECRET" not in read.text
            outcomes["read"] += 1
        except ToolError:
            outcomes["refused"] += 1
    assert tree(outside) == before
    assert swapping["swaps"] > 100 and outcomes["written"] > 0 and outcomes["refused"] > 0, \
        (swapping, outcomes)


# item 7: only regular files are read or written

@pytest.fixture
def special(folder: Path) -> Iterator[Workspace]:
    os.mkfifo(folder / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock"))
    yield workspace_of(folder)
    server.close()


@pytest.mark.parametrize(("path", "kind"), [("pipe", "a FIFO"), ("sock", "a socket")])
async def test_fifos_and_sockets_are_refused_without_blocking(
        special: Workspace, path: str, kind: str) -> None:
    for tool, arguments in (("file_read", {}), ("file_write", {"content": "x"}),
                            ("file_edit", {"old_text": "a", "new_text": "b"})):
        message = await refused(special, tool, kind, path=path, **arguments)
        assert "only regular files" in message
    assert (await run(special, "file_search", pattern="x")).text == "No matches."
    assert not (special.folder / path).is_file()


@pytest.mark.slow
def test_a_fifo_does_not_hang_lace_run(tmp_path: Path, folder: Path) -> None:
    os.mkfifo(folder / "pipe")
    process = lace_process(tmp_path, folder, [("file_write", {"path": "pipe", "content": "x"}),
                                              ("file_read", {"path": "pipe"})],
                           "--timeout", "20")
    out, err = ended(process, tmp_path, timeout=60)
    assert process.returncode == 0 and out == "done\n", err
    results = tool_results(tmp_path / "lace.db")
    assert len(results) == 2 and all("is a FIFO" in result for result in results), results


# item 8: file tools read only what they return

def bytes_read() -> int:
    """Bytes this process has read through system calls so far (Linux)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def huge_text_file(path: Path, size: int) -> None:
    """A file of `size` bytes that begins with text lines: the rest is a hole (no disk used)."""
    with path.open("wb") as stream:
        stream.write(b"".join(b"line %d\n" % number for number in range(1, 1001)))
        stream.truncate(size)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
async def test_file_read_reads_only_what_it_returns(folder: Path) -> None:
    huge_text_file(folder / "huge.log", 256 * 2**20)
    workspace = workspace_of(folder)
    start = bytes_read()
    page = await run(workspace, "file_read", path="huge.log", offset=3, limit=2)
    assert bytes_read() - start < 4 * 2**20
    assert page.text.startswith("     3\tline 3\n     4\tline 4\n… ")
    assert "read on with offset=5" in page.text


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
async def test_file_search_streams_with_a_bound_per_file_and_in_all(folder: Path) -> None:
    from lace.tools.files import SEARCH_BYTES_PER_FILE, SEARCH_BYTES_TOTAL

    huge_text_file(folder / "huge.log", 256 * 2**20)
    workspace = workspace_of(folder)
    start = bytes_read()
    found = await run(workspace, "file_search", pattern="line 999$", glob="*.log")
    assert bytes_read() - start < SEARCH_BYTES_PER_FILE + 2**20
    assert found.text.startswith("huge.log:999: line 999\n")
    assert "huge.log" in found.text.splitlines()[-1] and "first" in found.text.splitlines()[-1]
    for number in range(SEARCH_BYTES_TOTAL // SEARCH_BYTES_PER_FILE + 3):
        huge_text_file(folder / f"part{number:02}.txt", SEARCH_BYTES_PER_FILE - 1)
    start = bytes_read()
    found = await run(workspace, "file_search", pattern="nothing like this", glob="part*")
    assert bytes_read() - start < SEARCH_BYTES_TOTAL + 2**20
    assert "stopped" in found.text, found.text


async def test_file_edit_refuses_a_file_too_big_to_rewrite(folder: Path) -> None:
    from lace.tools.files import EDIT_BYTES

    huge_text_file(folder / "huge.log", EDIT_BYTES + 1)
    await refused(workspace_of(folder), "file_edit", "too big", path="huge.log",
                  old_text="line 1\n", new_text="first\n")
