"""`lace` as a child process on a temporary `LACE_HOME`, and the final board it leaves there."""

from __future__ import annotations

import os
import select
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tests.lace_forks import lace_popen, run_lace

MANY_PROMPT = "Write the announcement, list the risks and draft the FAQ"
"""A demo request the coordinator splits into three tasks, and a fourth that sums them up."""

SHORT_THEN_LONGER_TIMEOUTS = ("3", "12", "40")
"""`lace run --timeout` values for a test that needs something started before the timeout:
the next is tried only when a loaded machine started nothing within the last (a test that
waited the longest every time would wait it on every run)."""


def lace_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without LACE_ settings or API keys, on `home` (and a user config folder
    beside it, `HOME-config`, never the person's own), with `extra` on top."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("LACE_") and not key.endswith("_API_KEY")}
    return {**env, "LACE_HOME": str(home), "XDG_CONFIG_HOME": f"{home}-config", **extra}


DELIVERED = ("SELECT json_extract(data, '$.inbox_id') AS inbox_id FROM events "
             "WHERE json_extract(data, '$.inbox_id') IS NOT NULL "
             "UNION ALL SELECT delivered.value FROM events, "
             "json_each(events.data, '$.inbox_ids') AS delivered")
"""Every inbox row each event delivered (a progress block delivers several), one per line."""
DELIVERED_POSTGRES = (
    "SELECT (data ->> 'inbox_id')::int AS inbox_id FROM events "
    "WHERE data ->> 'inbox_id' IS NOT NULL "
    "UNION ALL SELECT delivered::int FROM events, json_array_elements_text(CASE WHEN "
    "json_typeof(data -> 'inbox_ids') = 'array' THEN data -> 'inbox_ids' END) AS delivered")
"""DELIVERED as PostgreSQL spells it."""


def lace(home: Path, *argv: str, crash_at: str | None = None, db: str | None = None,
         **extra: str) -> subprocess.CompletedProcess[str]:
    """`python -m lace *argv` run to its end; `crash_at` names a crash point to die at; `db`
    a database URL instead of the home's file; `extra` more environment variables."""
    env = lace_env(home, **({"LACE_CRASH_AT": crash_at} if crash_at else {}),
                   **({"LACE_DB": db} if db else {}), **extra)
    return run_lace(list(argv), env=env)


def board_rows(db: Path | str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one query, as a person would read them: sqlite3 on a file, psycopg on a URL."""
    if str(db).startswith("postgresql://"):
        from tests import postgres

        return postgres.query(str(db), sql, *params)
    with sqlite3.connect(db, timeout=10) as connection:
        return connection.execute(sql, params).fetchall()


def final_board(home: Path, db: str | None = None) -> dict[str, Any]:
    """The session's tasks, notes and deliveries with ids normalised (from the home's file, or
    the database at `db`)."""
    database: Path | str = db or home / "lace.db"
    postgres = str(database).startswith("postgresql://")
    delivered_rows = DELIVERED_POSTGRES if postgres else DELIVERED

    def rows(sql: str) -> list[tuple[Any, ...]]:
        return board_rows(database, sql)

    (root,), = rows("SELECT id FROM threads WHERE parent_id IS NULL")

    def norm(value: Any) -> Any:
        return value.replace(root, "ROOT") if isinstance(value, str) else value

    tasks = sorted(tuple(map(norm, row)) for row in rows(
        "SELECT title, status, priority, assigned_to, created_by FROM tasks"))
    notes = sorted(tuple(map(norm, row)) for row in rows(
        "SELECT t.title, n.author, n.content FROM task_notes n JOIN tasks t "
        "ON t.id = n.task_id"))
    notices = sorted(tuple(map(norm, row)) for row in rows(
        "SELECT i.thread_id, i.kind, i.sender, t.title FROM inbox i LEFT JOIN tasks t "
        "ON t.id = i.task_id WHERE i.kind NOT IN ('resume', 'reminder')"))
    undelivered = rows("SELECT COUNT(*) FROM inbox WHERE consumed_at IS NULL")
    deliveries = rows(f"SELECT inbox_id, COUNT(*) FROM ({delivered_rows}) AS d GROUP BY 1 "
                      "HAVING COUNT(*) > 1")
    consumed = rows("SELECT COUNT(*) FROM inbox WHERE consumed_at IS NOT NULL")
    delivered = rows(f"SELECT COUNT(DISTINCT inbox_id) FROM ({delivered_rows}) AS d")
    checks = ([("ok",)], []) if postgres else (  # PostgreSQL checks as it writes
        rows("PRAGMA integrity_check"), rows("PRAGMA foreign_key_check"))
    statuses = {row[0] for row in rows("SELECT status FROM agent_metadata")}
    assert undelivered == [(0,)] and deliveries == [] and consumed == delivered
    assert checks == ([("ok",)], []) and statuses == {"idle"}
    return {"tasks": tasks, "notes": notes, "notices": notices}


def detached_session(db: str, env: dict[str, str], prompt: str = "Fan out.") -> str:
    """A session `lace run --detach` wrote on `db` for the workers (none runs it here)."""
    detached = lace_popen([sys.executable, "-m", "lace", "run", "--detach", "--db", db, prompt],
                          env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    session, said = detached.communicate(timeout=60)
    assert detached.returncode == 0, said
    return str(session).strip()


def ended_after(process: subprocess.Popen[Any], started: float, limit_s: float) -> float:
    """Seconds from `started` (`time.monotonic`) until `process` ended, killed once `limit_s`
    have passed (then at least `limit_s`)."""
    try:
        process.wait(timeout=max(0.0, started + limit_s - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
    return time.monotonic() - started


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def trust_folder(folder: Path, home: Path | None = None) -> None:
    """Trust `folder`'s own lace.toml and .mcp.json as they are now, as `lace trust --yes`
    does: in `home`, else the test's `LACE_HOME`."""
    from lace.trust import project_of, trust

    saved = os.environ.get("LACE_HOME")
    os.environ["LACE_HOME"] = str(home or saved)
    try:
        trust(project_of(folder))
    finally:
        if saved is not None:
            os.environ["LACE_HOME"] = saved


def lace_at(folder: Path, home: Path, *argv: str, stdin: str | None = None,
            **extra: str) -> subprocess.CompletedProcess[str]:
    """`lace ARGV` started in `folder`, on `home` (its user config folder is `HOME-config`)."""
    return run_lace(list(argv), env=lace_env(home, **extra), cwd=folder, stdin=stdin)


def user_config(home: Path, text: str) -> Path:
    """The person's own `config.toml` in the user config folder `lace_env` gives `home`."""
    path = Path(f"{home}-config") / "lace" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


_UNREAD: dict[IO[str], bytes] = {}
"""What `next_line` read of a stream past the line it returned."""


def next_line(stream: IO[str], process: subprocess.Popen[str], deadline: float) -> str:
    """The next line of `stream`, or a failure once `deadline` passes or the process ends.
    Read from its file descriptor: `select` cannot see lines a text stream's own buffer took
    in one read (what follows is not in a later `communicate`'s output)."""
    descriptor = stream.fileno()
    while b"\n" not in _UNREAD.get(stream, b""):
        ready, _, _ = select.select([descriptor], [], [], 0.2)
        if ready:
            chunk = os.read(descriptor, 65536)
            assert chunk, f"the output ended (exit {process.poll()})"
            _UNREAD[stream] = _UNREAD.get(stream, b"") + chunk
        else:
            assert time.monotonic() < deadline, f"no line in time (exit {process.poll()})"
    line, _, _UNREAD[stream] = _UNREAD[stream].partition(b"\n")
    return line.decode() + "\n"


def _on_its_terminal() -> None:
    """A `preexec_fn`: the child leads a new session whose controlling terminal is its stdin
    (a pty), as a command typed at a shell prompt owns its terminal."""
    import fcntl
    import termios

    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@contextmanager
def lace_run_at_a_terminal(home: Path, workspace: Path,
                           prompt: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`lace run PROMPT` in `workspace` with a pty as its stdin and controlling terminal, and
    the pty's other end (what a person types into); stdout and stderr are pipes. The pty is
    closed and the process killed at the end of the block if still running."""
    import pty

    terminal, tty = pty.openpty()
    run = lace_popen([sys.executable, "-m", "lace", "run", "--workspace", str(workspace),
                            prompt], stdin=tty, preexec_fn=_on_its_terminal,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=lace_env(home))
    os.close(tty)
    try:
        yield run, terminal
    finally:
        os.close(terminal)
        if run.poll() is None:
            run.kill()
            run.wait()
