"""`lace web`: the app in a browser. textual-serve runs one `lace` app process per browser
connection, with this command's database and flags, at most `max_apps` at once. Two checks
textual-serve lacks, made in its own handlers: the token (`/?token=` once, then a strict
HttpOnly cookie), since another local user can reach a loopback port; and the page's origin,
since without it any web site the person visits could script their browser into driving the
agents."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import sys
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.server import Server

from lace.cli.access import AccessToken, access_token, listening_socket
from lace.cli.invocation import runtime_settings, workspace_of
from lace.cli.tui import build_app
from lace.core.errors import LaceError
from lace.runtime.databases import database_passwords, database_url

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether `host` means every address of the machine (`0.0.0.0`, `::`)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def url_host(host: str) -> str:
    """`host` as it goes in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def origin_of(url: str) -> str:
    """`scheme://host:port` of a URL, as a browser sends it in `Origin`."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def allowed_origins(host: str, port: int, public_url: str) -> frozenset[str]:
    """The pages that may open the app: the public address, and on a loopback host the same
    port under each loopback name."""
    origins = {origin_of(public_url)}
    if is_loopback(host):
        origins |= {f"http://{name}:{port}" for name in LOOPBACK_NAMES}
    return frozenset(origins)


def app_command(args: argparse.Namespace) -> str:
    """The shell command textual-serve runs per connection: this Python's lace, with the
    database and the flags given here (each argument quoted). A database URL with a password
    goes to the apps in the environment instead (`LACE_DB`): `ps` shows a command to anyone."""
    db = getattr(args, "db", None)
    url = database_url(db)
    argv = [sys.executable, "-m", "lace"]
    if not database_passwords(db):
        argv.append(f"--db={url}")
    else:
        os.environ["LACE_DB"] = url  # textual-serve starts each app with this environment
    if args.model:
        argv.append(f"--model={args.model}")
    if args.continue_thread:
        argv.append(f"--continue={args.continue_thread}")
    if args.workspace:
        argv.append(f"--workspace={workspace_of(args)}")
    argv += [flag for flag, given in (("--yes", args.yes), ("--read-only", args.read_only))
             if given]
    return shlex.join(argv)


REFUSED_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>lace web: token
needed</title></head><body><h1>lace web needs its token</h1><p>Open the address lace web printed
when it started (it ends in <code>/?token=...</code>); the token is the one in LACE_WEB_TOKEN,
or the one kept in lace's home (<code>tokens/web</code>).</p></body></html>"""
FULL_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>lace web: too many apps
</title></head><body><h1>lace web runs as many apps as it may</h1><p>{running} apps are open,
the most this lace web runs at once. Close a lace tab and reload this page, or start lace web
with a higher <code>--max-apps</code> (setting <code>[web] max_apps</code>).</p></body></html>"""


class LaceServer(Server):
    """textual-serve's server, titled lace: its page, app and download handlers admit only the
    token's holder, its app handler only pages it served and at most `max_apps` at once."""

    def __init__(self, command: str, *, host: str, port: int, public_url: str,
                 token: AccessToken, max_apps: int) -> None:
        super().__init__(command, host=host, port=port, title="lace", public_url=public_url)
        self.origins = allowed_origins(host, port, public_url)
        self.token, self.max_apps, self.running_apps = token, max_apps, 0
        self.cookie = f"lace-web-{port}"  # per port: another lace web on this host keeps its own

    async def on_startup(self, app: web.Application) -> None:
        """Say where to go, with the token lace made (not the person's own, which they know)."""
        shown = "…" if self.token.kept_in is None else self.token.value
        where = f" with the token in {self.token.variable}" if self.token.kept_in is None else ""
        print(f"lace web: open {self.public_url}/?token={shown}{where} (Ctrl+C stops it)",
              flush=True)

    def serve(self, debug: bool = False) -> None:
        """Serve until Ctrl+C, once the port is known to be free: a port in use is one line,
        never after the line that says to open the page."""
        listening_socket(self.host, self.port, f"{url_host(self.host)}:{self.port}").close()
        super().serve(debug)

    def admitted(self, request: web.Request) -> bool:
        """Whether the request carries the token's cookie."""
        return self.token.admits(request.cookies.get(self.cookie))

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """With `?token=`: set the cookie and send the browser to the page without it. With
        the cookie: the page, unless the apps are at their cap. Else 401."""
        given = request.query.get("token")
        if given is not None:
            if not self.token.admits(given):
                return web.Response(status=401, text=REFUSED_PAGE, content_type="text/html")
            rest = {key: value for key, value in request.query.items() if key != "token"}
            response = web.HTTPSeeOther(location=str(request.rel_url.with_query(rest)))
            response.set_cookie(self.cookie, given, path="/", httponly=True, samesite="Strict",
                                secure=self.public_url.startswith("https:"))
            return response
        if not self.admitted(request):
            return web.Response(status=401, text=REFUSED_PAGE, content_type="text/html")
        if self.running_apps >= self.max_apps:
            return web.Response(status=503, text=FULL_PAGE.format(running=self.running_apps),
                                content_type="text/html")
        page: web.StreamResponse = await super().handle_index(request)
        return page

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """Start an app for the token's holder on a page this server served, while fewer than
        `max_apps` run."""
        if not self.admitted(request):
            raise web.HTTPUnauthorized(text="lace web: the app needs the token's cookie")
        if request.headers.get("Origin") not in self.origins:
            raise web.HTTPForbidden(text="lace web: this page may not open the app")
        if self.running_apps >= self.max_apps:
            raise web.HTTPServiceUnavailable(
                text=f"lace web: {self.running_apps} apps are open, the most it runs at once")
        self.running_apps += 1
        try:
            response: web.WebSocketResponse = await super().handle_websocket(request)
        finally:
            self.running_apps -= 1
        return response

    async def handle_download(self, request: web.Request) -> web.StreamResponse:
        """A file an app offers, to the token's holder only."""
        if not self.admitted(request):
            raise web.HTTPUnauthorized(text="lace web: downloads need the token's cookie")
        return await super().handle_download(request)


def web_command(args: argparse.Namespace) -> int:
    """Check the flags and the app's options (one line if bad), then serve until Ctrl+C."""
    host, port = args.host.removeprefix("[").removesuffix("]"), args.port  # [::1] as in a URL
    remote = not is_loopback(host)
    if remote and not args.allow_remote:
        raise LaceError(f"--host {host} is not a loopback address: anyone who can reach it "
                        "could drive your agents; add --allow-remote to serve it anyway")
    if is_wildcard(host) and not args.public_url:
        raise LaceError(f"--host {host} listens on every address: add --public-url "
                        f"http://NAME:{port}, the address browsers will use")
    public_url = args.public_url or f"http://{url_host(host)}:{port}"
    if urlsplit(public_url).scheme not in ("http", "https") or not urlsplit(public_url).netloc:
        raise LaceError(f"--public-url takes http://HOST:PORT, got {public_url!r}")
    token = access_token("web", "LACE_WEB_TOKEN")
    max_apps = args.max_apps or runtime_settings(args).web.max_apps
    build_app(args).runtime.close()  # the same checks the app makes, before anyone connects
    if remote:
        print(f"lace web: warning: serving on {host}, not only on this machine: anyone who "
              "can reach it and holds the token (readable on the way over plain HTTP) can drive "
              "the agents (run their tools, spend on your keys)", file=sys.stderr, flush=True)
    LaceServer(app_command(args), host=host, port=port, public_url=public_url, token=token,
               max_apps=max_apps).serve()
    return 0

