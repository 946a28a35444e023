"""`lace mcp serve`: the board of one session as an MCP server over stdio (stdout carries only
the protocol) or streamable HTTP (for clients sending `Authorization: Bearer <token>`), with a
runtime that runs the agents its tasks spawn."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lace.cli.access import AccessToken, access_token, listening_socket
from lace.cli.board import board_of
from lace.cli.invocation import runtime_settings, workspace_of
from lace.cli.loop import once_on, run_async
from lace.cli.run import model_client, new_runtime
from lace.config import Settings, default_model
from lace.core.errors import LaceError
from lace.runtime.board import Board
from lace.runtime.public import DaemonThreads, GaveUpError

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken as SdkAccessToken

    from lace.cli.mcp_board import BoardServer

LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Listening:
    """Where `--http` serves, its socket (already listening), and the token clients send."""

    address: Listen
    socket: socket.socket
    token: AccessToken

    def announced(self) -> str:
        """Where clients connect and what they send: the token lace made, or where theirs is."""
        token = self.token
        sent = (f"Authorization: Bearer {token.value}" if token.kept_in is not None
                else f"Authorization: Bearer <the token in {token.variable}>")
        return f"http://{self.address.netloc}/mcp with {sent}"


@dataclass(frozen=True)
class Listen:
    """Where `--http` serves: host, port, and whether the host is this machine only."""

    host: str
    port: int
    loopback: bool

    @property
    def netloc(self) -> str:
        """`host:port` as a Host header or an origin names it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str, allow_remote: bool) -> Listen:
    """`HOST:PORT` (`[::1]:PORT` for IPv6); a host other than loopback needs `allow_remote`."""
    host, colon, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise LaceError(f"--http expects HOST:PORT with a port from 1 to 65535, such as "
                        f"127.0.0.1:8765; got {text!r}")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    loopback = host in LOOPBACK_NAMES or bool(address and address.is_loopback)
    if not loopback and not allow_remote:
        raise LaceError(f"--http {text} would let other machines act on the board as you; "
                        "serve on 127.0.0.1, or add --allow-remote to mean it")
    if address is not None and address.is_unspecified:
        raise LaceError(f"--http {text} listens on every address, so no Host header can be "
                        "checked; name the address clients use (such as 192.168.1.5:8765)")
    return Listen(host, int(port_text), loopback)


def mcp_serve_command(args: argparse.Namespace) -> int:
    """Check the command line and the session, then serve until the client leaves (stdio),
    or SIGINT or SIGTERM."""
    listen = parse_listen(args.http, args.allow_remote) if args.http else None
    if listen is None and sys.stdin is None:  # `<&-`: descriptor 0 is the next file opened
        raise LaceError("lace mcp serve reads its client's messages on stdin, which is "
                        "closed (or serve over HTTP: --http HOST:PORT)")
    token = access_token("mcp", "LACE_MCP_TOKEN") if listen else None
    settings = runtime_settings(args)
    workspace_of(args)
    board = board_of(args, create=True)
    latest = board.session(args.session) if args.session else board.latest_session()
    listening = None if listen is None or token is None else open_socket(listen, token)
    if listen is not None and not listen.loopback:
        print(f"lace: warning: serving the board on {listen.netloc}: anyone who can reach it "
              "and holds the token acts on it as you, over plain HTTP", file=sys.stderr)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="lace mcp: %(levelname)s %(name)s: %(message)s")
    return run_async(lambda: _serve(args, board, settings, latest.id if latest else None,
                                    listening))


def open_socket(listen: Listen, token: AccessToken) -> Listening:
    """The listening socket, opened before anything is served."""
    return Listening(listen, listening_socket(listen.host, listen.port, listen.netloc), token)


async def _serve(args: argparse.Namespace, board: Board, settings: Settings,
                 session_id: str | None, listening: Listening | None) -> int:
    from lace.cli.mcp_board import BoardServer
    from lace.runtime import Sharing

    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())  # a stuck tool thread cannot hold the exit
    stopping = asyncio.Event()
    signalled = threading.Event()  # at once: the loop waits while the registration retries
    once_on((signal.SIGINT, signal.SIGTERM), stopping.set, came=signalled)
    client = model_client()
    try:
        runtime = new_runtime(args, board, settings, client, Sharing(
            feed=board.change_feed(), share_work=True,
            sessions=frozenset({session_id} if session_id else ())), stopping=signalled.is_set)
    except GaveUpError:  # stopped waiting for the server, as the signal asked
        return 0
    server = BoardServer(runtime, session_id)

    async def run_agents() -> None:
        """Import the model SDKs the default model needs off the event loop (seconds), so the
        client's handshake is answered at once, then run the session's agents (resuming those
        cut off)."""
        from lace.llm.client import needs_litellm

        model = settings.model or default_model()
        await asyncio.to_thread(client.warm_up, litellm_too=needs_litellm(model))
        await runtime.serve()

    agents = asyncio.create_task(run_agents(), name="lace-mcp-runtime")
    print(f"lace mcp serve (pid {os.getpid()}): session {session_id or '(none yet)'}, "
          f"{listening.announced() if listening else 'stdio'}",
          file=sys.stderr)
    try:
        if listening is None:
            await _until(stopping, _stdio(server))
        else:
            await _http(server, listening, stopping)
    finally:
        agents.cancel()
        await asyncio.gather(agents, return_exceptions=True)
        runtime.close()
    return 0


async def _until(stopping: asyncio.Event, serving: Coroutine[Any, Any, None]) -> None:
    """Serve until done or until `stopping` is set (SIGINT or SIGTERM), then stop serving."""
    served = asyncio.ensure_future(serving)
    stopped = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({served, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for task in (served, stopped):
        task.cancel()
    await asyncio.gather(served, stopped, return_exceptions=True)


async def _stdio(board: BoardServer) -> None:
    """Serve on stdin and stdout until the client closes stdin (or a stop). The SDK moves the
    process's stdout to stderr while it serves, so a stray print cannot corrupt the protocol;
    stdin is lace's (`claimed_stdin`), since the SDK's waits for its line even once stopped."""
    from mcp.server.stdio import stdio_server

    from lace.cli.mcp_stdin import claimed_stdin

    with claimed_stdin() as stdin:  # a stop does not wait for the line being read
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            await board.server.run(read_stream, write_stream,
                                   board.server.create_initialization_options())


class BearerToken:
    """The SDK's token check (its `TokenVerifier`) for lace's one token: a request without it,
    or with another, is answered 401 before it reaches the board."""

    def __init__(self, token: AccessToken) -> None:
        self.token = token

    async def verify_token(self, token: str) -> SdkAccessToken | None:
        """The SDK's token for lace's own, else None (401)."""
        from mcp.server.auth.provider import AccessToken as SdkAccessToken

        if not self.token.admits(token):
            return None
        return SdkAccessToken(token=token, client_id="lace", scopes=[])


async def _http(board: BoardServer, listening: Listening, stopping: asyncio.Event) -> None:
    """Serve streamable HTTP at /mcp to clients with the bearer token (the SDK's own check),
    refusing requests whose Host or Origin header is not this server's (DNS rebinding: a web
    page the person visits must not reach the board), until `stopping` is set: uvicorn then
    shuts down as on its own Ctrl+C (open requests end, the app's lifespan closes)."""
    import uvicorn
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.transport_security import TransportSecuritySettings
    from pydantic import AnyHttpUrl

    listen = listening.address
    hosts = {listen.netloc, f"localhost:{listen.port}"} if listen.loopback else {listen.netloc}
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=sorted(hosts),
        allowed_origins=sorted(f"http://{host}" for host in hosts))
    auth = AuthSettings(issuer_url=AnyHttpUrl(f"http://{listen.netloc}"),  # no OAuth: one token
                        resource_server_url=None)
    app = board.server.streamable_http_app(host=listen.host, transport_security=security,
                                           auth=auth, token_verifier=BearerToken(listening.token))
    config = uvicorn.Config(app, host=listen.host, port=listen.port, log_level="warning",
                            lifespan="on")
    server = quiet_server_class()(config)

    async def exit_when_stopping() -> None:
        await stopping.wait()
        server.should_exit = True

    watcher = asyncio.create_task(exit_when_stopping())
    try:
        await server.serve(sockets=[listening.socket])
    finally:
        watcher.cancel()


def quiet_server_class() -> type[Any]:
    """uvicorn's server, leaving SIGINT and SIGTERM to lace: uvicorn's own handlers would run
    beside lace's, and one cancelling the other mid-shutdown printed a traceback."""
    import uvicorn

    class LaceServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    return LaceServer
