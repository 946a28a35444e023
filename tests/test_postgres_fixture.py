"""The test plumbing for PostgreSQL: a throwaway server, a fresh database per test, both engines."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from lace.store.db import HEAD_REVISION
from tests import postgres
from tests.conftest import query, snapshot

pytestmark = pytest.mark.both_engines

REPOSITORY = Path(__file__).resolve().parent.parent


def tables_of(url: str) -> list[str]:
    return [name for (name,) in postgres.query(
        url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_an_empty_database_of_its_own(postgres_url: str, turn: int) -> None:
    # whichever turn runs second would find the table of the first in a shared database
    assert postgres_url.startswith("postgresql://postgres@127.0.0.1:")
    assert tables_of(postgres_url) == []
    postgres.query(postgres_url, "CREATE TABLE leftover (turn INTEGER)")
    postgres.query(postgres_url, "INSERT INTO leftover VALUES (?)", turn)
    assert tables_of(postgres_url) == ["leftover"]


def test_a_fresh_database_is_dropped_afterwards_even_with_a_connection_left_open(
        postgres_server: postgres.PostgresServer) -> None:
    with postgres_server.fresh_database() as first:
        postgres.query(first, "CREATE TABLE leftover (turn INTEGER)")
        left_open = psycopg.connect(first)  # a store a test forgot to close
        with postgres_server.fresh_database() as second:
            assert second != first and tables_of(second) == []
    names = [url.rsplit("/", 1)[1] for url in (first, second)]
    assert postgres.query(postgres_server.url(), "SELECT datname FROM pg_database "
                          "WHERE datname IN (?, ?)", *names) == []
    with pytest.raises(psycopg.OperationalError):
        left_open.execute("SELECT 1")
    left_open.close()


def test_the_server_runs_as_postgres_on_loopback_in_a_folder_outside_pytest(
        postgres_server: postgres.PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> None:
    (user, address, fsync), = postgres.query(
        postgres_server.url(), "SELECT current_user, inet_server_addr()::text, "
        "current_setting('fsync')")
    assert (user, address, fsync) == ("postgres", "127.0.0.1/32", "off")
    assert not postgres_server.folder.is_relative_to(tmp_path_factory.getbasetemp().parent)
    owner = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert {postgres_server.folder.stat().st_uid, postgres_server.data.stat().st_uid} == {owner}
    with psycopg.connect(host=str(postgres_server.folder), port=postgres_server.port,
                         user="postgres", dbname="postgres") as by_socket:
        assert by_socket.execute("SELECT 1").fetchone() == (1,)


def test_query_and_snapshot_read_both_engines_alike(db_path: Path | str) -> None:
    query(db_path, "CREATE TABLE zebra (id INTEGER PRIMARY KEY, body TEXT)")
    query(db_path, "CREATE TABLE aa (id INTEGER PRIMARY KEY, body TEXT)")
    query(db_path, "CREATE TABLE a_b (id INTEGER PRIMARY KEY, body TEXT)")
    assert query(db_path, "INSERT INTO zebra (id, body) VALUES (?, ?)", 2, "50% sure?") == []
    query(db_path, "INSERT INTO zebra (id, body) VALUES (1, 'why? 100%')")
    query(db_path, "INSERT INTO aa (id, body) VALUES (?, 'it''s ? %')", 7)
    assert query(db_path, "SELECT body FROM zebra WHERE body LIKE '%?%' AND id > ? ORDER BY id",
                 0) == [("why? 100%",), ("50% sure?",)]
    assert query(db_path, "SELECT COUNT(*) FROM zebra WHERE body = ?", "nothing") == [(0,)]
    taken = snapshot(db_path)
    assert list(taken) == ["a_b", "aa", "zebra"]  # byte order, as SQLite lists them
    assert taken == {"a_b": [], "aa": [(7, "it's ? %")],
                     "zebra": [(1, "why? 100%"), (2, "50% sure?")]}


def test_unchanged_sees_a_write_on_both_engines(db_path: Path | str, unchanged: object) -> None:
    query(db_path, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    with pytest.raises(AssertionError), unchanged():  # type: ignore[operator]
        query(db_path, "INSERT INTO notes (id, body) VALUES (?, ?)", 1, "written")


def test_db_path_is_a_file_for_sqlite_and_a_url_for_postgresql(
        db_path: Path | str, request: pytest.FixtureRequest) -> None:
    engine = request.node.callspec.id
    assert isinstance(db_path, str) == (engine == "postgresql")
    assert str(db_path).startswith("postgresql://") == (engine == "postgresql")


@pytest.fixture
def upgrades(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs that lace migrates from now on (it still migrates them)."""
    import lace.store.db

    seen: list[str] = []
    real = lace.store.db.upgrade

    def recorded(url: str, revision: str = "head") -> None:
        seen.append(url)
        real(url, revision)

    monkeypatch.setattr(lace.store.db, "upgrade", recorded)
    return seen


def test_the_store_opens_a_copy_of_the_migrated_template_without_migrating_it(
        upgrades: list[str], store: object, db_path: Path | str) -> None:
    from lace.store import resolve_db_url
    from lace.store.revisions import HEAD_REVISION

    assert resolve_db_url(str(db_path)) not in upgrades
    assert query(db_path, "SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]
    assert query(db_path, "SELECT COUNT(*) FROM threads") == [(0,)]
    if isinstance(db_path, Path):
        assert db_path.stat().st_mode & 0o777 == 0o600  # as lace makes a new file


def test_a_write_to_a_copy_leaves_the_template_as_it_was(
        store: object, db_path: Path | str, request: pytest.FixtureRequest,
        tmp_path: Path) -> None:
    from tests.conftest import POSTGRES_TEMPLATE, write_migrated_file

    query(db_path, "INSERT INTO alembic_version (version_num) VALUES ('written_here')")
    assert len(query(db_path, "SELECT * FROM alembic_version")) == 2
    if isinstance(db_path, Path):
        template: Path | str = tmp_path / "template.db"
        write_migrated_file(template, request.getfixturevalue("sqlite_template"))
    else:
        template = db_path.rsplit("/", 1)[0] + "/" + POSTGRES_TEMPLATE
    assert query(template, "SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]


def test_placeholders_become_psycopg_ones_outside_string_literals() -> None:
    assert postgres.to_psycopg("SELECT ? || '?%' WHERE a LIKE '%x' AND b = ? -- 5%") == (
        "SELECT %s || '?%%' WHERE a LIKE '%%x' AND b = %s -- 5%%")


PROBE = """
import pytest

pytestmark = pytest.mark.both_engines

def test_with_a_database(db_path):
    assert db_path

def test_with_a_store(store):
    assert store

def test_without(tmp_path):
    assert tmp_path

def test_server(postgres_url):
    assert postgres_url
"""


def run_probe(tmp_path: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A tiny pytest run with lace's fixtures, in a child process with `env` on top."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers = both_engines: on both engines\n")
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"CI", postgres.BIN_OVERRIDE, "PYTEST_XDIST_WORKER"}}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-rs",
         str(tmp_path / "test_probe.py"), *arguments],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=300, env={**environment, **env})


def outcomes(report: str) -> list[tuple[str, str]]:
    """(test id, outcome) of each line `-v` printed."""
    return [(line.split("::")[1].split()[0], line.split()[1]) for line in report.splitlines()
            if "test_probe.py::" in line and len(line.split()) > 1]


@pytest.mark.parametrize("ci", ["", "true"])
def test_without_server_binaries_the_tests_skip_but_fail_on_ci(tmp_path: Path, ci: str) -> None:
    hidden = tmp_path / "no-binaries"
    hidden.mkdir()
    done = run_probe(tmp_path, "-v", PATH=str(hidden), **{postgres.BIN_OVERRIDE: str(hidden)},
                     **({"CI": ci} if ci else {}))
    assert postgres.BINARIES_MISSING in done.stdout, done.stdout + done.stderr
    without_server = "ERROR" if ci else "SKIPPED"
    assert outcomes(done.stdout) == [
        ("test_with_a_database[sqlite]", "PASSED"),
        ("test_with_a_database[postgresql]", without_server),
        ("test_with_a_store[sqlite]", "PASSED"),
        ("test_with_a_store[postgresql]", without_server),
        ("test_without", "PASSED"),
        ("test_server", without_server)], done.stdout
    assert done.returncode == (1 if ci else 0)
