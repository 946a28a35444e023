"""A throwaway PostgreSQL server for the tests, run as `postgres` when the tests run as root."""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

from tests.processes import free_port

BINARIES_MISSING = "PostgreSQL server binaries not found: apt-get install postgresql"
BIN_OVERRIDE = "LACE_TEST_POSTGRES_BIN"
"""A folder holding `initdb` and `pg_ctl`; when set, the only place the tests look."""
FOLDER_PREFIX = "lace-test-postgres-"
OWNER_FILE = "owner.pid"
SPEED_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")
"""A server that is thrown away needs no durability (the benchmarks start one without these)."""


def find_binaries() -> Path | None:
    """The folder of `initdb` and `pg_ctl`: the override, `pg_config --bindir`, or Debian's."""
    if BIN_OVERRIDE in os.environ:
        candidates = [Path(os.environ[BIN_OVERRIDE])]
    else:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                            key=lambda folder: _version(folder.parent.name), reverse=True)
        pg_config = shutil.which("pg_config")
        if pg_config:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                        timeout=10, check=True).stdout.strip()
                candidates.insert(0, Path(bindir))
    return next((folder for folder in candidates
                 if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file()), None)


def _version(name: str) -> int:
    return int(name) if name.isdigit() else -1


def _as_server_user() -> list[str]:
    """The prefix that runs a command as `postgres`: PostgreSQL refuses to run as root."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PostgresServer:
    """One cluster in a folder of its own, listening on 127.0.0.1 and a unix socket there."""

    def __init__(self, bindir: Path, folder: Path, port: int,
                 settings: Sequence[str] = SPEED_SETTINGS) -> None:
        self.bindir, self.folder, self.port, self.settings = bindir, folder, port, settings

    @classmethod
    def start(cls, bindir: Path, settings: Sequence[str] = SPEED_SETTINGS) -> PostgresServer:
        """initdb and start a cluster in a new folder under the system's temporary folder, with
        `settings` (`name=value`) on top of the server's defaults."""
        reap_abandoned()
        folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        (folder / OWNER_FILE).write_text(_owner())
        if os.geteuid() == 0:
            try:
                postgres = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(folder)
                raise RuntimeError("running as root, the tests start PostgreSQL as the "
                                   "`postgres` user, which is missing: apt-get install "
                                   "postgresql") from None
            os.chown(folder, postgres.pw_uid, postgres.pw_gid)
        server = cls(bindir, folder, 0, settings)
        atexit.register(server.stop)
        try:
            server._run("initdb", "-D", str(server.data), "-U", "postgres", "-A", "trust",
                        "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
            for attempt in range(3):  # another process may take the free port before we do
                server.port = free_port()
                try:
                    server._start()
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
        except BaseException:
            server.stop()
            raise
        return server

    def _start(self) -> None:
        options = [f"-p {self.port}", f"-k {shlex.quote(str(self.folder))}",
                   "-c listen_addresses=127.0.0.1",
                   *(f"-c {setting}" for setting in self.settings)]
        self._run("pg_ctl", "start", "-w", "-D", str(self.data),
                  "-l", str(self.folder / "server.log"), "-o", " ".join(options))

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, program: str, *arguments: str) -> None:
        command = [*_as_server_user(), str(self.bindir / program), *arguments]
        done = subprocess.run(command, cwd=self.folder, capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            log = self.folder / "server.log"
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}"
                               + (f"\n{log.read_text()}" if log.exists() else ""))

    def stop_fast(self) -> None:
        """Stop the server as a restart or failover does (`-m fast`: every session is ended),
        keeping its data; `start_again` brings it back on the same port."""
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))

    def start_again(self) -> None:
        self._start()

    def stop(self) -> None:
        """Stop the server at once and delete its folder; safe to call twice."""
        atexit.unregister(self.stop)
        stop_cluster(self.bindir, self.folder)

    @contextlib.contextmanager
    def fresh_database(self, template: str | None = None) -> Iterator[str]:
        """The URL of a new database, dropped (closing its connections) afterwards: empty, or a
        copy of the database `template` (which no one may be connected to)."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        copy_of = f' TEMPLATE "{template}"' if template else ""
        with psycopg.connect(self.url(), autocommit=True) as admin:
            # ~20 ms, WAL_LOG ~35
            admin.execute(f'CREATE DATABASE "{name}"{copy_of} STRATEGY FILE_COPY')
        try:
            yield self.url(name)
        finally:
            with psycopg.connect(self.url(), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stop_cluster(bindir: Path, folder: Path) -> None:
    """`pg_ctl stop -m immediate` if it runs, then the folder is removed."""
    if (folder / "data" / "postmaster.pid").exists():
        subprocess.run([*_as_server_user(), str(bindir / "pg_ctl"), "stop", "-w", "-m",
                        "immediate", "-D", str(folder / "data")], cwd=folder,
                       capture_output=True, timeout=60, check=False)
    shutil.rmtree(folder, ignore_errors=True)


def _owner(pid: int | None = None) -> str:
    """This process as its PID namespace sees it: a PID means nothing in another namespace."""
    namespace = os.readlink("/proc/self/ns/pid") if Path("/proc/self/ns/pid").exists() else ""
    return f"{namespace} {os.getpid() if pid is None else pid}"


def reap_abandoned() -> None:
    """Stop and remove the servers of test runs (in this PID namespace) killed before cleanup,
    in the temporary folder and in the ones a run may have used instead (tests/conftest.py
    moves it to memory when there is room)."""
    places = {Path(tempfile.gettempdir()), Path("/tmp"), Path("/dev/shm")}
    for folder in (found for place in places for found in place.glob(f"{FOLDER_PREFIX}*")):
        with contextlib.suppress(OSError, ValueError):
            namespace, _, pid = (folder / OWNER_FILE).read_text().rpartition(" ")
            if _owner(int(pid)) == f"{namespace} {pid}" and not _alive(int(pid)):
                stop_cluster(_bindir_of(folder) or Path("/nonexistent"), folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _bindir_of(folder: Path) -> Path | None:
    """The binaries that a cluster was started with, from its postmaster.opts."""
    opts = folder / "data" / "postmaster.opts"
    with contextlib.suppress(OSError, IndexError):
        return Path(shlex.split(opts.read_text())[0]).parent
    return None


_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|%")


_JSON_EXTRACT = re.compile(r"json_extract\(([\w.]+), '\$\.([\w.\[\]]+)'\)")
_JSON_ARRAY_LENGTH = re.compile(r"json_array_length\(([\w.]+), '\$\.(\w+)'\)")


def _path(json_path: str) -> str:
    """`a.b[0]` as PostgreSQL's path `a,b,0`."""
    return json_path.replace("[", ".").replace("]", "").replace(".", ",")


def to_psycopg(sql: str) -> str:
    """SQLite's `?` placeholders as psycopg's `%s`, with literal `%` doubled (not in strings),
    and the tests' `json_extract(column, '$.a.b')` as `column #>> '{a,b}'` (as text)."""
    sql = _JSON_EXTRACT.sub(lambda match: f"({match[1]} #>> '{{{_path(match[2])}}}')", sql)
    sql = _JSON_ARRAY_LENGTH.sub(lambda match: f"json_array_length({match[1]} -> '{match[2]}')",
                                 sql)
    return _TOKENS.sub(lambda match: "%s" if match[0] == "?" else match[0].replace("%", "%%"),
                       sql)


def _connect(url: str) -> psycopg.Connection[Any]:
    """A connection that reads JSON columns as their text, as sqlite3 does."""
    from psycopg.types.string import TextLoader

    connection = psycopg.connect(url)
    connection.adapters.register_loader("json", TextLoader)
    return connection


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement (none for a statement without rows), committed."""
    with _connect(url) as connection:
        cursor = connection.execute(to_psycopg(sql), params)
        return cursor.fetchall() if cursor.description else []


def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the public schema, tables in byte order as SQLite lists them."""
    with _connect(url) as connection:
        tables = [row[0] for row in connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE' ORDER BY table_name COLLATE \"C\"")]
        return {table: connection.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall()
                for table in tables}
