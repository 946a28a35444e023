"""`lace web` without a browser: what it refuses, the warning for a remote bind, the command it
runs per page (quoted), and app connections refused to pages it did not serve."""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from textual_serve.server import Server

from lace import __version__
from lace.cli import main
from lace.cli.web import LaceServer
from tests.web_page import app_handshake, lace_web


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Server]:
    """Servers `lace web` would start, recorded instead of listening."""
    started: list[Server] = []
    monkeypatch.setattr(LaceServer, "serve", lambda self, debug=False: started.append(self))
    return started


@pytest.mark.parametrize(("flags", "message"), [
    (["--host", "192.0.2.7"], "--host 192.0.2.7 is not a loopback address: anyone who can "
                              "reach it could drive your agents; add --allow-remote"),
    (["--host", "lace.example"], "--host lace.example is not a loopback address"),
    (["--host", "0.0.0.0", "--allow-remote"], "add --public-url http://NAME:8000"),
    (["--public-url", "javascript:alert(1)"], "--public-url takes http://HOST:PORT"),
    (["--model", "foo/bar"], "Unknown provider 'foo'"),
])
def test_a_bad_web_command_is_one_line_and_serves_nothing(
        db_path: Path, capsys: Any, served: list[Server], flags: list[str],
        message: str) -> None:
    assert main(["--db", str(db_path), "web", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lace: error: ") and message in err and err.count("\n") == 1
    assert served == []


def test_a_bad_port_is_refused_by_the_parser(db_path: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--db", str(db_path), "web", "--port", "0"])
    assert exit_.value.code == 2
    assert "--port: must be from 1 to 65535, got 0" in capsys.readouterr().err


def test_a_port_in_use_is_one_line_and_no_address_to_open(db_path: Path, capsys: Any) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(["--db", str(db_path), "web", "--port", str(port)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")  # not "lace web: open http://..." first
    assert captured.err == (f"lace: error: cannot listen on 127.0.0.1:{port}: "
                            "Address already in use\n")


def test_a_remote_bind_needs_the_flag_and_warns(db_path: Path, capsys: Any,
                                                 served: list[Server]) -> None:
    assert main(["--db", str(db_path), "web", "--host", "192.0.2.7", "--allow-remote"]) == 0
    err = capsys.readouterr().err
    assert err == ("lace web: warning: serving on 192.0.2.7, not only on this machine: anyone "
                   "who can reach it and holds the token (readable on the way over plain HTTP) "
                   "can drive the agents (run their tools, spend on your keys)\n")
    (server,) = served
    assert (server.host, server.port, server.public_url) == ("192.0.2.7", 8000,
                                                             "http://192.0.2.7:8000")


def test_each_page_runs_this_python_s_lace_with_the_same_database_and_flags(
        tmp_path: Path, capsys: Any, served: list[Server]) -> None:
    folder = tmp_path / "a b;$(touch pwned)'"
    folder.mkdir()
    db = folder / "lace.db"
    assert main(["--db", str(db), "web", "--model", "scripted/root", "--yes",
                 "--workspace", str(folder), "--port", "8123"]) == 0
    assert capsys.readouterr().err == ""
    (server,) = served
    assert (server.host, server.port, server.title) == ("127.0.0.1", 8123, "lace")
    assert shlex.split(server.command) == [
        sys.executable, "-m", "lace", f"--db=sqlite:///{db}", "--model=scripted/root",
        f"--workspace={folder}", "--yes"]
    shown = subprocess.run(f"{server.command} --version", shell=True, cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert shown.stdout == f"lace {__version__}\n"
    assert not (tmp_path / "pwned").exists() and not (folder / "pwned").exists()


@pytest.mark.parametrize("where", ["after the user", "as a parameter"])
def test_a_database_password_reaches_the_pages_apps_but_not_their_command_line(
        capsys: Any, served: list[Server], monkeypatch: pytest.MonkeyPatch,
        postgres_url: str, where: str) -> None:
    url = postgres_url.replace("://postgres@", "://postgres:s3cret-pw@") \
        if where == "after the user" else f"{postgres_url}?password=s3cret-pw"  # trust auth
    monkeypatch.setenv("LACE_DB", "restored after the test")
    assert main(["--db", url, "web", "--port", "8124"]) == 0
    (server,) = served
    assert "s3cret-pw" not in server.command and "--db" not in server.command
    assert os.environ["LACE_DB"] == url.replace("postgresql://", "postgresql+psycopg://")
    assert "s3cret-pw" not in capsys.readouterr().err


@pytest.mark.slow
def test_only_pages_it_served_may_open_the_app(tmp_path: Path) -> None:
    async def handshake(url: str, origin: str | None) -> int:
        headers = {"Cookie": f"lace-web-{port}={served.token}"}  # the token's holder
        headers |= {"Origin": origin} if origin else {}
        return await app_handshake(url, headers)

    with lace_web(tmp_path, env={}) as served:
        url = served.url
        port = url.rsplit(":", 1)[1]
        assert asyncio.run(handshake(url, "http://evil.example")) == 403
        assert asyncio.run(handshake(url, f"http://127.0.0.1.evil.example:{port}")) == 403
        assert asyncio.run(handshake(url, None)) == 403
        assert asyncio.run(handshake(url, url)) == 101
        assert asyncio.run(handshake(url, f"http://localhost:{port}")) == 101


def test_a_bracketed_ipv6_host_serves_on_it(db_path: Path, capsys: Any,
                                            served: list[Server]) -> None:
    """`[::1]`, as a URL writes it: the socket is made on ::1, and the page is at [::1]."""
    assert main(["--db", str(db_path), "web", "--host", "[::1]", "--port", "8123"]) == 0
    (server,) = served
    assert (server.host, server.public_url) == ("::1", "http://[::1]:8123")
    assert capsys.readouterr().err == ""


def test_an_address_that_names_nothing_is_said_as_such(db_path: Path, capsys: Any) -> None:
    """A label past 63 characters: the resolver refuses it without asking any server."""
    name = "a" * 64
    code = main(["--db", str(db_path), "web", "--host", name, "--allow-remote"])
    err = capsys.readouterr().err.splitlines()[-1]
    assert code == 2
    assert err == f"lace: error: cannot listen on {name}:8000: no address of that name"
