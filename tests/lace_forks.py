"""`lace` processes forked from a fork server: a process per pytest worker that imported lace
(and SQLAlchemy, pydantic and the openai SDK) once, so each command costs its own work instead
of half a second of imports, on two cores the most of what the suite spends. Each command is
still its own process: its own pid, environment, working folder, umask, session if asked,
standard streams (pipes, files or the test's own) and exit status (a crash point's `os._exit`
or a signal ends it alone), entering `lace.__main__.entry` as `python -m lace` does.

`lace_popen` is `subprocess.Popen` for `[sys.executable, "-m", "lace", ...]` (the server
forks, and sends back the pid; the test waits on a pidfd and the server reaps), `run_lace` is
`subprocess.run` for it. What a fork cannot give is started as a real child instead
(`needs_a_new_interpreter`): settings read as the interpreter starts (`PYTHON*`, the locale),
a working folder holding Python files that `-m` would put first on `sys.path`, and the Popen
options the server does not carry (`preexec_fn`, `pass_fds`, another user or group, ...)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LACE = (sys.executable, "-m", "lace")
FORKED_MODULES = ("lace", "tests.diamond_process", "tests.worktree_process")
"""The `python -m MODULE` commands a fork runs: lace, and the test drivers that run lace's
command line with scripted models installed."""
PRELOADED = ("lace.__main__", "lace.runtime", "lace.store", "lace.config", "lace.tui.factory",
             "sqlalchemy.dialects.sqlite", "sqlalchemy.dialects.postgresql.psycopg",
             "openai", "openai.types.chat", "acp", "acp.schema")
"""Modules the server imports before it forks (what most commands import, and the SDK),
besides every module of `lace.cli`."""
STARTUP_SETTINGS = ("PYTHON", "LC_", "LANG")
"""Environment variables read as the interpreter starts: a command given other values than the
server was started with runs in a new interpreter."""
CARRIED = {"stdin", "stdout", "stderr", "env", "cwd", "text", "universal_newlines",
           "encoding", "errors", "bufsize", "start_new_session"}
"""The Popen arguments a forked command honours; any other starts a real child."""


def needs_a_new_interpreter(env: dict[str, str], cwd: Path | str | None) -> bool:
    """Whether a fork of the server would not run the command as `python -m lace` does."""
    started = {key: value for key, value in os.environ.items() if key.startswith(STARTUP_SETTINGS)}
    given = {key: value for key, value in env.items() if key.startswith(STARTUP_SETTINGS)}
    if started != given:
        return True
    folder = Path(cwd) if cwd is not None else Path.cwd()
    return folder.resolve() != REPO_ROOT and any(
        entry.suffix == ".py" or (entry / "__init__.py").exists() for entry in folder.iterdir())


def lace_popen(args: Sequence[str], **options: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(args, **options)`, forked from the server when `args` is
    `python -m lace ...` (or another of `FORKED_MODULES`) and a fork gives the same."""
    env = options.get("env")
    forkable = (tuple(args[:2]) == LACE[:2] and len(args) > 2 and args[2] in FORKED_MODULES
                and set(options) <= CARRIED
                and not needs_a_new_interpreter(dict(os.environ if env is None else env),
                                                options.get("cwd"))
                and _server() is not None)
    return (ForkedLace if forkable else subprocess.Popen)(list(args), **options)


def run_lace(argv: list[str], *, env: dict[str, str], cwd: Path | None = None,
             stdin: str | None = None, timeout: float = 120, module: str = "lace",
             ) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, module, *argv], capture_output=True, text=True, ...)`."""
    with lace_popen([*LACE[:2], module, *argv], env=env, cwd=cwd, text=True, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.PIPE if stdin is not None else None) as process:
        try:
            out, err = process.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


class ForkedLace(subprocess.Popen):  # type: ignore[type-arg]
    """A Popen whose child the fork server makes: its pipes are made here as for any child,
    their far ends handed to the server; its end is seen on a pidfd and its status asked of
    the server (its parent)."""

    _pidfd = -1

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any,
                       pass_fds: Any, cwd: Any, env: Any, startupinfo: Any, creationflags: Any,
                       shell: Any, p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int,
                       errread: int, errwrite: int, *rest: Any) -> None:
        start_new_session = rest[-2]
        streams = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                   errwrite if errwrite != -1 else 2]
        server = _server()
        try:
            if server is None:
                raise OSError("the lace fork server is gone")
            answer = server.ask({
                "op": "spawn", "module": args[2], "argv": list(args)[3:],
                "env": dict(os.environ if env is None else env),
                "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                "umask": _umask(), "new_session": bool(start_new_session)}, streams)
            self.pid = answer["pid"]
            self._child_created = True
            self._pidfd = os.pidfd_open(self.pid)
            self._server = server
        finally:
            self._close_pipe_fds(  # type: ignore[attr-defined]
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        ended = select.select([self._pidfd], [], [],
                              0 if wait_flags & os.WNOHANG else None)[0]
        if not ended:
            return 0, 0
        status = self._server.ask({"op": "reap", "pid": self.pid})["status"]
        os.close(self._pidfd)
        self._pidfd = -1
        return self.pid, int(status)

    def _internal_poll(self, _deadstate: Any = None, *unused: Any, **also_unused: Any) -> Any:
        lock = self._waitpid_lock  # type: ignore[attr-defined]
        if self.returncode is None and lock.acquire(False):
            try:
                if self.returncode is None and self._pidfd != -1:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)  # type: ignore[attr-defined]
            except OSError:
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                lock.release()
        return self.returncode


def _umask() -> int:
    """This process's umask, which a child it started would have."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


class _Server:
    """The test's end of the server: one request and one answer at a time, each a datagram of
    JSON (with the child's three standard descriptors beside a `spawn`)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.lace_forks", str(theirs.fileno()),
                 str(os.getpid())], cwd=REPO_ROOT,
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env={**os.environ, "LACE_HOME": "/nonexistent/lace-fork-server"})
        self.socket = ours
        self.lock = threading.Lock()
        if self.socket.recv(64) != b"ready":
            raise RuntimeError("the lace fork server did not start")

    def ask(self, request: dict[str, Any], descriptors: Sequence[int] = ()) -> dict[str, Any]:
        with self.lock:
            socket.send_fds(self.socket, [json.dumps(request).encode()], list(descriptors))
            answer = self.socket.recv(1 << 16)
        if not answer:
            raise OSError("the lace fork server ended")
        reply: dict[str, Any] = json.loads(answer)
        if "error" in reply:
            raise OSError(reply["error"])
        return reply

    def close(self) -> None:
        self.socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


_servers: dict[int, _Server | None] = {}
_starting = threading.Lock()


def _server() -> _Server | None:
    """This process's fork server, started on first use (None where it cannot start)."""
    with _starting:
        pid = os.getpid()
        server = _servers.get(pid)
        if pid not in _servers or (server is not None and server.process.poll() is not None):
            try:
                server = _servers[pid] = _Server()
                atexit.register(server.close)
            except (OSError, RuntimeError):
                server = _servers[pid] = None
        return server


# --- the server's side ---------------------------------------------------------------------

def serve(descriptor: int, parent: int) -> None:
    """Import lace, say `ready`, then answer requests until the test's end closes: `spawn`
    forks a command on the three descriptors sent with it and answers its pid; `reap` waits
    for an ended command and answers its wait status."""
    import importlib
    import pkgutil

    import lace.cli

    for name in (*PRELOADED, *(module.name for module in pkgutil.iter_modules(
            lace.cli.__path__, "lace.cli."))):
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the children never scan (so never copy) the pages of what was imported
    channel = socket.socket(fileno=descriptor)
    channel.send(b"ready")
    while True:
        if not select.select([channel], [], [], 1.0)[0]:
            if os.getppid() != parent:  # its test process is gone, however it ended (even
                # before this server said it was ready)
                return
            continue
        message, descriptors, _, _ = socket.recv_fds(channel, 1 << 20, 3)
        if not message:
            return
        request = json.loads(message)
        try:
            if request["op"] == "spawn":
                answer: dict[str, Any] = {"pid": _spawn(request, descriptors, channel)}
            else:
                answer = {"status": os.waitpid(request["pid"], 0)[1]}
        except OSError as error:
            answer = {"error": str(error)}
        finally:
            for stream in descriptors:
                os.close(stream)
        channel.send(json.dumps(answer).encode())


def _spawn(request: dict[str, Any], streams: list[int], channel: socket.socket) -> int:
    pid = os.fork()
    if pid == 0:
        _child(request, streams, channel)
    return pid


def _child(request: dict[str, Any], streams: list[int], channel: socket.socket) -> None:
    """In the forked process: become `python -m MODULE ARGV` and never return."""
    try:
        channel.close()
        if request["new_session"]:
            os.setsid()
        for target, stream in enumerate(streams):
            os.dup2(stream, target)
        for stream in set(streams) - {0, 1, 2}:
            os.close(stream)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]
        if request["module"] != "lace":
            sys.argv = [request["module"], *request["argv"]]  # runpy sets the file as -m does
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            sys.exit(0)
        import lace.__main__ as main_module

        sys.argv = [str(main_module.__file__), *request["argv"]]  # as `-m` sets it
        main_module.entry()
    except SystemExit as exit_:  # as the interpreter ends on one: its code, or its text
        code = exit_.code
        with contextlib.suppress(BaseException):
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 0 if code is None else 1)
    except BaseException as error:  # the child must never return into the server
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
        if isinstance(error, KeyboardInterrupt):  # as the interpreter ends on one
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    os._exit(1)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
