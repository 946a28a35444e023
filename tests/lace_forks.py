"""`lace` commands run to their end as processes forked from a fork server: a process per
pytest worker that imported lace (and SQLAlchemy, pydantic and the openai SDK) once, so each
command costs its own work instead of half a second of imports, on two cores the most of what
the suite spends. Each command is still its own process: its own pid, environment, working
folder, umask, standard streams and exit code (a crash point's `os._exit` ends it alone), entering
`lace.__main__.entry` as `python -m lace` does.

What a fork cannot give is run as a real child instead (`needs_a_new_interpreter`): settings
read as the interpreter starts (`PYTHON*`, the locale), and a working folder holding Python
files that `-m` would put first on `sys.path`. So does everything when the server is busy
(a command started from another thread) or gone."""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PRELOADED = ("lace.__main__", "lace.runtime", "lace.store", "lace.config", "lace.tui.factory",
             "sqlalchemy.dialects.sqlite", "sqlalchemy.dialects.postgresql.psycopg",
             "openai", "openai.types.chat")
"""Modules the server imports before it forks (what most commands import, and the SDK),
besides every module of `lace.cli`."""
STARTUP_SETTINGS = ("PYTHON", "LC_", "LANG")
"""Environment variables read as the interpreter starts: a command given other values than the
server was started with runs in a new interpreter."""


def needs_a_new_interpreter(env: dict[str, str], cwd: Path | None) -> bool:
    """Whether a fork of the server would not run the command as `python -m lace` does."""
    started = {key: value for key, value in os.environ.items() if key.startswith(STARTUP_SETTINGS)}
    given = {key: value for key, value in env.items() if key.startswith(STARTUP_SETTINGS)}
    if started != given:
        return True
    folder = cwd or Path.cwd()
    return folder != REPO_ROOT and any(
        entry.suffix == ".py" or (entry / "__init__.py").exists() for entry in folder.iterdir())


def run_lace(argv: list[str], *, env: dict[str, str], cwd: Path | None = None,
             stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m lace ARGV` to its end, with its output as text (as `subprocess.run` with
    `capture_output=True, text=True` gives it); raises `subprocess.TimeoutExpired` past
    `timeout`, the command killed."""
    command = [sys.executable, "-m", "lace", *argv]
    server = _server()
    if server is None or needs_a_new_interpreter(env, cwd) or not _lock.acquire(blocking=False):
        return subprocess.run(command, cwd=cwd, input=stdin, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
    try:
        answer = server.ask({"argv": argv, "env": env, "cwd": str(cwd or Path.cwd()),
                             "stdin": stdin, "timeout": timeout, "umask": _umask()})
    finally:
        _lock.release()
    out, err = (_text(base64.b64decode(answer[name])) for name in ("stdout", "stderr"))
    if answer["timed_out"]:
        raise subprocess.TimeoutExpired(command, timeout, out, err)
    return subprocess.CompletedProcess(command, answer["returncode"], out, err)


def _umask() -> int:
    """This process's umask, which a child it started would have."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _text(data: bytes) -> str:
    """Bytes decoded as a text-mode pipe decodes them (the locale's encoding, any newline as
    `\\n`)."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _Server:
    """The client's end: requests and answers, one JSON line each, over the server's pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.lace_forks"], cwd=REPO_ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env={**os.environ, "LACE_HOME": "/nonexistent/fork-server"})
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests: IO[bytes] = self.process.stdin
        self.answers: IO[bytes] = self.process.stdout
        if self.answers.readline() != b"ready\n":
            raise RuntimeError("the lace fork server did not start")

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.write(json.dumps(request).encode() + b"\n")
        self.requests.flush()
        line = self.answers.readline()
        if not line:
            raise RuntimeError("the lace fork server ended")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.requests.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


_lock = threading.Lock()
_servers: dict[int, _Server | None] = {}


def _server() -> _Server | None:
    """This process's fork server, started on first use (None where it cannot start)."""
    pid = os.getpid()
    if pid not in _servers:
        try:
            _servers[pid] = _Server()
            atexit.register(_servers[pid].close)  # type: ignore[union-attr]
        except (OSError, RuntimeError):
            _servers[pid] = None
    server = _servers[pid]
    if server is not None and server.process.poll() is not None:
        _servers[pid] = server = None
    return server


# --- the server's side ---------------------------------------------------------------------

def serve() -> None:
    """Import lace, say `ready`, then fork one command per request line until stdin ends.
    The protocol keeps its own descriptors: the standard ones point at /dev/null, so nothing a
    module prints can be taken for an answer."""
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1):
        os.dup2(null, descriptor)
    import importlib
    import pkgutil

    import lace.cli

    for name in (*PRELOADED, *(module.name for module in pkgutil.iter_modules(
            lace.cli.__path__, "lace.cli."))):
        importlib.import_module(name)
    answers.write(b"ready\n")
    answers.flush()
    for line in requests:
        answers.write(json.dumps(_fork_one(json.loads(line), requests, answers)).encode() + b"\n")
        answers.flush()


def _fork_one(request: dict[str, Any], *protocol: IO[bytes]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lace-fork-") as folder:
        paths = {name: Path(folder, name) for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_text(request["stdin"] or "")
        pid = os.fork()
        if pid == 0:
            _child(request, paths, protocol)
        timed_out = not _ended_within(pid, request["timeout"])
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
                **{name: base64.b64encode(paths[name].read_bytes()).decode()
                   for name in ("stdout", "stderr")}}


def _ended_within(pid: int, timeout: float) -> bool:
    descriptor = os.pidfd_open(pid)
    try:
        return bool(select.select([descriptor], [], [], timeout)[0])
    finally:
        os.close(descriptor)


def _child(request: dict[str, Any], paths: dict[str, Path], protocol: tuple[IO[bytes], ...]
           ) -> None:
    """In the forked process: become `python -m lace ARGV` and never return."""
    try:
        for stream in protocol:
            stream.close()
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        streams = {0: os.open(paths["stdin"], os.O_RDONLY),
                   1: os.open(paths["stdout"], os.O_WRONLY | os.O_CREAT, 0o600),
                   2: os.open(paths["stderr"], os.O_WRONLY | os.O_CREAT, 0o600)}
        for target, descriptor in streams.items():
            os.dup2(descriptor, target)
            os.close(descriptor)
        sys.path[0] = request["cwd"]
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
    serve()
