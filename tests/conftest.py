"""Shared fixtures: a real migrated database per test (SQLite, or PostgreSQL), and a tool caller."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lace.core.records import Lease, NewAgent, Thread
from lace.llm.checks import check_provider
from lace.runtime import Runtime
from lace.runtime.tool_runner import call_tool
from lace.store import Store, open_database
from lace.tools.base import ToolContext, ToolResult
from tests import postgres

# A suite started as a background job inherits SIGINT ignored, and so would every `lace` it starts:
# the tests that press Ctrl+C on a child would see it ignored. Handled here, it is the default in
# each child again.
signal.signal(signal.SIGINT, signal.default_int_handler)

MEMORY_FOLDER, MEMORY_FOLDER_FREE = Path("/dev/shm"), 4 * 2**30


def temporary_files_in_memory() -> None:
    """Temporary folders (`tmp_path`, the PostgreSQL clusters, what every child makes) in memory
    when the machine has room there, may run files from it, and TMPDIR does not say
    otherwise. On an ext4 disk mounted with `discard` each file made and removed cost
    milliseconds of the kernel's time: a PostgreSQL `CREATE DATABASE` of the migrated template
    took 300 ms there against 11 ms in memory. The files are as real: same calls, modes, links
    and locks."""
    if "TMPDIR" in os.environ or not os.access(MEMORY_FOLDER, os.W_OK):
        return
    stats = os.statvfs(MEMORY_FOLDER)  # noexec (Docker's): the tests run scripts they write
    if stats.f_bavail * stats.f_frsize >= MEMORY_FOLDER_FREE and not stats.f_flag & os.ST_NOEXEC:
        os.environ["TMPDIR"] = str(MEMORY_FOLDER)  # inherited by the xdist workers and children
        tempfile.tempdir = None  # read again


temporary_files_in_memory()


def pytest_configure(config: pytest.Config) -> None:
    """Less time in the garbage collector. A test process holds lace, the SDKs and litellm's
    tables (600,000 objects): each full collection took 0.2 to 0.4 s, 10 % of a process's CPU,
    so one runs after 1,000 young ones instead of 10 (and `pytest_collection_finish` freezes
    what the collection imported); a worker's peak memory grows by about 50 MB. When the
    process ends, one collection instead of pytest's five (the last of six workers ended 5 to
    7 s after its last test while the cores stood idle); an exception raised in a destructor
    is still reported, from that collection."""
    from _pytest.unraisableexception import gc_collect_iterations_key

    config.stash[gc_collect_iterations_key] = 1
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()  # what every test shares (modules, the tests themselves) is never scanned again


@pytest.fixture(autouse=True)
def no_remote_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the local demo and scripted providers, and servers on 127.0.0.1, can be called from
    a test, by any of lace's clients."""
    from lace.llm.calls import ProviderClient

    monkeypatch.setattr(ProviderClient, "allow_remote_calls", False)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test touches ~/.lace, ~/.config/lace or a real provider key."""
    home = tmp_path / "lace-home"
    monkeypatch.setenv("LACE_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))  # no ~/.config/lace
    monkeypatch.setenv("LACE_TEST_PROVIDERS", "1")  # the `scripted` provider exists in tests
    for name in ("LACE_DB", "LACE_MODEL", "LACE_CONFIG", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
                 "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    return home


ENGINES = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`db_path` (and so `store`, `session`, `call`) twice in a module marked `both_engines`."""
    if ("db_path" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("both_engines") is not None
            and metafunc.definition.get_closest_marker("sqlite_only") is None):
        metafunc.parametrize("db_path", ENGINES, indirect=True, ids=ENGINES)


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"true", "1"}


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """One throwaway PostgreSQL cluster per test process; missing binaries skip, or fail on CI."""
    bindir = postgres.find_binaries()
    if bindir is None:
        if on_ci():
            pytest.fail(postgres.BINARIES_MISSING, pytrace=False)
        pytest.skip(postgres.BINARIES_MISSING)
    server = postgres.PostgresServer.start(bindir)
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: postgres.PostgresServer) -> Iterator[str]:
    """`postgresql://postgres@127.0.0.1:PORT/NAME` of a new empty database, dropped after."""
    with postgres_server.fresh_database() as url:
        yield url


POSTGRES_TEMPLATE = "lace_template"


@pytest.fixture(scope="session")
def postgres_template(postgres_server: postgres.PostgresServer) -> str:
    """The name of a database of this process's server that lace migrated to head, once: the
    template of `migrated_postgres_url`."""
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{POSTGRES_TEMPLATE}" STRATEGY FILE_COPY')
    open_database(postgres_server.url(POSTGRES_TEMPLATE)).close()  # no connection stays open
    return POSTGRES_TEMPLATE


@pytest.fixture
def migrated_postgres_url(postgres_server: postgres.PostgresServer,
                          postgres_template: str) -> Iterator[str]:
    """The URL of a new database at lace's head revision (a copy of the template, ~20 ms where
    migrating takes about half a second), dropped after."""
    with postgres_server.fresh_database(template=postgres_template) as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a SQLite file that lace migrated to head, once per test process."""
    path = tmp_path_factory.mktemp("sqlite-template") / "lace.db"
    open_database(str(path)).close()
    # the last connection closed checkpointed the WAL into the file and deleted it; make sure
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path.read_bytes()


def write_migrated_file(path: Path, template: bytes) -> None:
    """A new SQLite file at `path` holding the migrated template, made as lace makes one (0600)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(template)


@pytest.fixture
def db_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A SQLite file to create, or (`both_engines`) the URL of an empty PostgreSQL database.

    For a test that uses `store` (which migrates the database before the test starts) it is
    already migrated: a copy of a template migrated once per test process."""
    migrated = "store" in request.fixturenames
    if getattr(request, "param", "sqlite") == "postgresql":
        return str(request.getfixturevalue(
            "migrated_postgres_url" if migrated else "postgres_url"))
    path = tmp_path / "lace.db"
    if migrated:
        write_migrated_file(path, request.getfixturevalue("sqlite_template"))
    return path


def is_postgres(database: Path | str) -> bool:
    return str(database).startswith("postgresql://")


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """The store on `db_path` (which `db_path` has already migrated: nothing left to do here)."""
    opened = Store(open_database(str(db_path)))
    yield opened
    opened.close()


def new_session(store: Store, title: str = "test session") -> Thread:
    """A root thread with its agent row."""
    with store.transaction() as tx:
        return tx.threads.create_session(provider="demo", model="coordinator", title=title)


def lost_and_held_leases(store: Store, thread_id: str) -> tuple[Lease, Lease]:
    """A lease of the agent's that another claim replaced (a paused process's), and that
    claim's own."""
    with store.transaction() as tx:
        lost = tx.leases.claim(tx.agents.get(thread_id), "paused-process")
    with store.transaction() as tx:
        held = tx.leases.claim(tx.agents.get(thread_id), "other-process")
    return lost, held


def spawn_child(store: Store, parent_id: str, model: str = "worker") -> str:
    """A child thread with an agent row, as the runtime would create it."""
    with store.transaction() as tx:
        child = tx.threads.create_child(parent_id)
        tx.agents.create(NewAgent(thread_id=child.id, name=f"agent {child.id}", provider="demo",
                                  model=model, parent_thread_id=parent_id))
    return child.id


@pytest.fixture
def session(store: Store) -> Thread:
    return new_session(store)


Caller = Callable[..., ToolResult]


@pytest.fixture
def call(store: Store, session: Thread) -> Caller:
    """Call a tool as `actor` (the root by default) through the one tool path and the real store."""

    def run(tool: str, arguments: str | dict[str, Any], actor: str | None = None,
            session_id: str | None = None) -> ToolResult:
        context = ToolContext(thread_id=actor or session.id,
                              session_id=session_id or session.id, check_model=check_provider)
        return call_tool(store, context, tool, arguments)

    return run


def query(db_path: Path | str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one SQL query (`?` placeholders), read as a person would: sqlite3 or psycopg."""
    if is_postgres(db_path):
        return postgres.query(str(db_path), sql, *params)
    with sqlite3.connect(db_path) as connection:
        return connection.execute(sql, params).fetchall()


async def until_quiet_then_closed(runtime: Runtime, root_id: str, timeout: float = 60) -> None:
    """Run a session until quiet (`timeout` seconds at most), then stop and close the runtime."""
    try:
        await asyncio.wait_for(runtime.run_until_quiet(root_id), timeout)
    finally:
        await runtime.stop()
        runtime.close()


def turns_of(db_path: Path | str, thread_id: str) -> int:
    """The turns an agent's row counts, read as `query` reads (its row must be there)."""
    (turns,), = query(db_path, "SELECT turns FROM agent_metadata WHERE thread_id = ?", thread_id)
    return int(turns)


def snapshot(path: Path | str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, to prove that a failed call wrote nothing."""
    if is_postgres(path):
        return postgres.snapshot(str(path))
    with sqlite3.connect(path) as connection:
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {table: connection.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in tables}


@pytest.fixture
def unchanged(db_path: Path) -> Callable[[], Any]:
    """`with unchanged():` asserts the database holds the same rows afterwards."""
    from contextlib import contextmanager

    @contextmanager
    def guard() -> Iterator[None]:
        before = snapshot(db_path)
        yield
        assert snapshot(db_path) == before

    return guard


@pytest.fixture
def models() -> Any:
    """Scripted models, called through lace's own model client (`scripted/<role>`)."""
    from tests.scripted import ScriptedModels

    return ScriptedModels()


@pytest.fixture
async def runtime(store: Store, models: Any) -> Any:
    """A supervisor over the test database with lace's own client and quick retries."""
    from lace.config import Limits, Settings
    from lace.llm.checks import check_model
    from lace.llm.client import default_client
    from lace.runtime import open_runtime

    settings = Settings(limits=Limits(retry_base_s=0.001, retry_max_s=0.005, model_retries=2))
    supervisor = open_runtime(store, settings, default_client(), check_model=check_model)
    yield supervisor
    await supervisor.stop()
    supervisor.close()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `lace ARGV` in this process: (exit code, stdout, stderr)."""
    from lace.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
