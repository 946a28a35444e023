"""Which schema revision this lace writes, and the refusal of a database that is not lace's or
was written by a newer lace (each engine reads the revision its own way)."""

from __future__ import annotations

from lace.core.errors import DatabaseRefusedError

HEAD_REVISION = "lace_0020"
REVISION_PREFIX = "lace_"


def _revision_number(revision: str) -> int:
    return int(revision.removeprefix(REVISION_PREFIX))


def known_revision(revision: str | None, where: str) -> str:
    """`revision`, unless it is not lace's or newer than this lace knows."""
    if revision is None or not revision.startswith(REVISION_PREFIX):
        raise DatabaseRefusedError(f"{where} is not a lace database (alembic revision {revision}).")
    if _revision_number(revision) > _revision_number(HEAD_REVISION):
        raise DatabaseRefusedError(
            f"{where} was written by a newer lace (schema {revision}, this lace knows up to "
            f"{HEAD_REVISION}); upgrade lace to open it."
        )
    return revision
