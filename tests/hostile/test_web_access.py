"""`lace web` reached by another local user: no token, a wrong one, the token in the wrong place,
and more connections than it may start apps for; the person's own path with the token."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import aiohttp
import pytest

from lace.cli.access import access_token
from tests.lace_forks import run_lace
from tests.processes import free_port, lace_env
from tests.web_page import Served, app_handshake, lace_web

OWN_TOKEN = "the-persons-own-web-token-0123456789"


def cookie_name(served: Served) -> str:
    return f"lace-web-{served.url.rsplit(':', 1)[1]}"


async def page(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """GET `url` without following a redirect: the status, Set-Cookie and the body."""
    async with aiohttp.ClientSession() as client, client.get(
            url, headers=headers or {}, allow_redirects=False) as response:
        return response.status, response.headers.get("Set-Cookie", ""), await response.text()


async def app_connection(served: Served, cookie: str | None, query: str = "") -> int:
    """Open the app's websocket as the page would (its Origin), with `cookie` as the token
    cookie; the handshake's status (101: an app was started for it)."""
    headers = {"Origin": served.url}
    if cookie is not None:
        headers["Cookie"] = f"{cookie_name(served)}={cookie}"
    return await app_handshake(served.url, headers, query)


@pytest.mark.slow
def test_a_page_or_an_app_without_the_token_is_refused(tmp_path: Path) -> None:
    with lace_web(tmp_path, env={}) as served:
        token, url = served.token, served.url
        assert len(token) >= 32, "no token printed at start"
        refused = [
            asyncio.run(page(f"{url}/"))[0],
            asyncio.run(page(f"{url}/?token=wrong-{token}"))[0],
            asyncio.run(page(f"{url}/?token={token[:-1]}"))[0],
            asyncio.run(page(f"{url}/?token="))[0],
            asyncio.run(page(f"{url}/", {"Authorization": f"Bearer {token}"}))[0],  # wrong place
            asyncio.run(page(f"{url}/", {"Cookie": f"token={token}"}))[0],  # another cookie
            asyncio.run(page(f"{url}/", {"Cookie": f"{cookie_name(served)}=x{token}"}))[0],
            asyncio.run(page(f"{url}/download/anything"))[0],
        ]
        apps = [asyncio.run(app_connection(served, None)),
                asyncio.run(app_connection(served, f"x{token}")),
                asyncio.run(app_connection(served, None, f"&token={token}"))]  # wrong place
        assert asyncio.run(page(f"{url}/{token}"))[0] == 404
        flood = asyncio.run(many_app_connections(served, 12))
        started = app_processes(served)
        assert served.process.poll() is None
    assert all(status in (401, 403) for status in refused), refused
    assert apps == [401, 401, 401]
    assert flood == [401] * 12 and started == 0


async def many_app_connections(served: Served, count: int) -> list[int]:
    """`count` app connections without the token, all at once."""
    return list(await asyncio.gather(*(app_connection(served, None) for _ in range(count))))


@pytest.mark.slow
def test_the_token_sets_a_strict_cookie_that_opens_the_page_and_the_app(tmp_path: Path) -> None:
    with lace_web(tmp_path, env={}) as served:
        status, cookie, _ = asyncio.run(page(served.login))
        assert status == 303  # to / : the token leaves the address bar
        value = cookie.split(";", 1)[0].split("=", 1)
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert value == [cookie_name(served), served.token]
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        status, _, html = asyncio.run(page(f"{served.url}/",
                                           {"Cookie": f"{value[0]}={value[1]}"}))
        assert status == 200 and "textual.js" in html and served.token not in html
        assert asyncio.run(app_connection(served, served.token)) == 101
        log = tmp_path / "web.log"
        deadline = time.monotonic() + 30
        while "GET /?token=" not in log.read_text():  # the access log of the login
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert "GET /?token=[redacted]" in log.read_text()  # the access log masks it
        assert log.read_text().count(served.token) == 1  # the start line


@pytest.mark.slow
def test_the_token_is_kept_private_and_reused_and_the_environment_sets_it(
        tmp_path: Path) -> None:
    home = tmp_path / "lace-home"
    with lace_web(tmp_path, env={}) as first:
        pass
    folder, file = home / "tokens", home / "tokens" / "web"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert file.read_text().strip() == first.token
    assert (tmp_path / "web.log").read_text().count(first.token) == 1  # printed once
    with lace_web(tmp_path, env={}) as second:
        assert second.token == first.token
    with lace_web(tmp_path, env={"LACE_WEB_TOKEN": OWN_TOKEN}) as own:
        assert own.token == ""  # the person's own token is not printed back
        assert asyncio.run(page(f"{own.url}/?token={first.token}"))[0] in (401, 403)
        assert asyncio.run(page(f"{own.url}/?token={OWN_TOKEN}"))[0] == 303
        assert asyncio.run(app_connection(own, OWN_TOKEN)) == 101
    assert OWN_TOKEN not in (tmp_path / "web.log").read_text()


def app_processes(served: Served) -> int:
    """How many processes the server has started that still run (one per app)."""
    pid = served.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return len(children)


async def open_apps(served: Served, count: int) -> list[int]:
    """Open `count` app connections at once and hold them until all have answered; the
    statuses, and how many app processes ran while they were held."""
    headers = {"Origin": served.url, "Cookie": f"{cookie_name(served)}={served.token}"}
    async with aiohttp.ClientSession() as client:
        async def one() -> aiohttp.ClientWebSocketResponse | int:
            try:
                return await client.ws_connect(f"{served.url}/ws?width=80&height=24",
                                               headers=headers)
            except aiohttp.WSServerHandshakeError as error:
                return error.status

        answers = await asyncio.gather(*(one() for _ in range(count)))
        held = [answer for answer in answers if not isinstance(answer, int)]
        for websocket in held:
            await websocket.receive(timeout=120)  # the app's first output: its process runs
        statuses = [101 if not isinstance(answer, int) else answer for answer in answers]
        statuses.append(app_processes(served))
        past_cap = await client.get(f"{served.url}/", headers=headers, allow_redirects=False)
        statuses.append(past_cap.status)
        page_text = await past_cap.text()
        for websocket in held:
            await websocket.close()
    assert "apps are open" in page_text, page_text
    return statuses


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "env", "cap"), [
    ((), {}, 4), (("--max-apps", "2"), {}, 2), ((), {"LACE_WEB__MAX_APPS": "1"}, 1)])
def test_apps_past_the_cap_are_refused_with_a_clear_page(
        tmp_path: Path, flags: tuple[str, ...], env: dict[str, str], cap: int) -> None:
    connections = cap + 3
    with lace_web(tmp_path, *flags, env=env) as served:
        *statuses, running, page_status = asyncio.run(open_apps(served, connections))
        assert served.process.poll() is None
    assert sorted(statuses) == [101] * cap + [503] * (connections - cap)
    assert running <= cap and page_status == 503


@pytest.mark.slow
@pytest.mark.parametrize("token", ["short", "has spaces in it and is long enough", "é" * 40])
def test_a_bad_token_in_the_environment_is_one_line(tmp_path: Path, token: str) -> None:
    run = run_lace(["web", "--port", str(free_port())],
                   env=lace_env(tmp_path / "home", LACE_WEB_TOKEN=token), timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("lace: error: LACE_WEB_TOKEN") and run.stderr.count("\n") == 1
    assert token not in run.stderr


@pytest.mark.parametrize("planted", ["a shared file", "a link", "junk", "a shared folder"])
def test_a_kept_token_that_is_not_private_is_replaced_never_followed(
        isolated_home: Path, tmp_path: Path, planted: str) -> None:
    folder, file, elsewhere = isolated_home / "tokens", isolated_home / "tokens" / "web", \
        tmp_path / "elsewhere"
    folder.mkdir(parents=True, mode=0o700)
    elsewhere.write_text("x" * 43)
    if planted == "a link":
        file.symlink_to(elsewhere)
    else:
        file.write_text(("not a token" if planted == "junk" else "a" * 43) + "\n")
        file.chmod(0o644 if planted == "a shared file" else 0o600)
    if planted == "a shared folder":
        folder.chmod(0o755)
    token = access_token("web", "LACE_WEB_TOKEN")
    assert token.value != "x" * 43 and len(token.value) >= 32
    assert (token.value == "a" * 43) == (planted == "a shared folder")  # its file was private
    assert not file.is_symlink() and file.read_text() == f"{token.value}\n"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert elsewhere.read_text() == "x" * 43
    assert sorted(path.name for path in folder.iterdir()) == ["web"]  # no draft left behind
