"""Alembic environment: uses the connection lace hands over, or opens the configured database."""

from __future__ import annotations

from alembic import context

from lace.store import db
from lace.store.schema import EXPRESSION_INDEXES, metadata


def compared(_object: object, name: str | None, kind: str, _reflected: bool,
             _compare_to: object) -> bool:
    """Whether autogenerate compares an object: not an index on expressions, which each
    database spells back in its own words (the migration that makes it is the reference)."""
    return not (kind == "index" and name in EXPRESSION_INDEXES)


def run(connection: object) -> None:
    """Run the migrations on `connection` with batch mode, which SQLite needs for ALTERs."""
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        render_as_batch=True,
        compare_type=True,
        include_object=compared,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
elif context.is_offline_mode():
    raise SystemExit("lace migrations run online only: alembic upgrade head")
else:
    url = db.resolve_db_url(context.get_x_argument(as_dictionary=True).get("db"))
    engine = db.create_engine(url, for_migrations=True)
    with engine.connect() as outer, outer.begin():
        run(outer)
    engine.dispose()
