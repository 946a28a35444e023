"""The `token_grants` table: the tokens each lace process has set aside for its model calls
under each token cap (`owner`: the capped subtree's root), see lace_0019. A process's grant
counts while its `processes` row is live; a process that dies gives it back that way."""

from __future__ import annotations

import time
from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from lace.store import schema
from lace.store.prepared import Prepared
from lace.store.rows import Rows

_grants = schema.token_grants
SPEND = Prepared(_grants.update().where(
    _grants.c.owner == sa.bindparam("grant_owner"),
    _grants.c.process_id == sa.bindparam("holder")).values(
        tokens=sa.case((_grants.c.tokens > sa.bindparam("spent"),
                        _grants.c.tokens - sa.bindparam("spent")), else_=0)))
HELD = Prepared(sa.select(_grants.c.process_id, _grants.c.tokens)
                .join(schema.processes, schema.processes.c.id == _grants.c.process_id)
                .where(_grants.c.owner == sa.bindparam("grant_owner"),
                       schema.processes.c.expires_at >= sa.bindparam("now")))
GIVE_BACK = Prepared(_grants.delete().where(_grants.c.owner == sa.bindparam("grant_owner"),
                                            _grants.c.process_id == sa.bindparam("holder")))


def _added(insert: sqlite.Insert | postgresql.Insert) -> sa.ClauseElement:
    return insert.values(owner=sa.bindparam("grant_owner"), process_id=sa.bindparam("holder"),
                         tokens=sa.bindparam("tokens")).on_conflict_do_update(
        index_elements=[_grants.c.owner, _grants.c.process_id],
        set_={"tokens": _grants.c.tokens + insert.excluded.tokens})


ADD = Prepared(_added(sqlite.insert(_grants)), postgresql=_added(postgresql.insert(_grants)))


class GrantRows(Rows):
    """Tokens set aside per capped subtree and process."""

    def held(self, owner: str, holder: str) -> tuple[int, int]:
        """What the live processes hold for `owner`'s subtree together, and what `holder`
        holds of it."""
        rows = HELD.rows(self.raw, {"grant_owner": owner, "now": time.time()})
        return (sum(int(row["tokens"]) for row in rows),
                sum(int(row["tokens"]) for row in rows if row["process_id"] == holder))

    def add(self, owner: str, holder: str, tokens: int) -> None:
        """Set `tokens` more aside for process `holder` under `owner`'s cap."""
        ADD.send(self.raw, {"grant_owner": owner, "holder": holder, "tokens": tokens})

    def spend(self, holder: str, spent: Mapping[str, int | None]) -> None:
        """Take what calls used from `holder`'s grants (never below 0); None gives the whole
        grant back (the process has no call in flight there)."""
        for owner, tokens in spent.items():
            if tokens is None:
                GIVE_BACK.send(self.raw, {"grant_owner": owner, "holder": holder})
            else:
                SPEND.send(self.raw, {"grant_owner": owner, "holder": holder, "spent": tokens})
