"""`lace web`: the app in a browser. textual-serve runs one `lace` app process per browser
connection, with this command's database and flags; only pages served from the address
given may open that connection (a check textual-serve lacks: without it, any web site the
person visits could script their browser into driving the agents)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import sys
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.server import Server

from lace.cli.run import workspace_of
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


class LaceServer(Server):
    """textual-serve's server, titled lace, refusing app connections from other pages."""

    def __init__(self, command: str, *, host: str, port: int, public_url: str) -> None:
        super().__init__(command, host=host, port=port, title="lace", public_url=public_url)
        self.origins = allowed_origins(host, port, public_url)

    async def on_startup(self, app: web.Application) -> None:
        """Say where to go (the command line holds nothing secret, but is long)."""
        print(f"lace web: open {self.public_url} (Ctrl+C stops it)", flush=True)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """Start an app for a page this server served, and for no other."""
        if request.headers.get("Origin") not in self.origins:
            raise web.HTTPForbidden(text="lace web: this page may not open the app")
        response: web.WebSocketResponse = await super().handle_websocket(request)
        return response


def web_command(args: argparse.Namespace) -> int:
    """Check the flags and the app's options (one line if bad), then serve until Ctrl+C."""
    host, port = args.host, args.port
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
    build_app(args).runtime.close()  # the same checks the app makes, before anyone connects
    if remote:
        print(f"lace web: warning: serving on {host}, not only on this machine: anyone who "
              "can reach it can drive the agents (run their tools, spend on your keys)",
              file=sys.stderr, flush=True)
    LaceServer(app_command(args), host=host, port=port, public_url=public_url).serve()
    return 0

