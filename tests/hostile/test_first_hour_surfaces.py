"""The surfaces the rest of issue 33 opened, attacked: an untrusted `.mcp.json` that `lace mcp
list` now describes (odd names, markup, nesting, a huge file), the answers typed at `lace run`'s
terminal, the `--db` an approval line repeats, and a TAB that reads session ids."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lace.cli.asking import QUESTION
from tests.completing import completions
from tests.conftest import query, run_cli
from tests.lace_forks import run_lace
from tests.processes import lace, lace_env, lace_run_at_a_terminal, next_line

CaptureFixture = pytest.CaptureFixture[str]


def mcp_list(folder: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return run_lace(["mcp", "list", "--json"], env=lace_env(home), cwd=folder, timeout=60)


def test_an_untrusted_mcp_json_is_described_escaped_and_never_started(tmp_path: Path) -> None:
    folder, marker = tmp_path / "project", tmp_path / "started"
    folder.mkdir()
    (folder / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "\x1b[2Jevil[/]": {"command": "touch", "args": [str(marker), "\x07[b]bell[/b]"]},
        "a" * 5000: {"url": "http://user:pa55word@127.0.0.1:1/mcp?api_key=k3y"},
        "nested": {"command": [[[["deep"]]]]}}}))
    done = mcp_list(folder, tmp_path / "home")
    shown = run_lace(["mcp", "list"], env=lace_env(tmp_path / "home"), cwd=folder, timeout=60)
    assert (done.returncode, shown.returncode) == (0, 0), done.stderr + shown.stderr
    listed = json.loads(done.stdout)
    assert [server["status"] for server in listed] == ["pending"] * 3
    assert "\x1b" not in done.stdout + shown.stdout and "\x07" not in done.stdout + shown.stdout
    assert "\\u001b[2Jevil[/]" in done.stdout and "\\x1b[2Jevil[/]" in shown.stdout
    assert "Traceback" not in done.stderr + shown.stderr
    assert not marker.exists()


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000,
                                     '{"mcpServers": ' + "x" * (2 * 1024 * 1024) + "}",
                                     '{"mcpServers": [1, 2]}', "not json"],
                         ids=["nested", "huge", "a-list", "not-json"])
def test_an_unreadable_untrusted_mcp_json_lists_nothing_and_fails_nothing(
        tmp_path: Path, content: str) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / ".mcp.json").write_text(content)
    done = mcp_list(folder, tmp_path / "home")
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 0:
        assert json.loads(done.stdout) == []
    else:  # a file past 1 MiB is refused in one line, as every project file is
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1


@pytest.mark.parametrize("table", ['mcp_servers = 5\n', 'mcp_servers = "x"\n',
                                   '[mcp_servers]\nodd = 5\n[mcp_servers."\\u001b[2Jevil[/]"]\n'
                                   'command = "touch"\nargs = ["MARKER", "\\u0007[b]bell"]\n'],
                         ids=["a-number", "a-string", "odd-entries"])
def test_an_untrusted_lace_tomls_servers_are_described_escaped_and_never_started(
        tmp_path: Path, table: str) -> None:
    folder, marker = tmp_path / "project", tmp_path / "started"
    folder.mkdir()
    (folder / "lace.toml").write_text(table.replace("MARKER", str(marker)))
    done = mcp_list(folder, tmp_path / "home")
    shown = run_lace(["mcp", "list"], env=lace_env(tmp_path / "home"), cwd=folder, timeout=60)
    assert (done.returncode, shown.returncode) == (0, 0), done.stderr + shown.stderr
    listed = json.loads(done.stdout)
    assert [server["status"] for server in listed] == (
        ["pending"] * 2 if "odd" in table else [])
    assert "\x1b" not in done.stdout + shown.stdout and "\x07" not in done.stdout + shown.stdout
    assert "Traceback" not in done.stderr + shown.stderr
    assert not marker.exists()


def test_junk_typed_at_the_terminal_allows_nothing(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    seen = []
    prompt = "Plan the launch and write a file with the risks"
    with lace_run_at_a_terminal(tmp_path / "home", workspace, prompt) as (run, terminal):
        assert run.stderr is not None
        deadline = time.monotonic() + 90
        while not seen or seen[-1].rstrip("\n") != QUESTION:
            try:
                seen.append(next_line(run.stderr, run, deadline))
            except AssertionError as error:
                raise AssertionError(f"{error}: {seen}") from None
        os.write(terminal, b"\x1b[2Jyes please " + b"y" * 2000 + b"\n")
        seen.append(next_line(run.stderr, run, deadline))
        assert "is not an answer; y, s or n" in seen[-1] and "\x1b" not in seen[-1]
        os.write(terminal, b"n\n")
        _out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert not any(workspace.iterdir())
    assert query(tmp_path / "home" / "lace.db", "SELECT status FROM approvals") == [("denied",)]


def test_an_approval_line_never_repeats_the_database_password(
        capsys: CaptureFixture, migrated_postgres_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_postgres_url.replace("postgres@", "postgres:sekrit-pa55@", 1)
    monkeypatch.setenv("LACE_LIMITS__APPROVAL_TIMEOUT_S", "0.5")
    code, _out, err = run_cli(capsys, "run", "--workspace", str(tmp_path), "--db", url,
                              "Plan the launch and write a file with the risks")
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if line.startswith("? approval #")]
    assert [line for line in err.splitlines() if "sekrit" in line] == []
    assert "--db 'postgresql://postgres:***@" in line
    assert "(denied after 0.5 s)" in line


def test_a_tab_on_a_database_that_is_not_a_board_offers_no_id(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    other.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    home = tmp_path / "home"
    assert lace(home, "run", "--detach", "Say hi.").returncode == 0
    before = (home / "lace.db").read_bytes()
    offered = completions(home, [f"lace follow --db {other} lace", f"lace show --db {text} l",
                                 "lace follow lace_\x1b[2J", "lace show lace_2026.\x07"])
    assert offered == [[], [], [], []]
    assert other.read_bytes() == b"SQLite format 3\x00" + b"\x00" * 100
    assert (home / "lace.db").read_bytes() == before


SECRET = "sk-ant-api03-written-in-the-file"


@pytest.mark.parametrize("content", [
    '[limits]\n"max_runing\\u001b]0;title\\u0007LONG" = "SECRET"\n',
    '[tools.policy]\n"\\u001b[2JLONG" = "deny"\n'], ids=["unknown-key", "unknown-tool"])
def test_a_hostile_key_of_lace_toml_is_one_bounded_escaped_line(
        tmp_path: Path, content: str) -> None:
    """A key of a megabyte, with terminal escapes, in a cloned repository's lace.toml: the
    refusal names the file in one line of bounded length, and never repeats the value."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "lace.toml").write_text(
        content.replace("LONG", "x" * 1_000_000).replace("SECRET", SECRET))
    done = run_lace(["trust", "--yes", str(folder)], env=lace_env(tmp_path / "home"),
                    cwd=folder, timeout=60)
    assert done.returncode == 2, done.stderr[:500]
    assert done.stderr.count("\n") == 1 and len(done.stderr) < 2100, done.stderr[:500]
    assert done.stderr.startswith("lace: error: Bad setting "), done.stderr[:500]
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert SECRET not in done.stderr


def test_an_untrusted_servers_keys_and_huge_command_are_masked_and_bounded(
        tmp_path: Path) -> None:
    """As they are once it is trusted: a password or token in the URL, an Authorization
    header, never shown; a command of 100 kB cut in the listing."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "lace.toml").write_text(
        '[mcp_servers.web]\nurl = "http://user:pa55-in-url@127.0.0.1:1/mcp?api_key=t0ken-in-query"\n'
        'headers = {Authorization = "Bearer b3arer-in-header"}\n'
        f'[mcp_servers.long]\ncommand = "{"c" * 100_000}"\n')
    done = mcp_list(folder, tmp_path / "home")
    shown = run_lace(["mcp", "list"], env=lace_env(tmp_path / "home"), cwd=folder, timeout=60)
    assert (done.returncode, shown.returncode) == (0, 0), done.stderr + shown.stderr
    assert [server["status"] for server in json.loads(done.stdout)] == ["pending"] * 2
    for secret in ("pa55-in-url", "t0ken-in-query", "b3arer-in-header"):
        assert secret not in done.stdout + shown.stdout + done.stderr + shown.stderr
    assert "[redacted]" in shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) < 1000
