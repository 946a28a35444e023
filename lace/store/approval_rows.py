"""Row verbs of the `approvals` table: requests to run a tool, and the person's decisions."""

from __future__ import annotations

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.core.errors import LaceError, NotFoundError
from lace.core.ids import root_of
from lace.core.records import Approval
from lace.core.secrets import mask_data
from lace.paths import credential_values
from lace.store import schema
from lace.store.rows import Rows

_approvals, _threads = schema.approvals, schema.threads


class ApprovalRows(Rows):
    """Approval requests: asked by a turn, decided by a person (or a timeout)."""

    def request(self, thread_id: str, tool: str, arguments: dict[str, object]) -> int:
        """A pending approval request; returns its id."""
        result = self._execute(_approvals.insert().values(
            thread_id=thread_id, tool=tool, arguments=mask_data(arguments, credential_values()),
            status="pending", created_at=now_iso()))
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def orphan(self, thread_id: str) -> None:
        """Deny the agent's pending requests: the process that asked is gone, and the resumed
        turn asks again if it still needs the tool."""
        self._execute(_approvals.update().where(_approvals.c.thread_id == thread_id,
                                                _approvals.c.status == "pending")
                      .values(status="denied", decided_by="lace: the process that asked ended",
                              decided_at=now_iso()))

    def get(self, approval_id: int) -> Approval:
        """One approval request, or NotFoundError."""
        row = self._execute(sa.select(_approvals)
                            .where(_approvals.c.id == approval_id)).first()
        if row is None:
            raise NotFoundError(f"Unknown approval request {approval_id}.")
        return Approval(**row._mapping)

    def pending(self, root_id: str | None = None) -> list[Approval]:
        """Undecided requests, oldest first (of one session, or of all)."""
        statement = sa.select(_approvals).where(_approvals.c.status == "pending")
        if root_id is not None:
            statement = statement.join(_threads, _threads.c.id == _approvals.c.thread_id).where(
                _threads.c.root_id == root_id)
        return [Approval(**row._mapping) for row in self._execute(
            statement.order_by(_approvals.c.id))]

    def decide(self, approval_id: int, status: str, decided_by: str) -> Approval:
        """Approve (once or for the session) or deny a pending request."""
        approval = self.get(approval_id)
        if approval.status != "pending":
            raise LaceError(f"Approval request {approval_id} was already decided "
                            f"({approval.status} by {approval.decided_by}).")
        self._execute(_approvals.update().where(_approvals.c.id == approval_id)
                      .values(status=status, decided_by=decided_by, decided_at=now_iso()))
        if status == "approved_session":  # the same tool's other waiting requests, too
            for other in self.pending(root_of(approval.thread_id)):
                if other.tool == approval.tool:
                    self._execute(_approvals.update().where(_approvals.c.id == other.id)
                                  .values(status="approved", decided_by=decided_by,
                                          decided_at=now_iso()))
        return self.get(approval_id)

    def allowed_for_session(self, root_id: str, tool: str) -> bool:
        """Whether the person allowed `tool` for the whole session."""
        row = self._execute(sa.select(_approvals.c.id)
                            .join(_threads, _threads.c.id == _approvals.c.thread_id)
                            .where(_threads.c.root_id == root_id, _approvals.c.tool == tool,
                                   _approvals.c.status == "approved_session")).first()
        return row is not None
