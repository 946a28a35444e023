"""A PostgreSQL server set up by an operator, as docs/postgres.md tells, then turned against
lace: the roles and grants of the docs, run literally, serve every command of the app's role;
a grant missing, a server that only reads (a standby after a failover), a statement_timeout on
the role and a connection limit each end in one line that names the fix, or are survived,
never in a traceback or a wait without end."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from lace.store import open_database
from tests import postgres
from tests.faults import terminate_backends
from tests.processes import lace

DOCS = Path(__file__).parents[2] / "docs" / "postgres.md"
DEMO_FAN_OUT = "fan out three tasks"


@dataclass(frozen=True)
class Roles:
    """The docs' two roles on a database of their own: the owner's URL, the app's URL, and
    a URL of the server's superuser on that database (the DBA)."""

    owner: str
    app: str
    admin: str
    app_role: str


def docs_grants() -> list[str]:
    """The SQL of 'Roles and grants' in docs/postgres.md, statement by statement, as a person
    pastes it into psql (`\\c` switches the database)."""
    section = DOCS.read_text().split("## Roles and grants", 1)[1]
    block = re.search(r"```sql\n(.*?)```", section, re.S)
    assert block, "docs/postgres.md lost its grants"
    text = re.sub(r"--[^\n]*", "", block[1])
    return [line.strip() for line in re.split(r";|\n(?=\\c)", text) if line.strip()]


@pytest.fixture
def roles(postgres_server: postgres.PostgresServer) -> Iterator[Roles]:
    """The docs' roles and grants, run literally (the names made unique), then `lace db
    upgrade` as the owner, as the docs say."""
    suffix = uuid.uuid4().hex[:8]
    names = {"lace_owner": f"lace_owner_{suffix}", "lace_worker": f"lace_worker_{suffix}"}
    database = f"lace_{suffix}"
    current = postgres_server.url()
    for statement in docs_grants():
        for name, unique in names.items():
            statement = statement.replace(name, unique)
        statement = re.sub(r"\bDATABASE lace\b", f"DATABASE {database}", statement)
        if statement.startswith("\\c"):
            current = postgres_server.url(database)
            continue
        with psycopg.connect(current, autocommit=True) as admin:
            admin.execute(statement.replace("'...'", "'unused'"))
    base = f"postgresql://{{}}@127.0.0.1:{postgres_server.port}/{database}"
    found = Roles(owner=base.format(names["lace_owner"]), app=base.format(names["lace_worker"]),
                  admin=postgres_server.url(database), app_role=names["lace_worker"])
    upgraded = lace(Path("/nonexistent"), "db", "upgrade", "--db", found.owner)
    assert upgraded.returncode == 0, upgraded.stderr
    try:
        yield found
    finally:
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            for role in names.values():
                admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def as_dba(roles: Roles, sql: str) -> None:
    with psycopg.connect(roles.admin, autocommit=True) as admin:
        admin.execute(sql)


def assert_one_line(stderr: str, *words: str) -> None:
    """The run ended with one `lace: error:` line holding `words`, and no traceback."""
    assert "Traceback" not in stderr and "never retrieved" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("lace: error:"), stderr
    for word in words:
        assert word in last, last


def test_the_docs_grants_serve_every_command_of_the_apps_role(
        roles: Roles, tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = lace(home, "run", "--db", roles.app, "--json", DEMO_FAN_OUT)
    assert ran.returncode == 0, ran.stderr
    detached = lace(home, "run", "--detach", "--db", roles.app, DEMO_FAN_OUT)
    assert detached.returncode == 0, detached.stderr
    session = detached.stdout.strip()
    continued = lace(home, "run", "--db", roles.app, "--continue", session)
    assert continued.returncode == 0, continued.stderr
    waited = lace(home, "wait", "--db", roles.app, "--timeout", "60", session)
    assert waited.returncode == 0 and "All 3 tasks are done." in waited.stdout, waited.stderr
    with_workers = lace(home, "run", "--db", roles.app, "--workers", "1", DEMO_FAN_OUT)
    assert with_workers.returncode == 0, with_workers.stderr
    for command in (["tasks", "--all"], ["threads"], ["cost"], ["sessions"], ["approvals"]):
        shown = lace(home, *command, "--db", roles.app, "--json")
        assert shown.returncode == 0, (command, shown.stderr)


def test_a_grant_missing_mid_run_ends_it_with_one_line_naming_the_fix(
        roles: Roles, tmp_path: Path) -> None:
    as_dba(roles, f"REVOKE INSERT ON task_notes FROM {roles.app_role}")  # the helpers' notes
    started = time.monotonic()
    ran = lace(tmp_path / "home", "run", "--db", roles.app, "--timeout", "60", DEMO_FAN_OUT)
    assert time.monotonic() - started < 50, "the run waited instead of ending"
    assert ran.returncode == 2, ran.stderr
    assert_one_line(ran.stderr, "permission denied for table task_notes", "Roles and grants")


def test_a_server_that_only_reads_is_named_as_such(roles: Roles, tmp_path: Path) -> None:
    """A standby (default_transaction_read_only, 25006), as clients meet it after a failover."""
    with psycopg.connect(roles.admin, autocommit=True) as admin:
        database = admin.execute("SELECT current_database()").fetchone()
        assert database is not None
        admin.execute(f'ALTER DATABASE "{database[0]}" SET default_transaction_read_only = on')
    terminate_backends(roles.admin)
    ran = lace(tmp_path / "home", "run", "--db", roles.app, "--timeout", "60", DEMO_FAN_OUT)
    assert ran.returncode == 2, ran.stderr
    assert_one_line(ran.stderr, "read-only transaction", "point lace at the primary")


def test_a_statement_timeout_on_the_role_cancels_no_statement_of_lace(
        roles: Roles, tmp_path: Path) -> None:
    """And an idle-in-transaction timeout set low on the role ends no transaction of lace."""
    as_dba(roles, f"ALTER ROLE {roles.app_role} SET statement_timeout = '1ms'")
    as_dba(roles, f"ALTER ROLE {roles.app_role} SET idle_in_transaction_session_timeout = 1")
    database = open_database(roles.app)
    try:
        with database.engine.connect() as connection:
            assert connection.exec_driver_sql("SHOW statement_timeout").scalar() == "0"
            assert connection.exec_driver_sql(
                "SHOW idle_in_transaction_session_timeout").scalar() == "10s"
    finally:
        database.engine.dispose()
    ran = lace(tmp_path / "home", "run", "--db", roles.app, "--timeout", "60", DEMO_FAN_OUT)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.slow
def test_a_connection_limit_too_low_is_named_with_its_fix(
        roles: Roles, tmp_path: Path) -> None:
    """lace keeps trying (another client may let go), and says what to change."""
    as_dba(roles, f"ALTER ROLE {roles.app_role} CONNECTION LIMIT 2")
    ran = lace(tmp_path / "home", "run", "--db", roles.app, "--timeout", "15", DEMO_FAN_OUT)
    assert "Traceback" not in ran.stderr, ran.stderr
    assert "refuses more connections" in ran.stderr, ran.stderr
    assert "raise max_connections (or the CONNECTION LIMIT of lace's role)" in ran.stderr
