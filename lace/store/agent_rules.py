"""Agent verbs on top of the board rules: topics, stopping and resuming subtrees, usage sums."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from lace.core import notifications
from lace.core.agents import RESUMABLE_STATUSES
from lace.core.clock import now_iso
from lace.core.errors import LaceError, NotFoundError
from lace.core.ids import root_of
from lace.core.records import Agent, Approval
from lace.core.secrets import mask_data
from lace.core.tasks import ACTIVE_STATUSES
from lace.core.usage import CallGroup
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.leases import LeaseVerbs
from lace.store.task_rules import TaskRules


def _whole_sum(column: sa.ColumnElement[int]) -> sa.ColumnElement[int]:
    """SUM of a BIGINT column as a whole number: PostgreSQL's SUM of one is NUMERIC."""
    return sa.cast(sa.func.sum(column), sa.BigInteger)


@dataclass(frozen=True)
class Usage:
    """What a subtree (an agent and everything below it) has used."""

    tokens: int
    cost_usd: float
    turns: int
    reserved: int = 0
    """Tokens set aside for model calls in flight."""


class Tx(TaskRules, LeaseVerbs):
    """All verbs of one transaction."""

    def subscribe(self, thread_id: str, topic: str) -> bool:
        """Subscribe; False if already subscribed."""
        table = schema.subscriptions
        exists = self._execute(sa.select(table.c.topic).where(
            table.c.thread_id == thread_id, table.c.topic == topic)).first()
        if exists is None:
            self.insert_subscription(thread_id, topic)
        return exists is None

    def unsubscribe(self, thread_id: str, topic: str) -> bool:
        """Unsubscribe; False if not subscribed."""
        table = schema.subscriptions
        result = self._execute(table.delete().where(table.c.thread_id == thread_id,
                                                    table.c.topic == topic))
        return bool(result.rowcount)

    def subscribers(self, root_id: str, topic: str) -> list[str]:
        """Threads of a session subscribed to `topic`, oldest subscription first."""
        table, threads = schema.subscriptions, schema.threads
        return list(self._execute(
            sa.select(table.c.thread_id).join(threads, threads.c.id == table.c.thread_id)
            .where(threads.c.root_id == root_id, table.c.topic == topic)
            .order_by(table.c.created_at, table.c.thread_id)).scalars())

    def subtree_agents(self, thread_id: str) -> list[Agent]:
        """An agent and all its descendants, in thread order."""
        return [agent for agent in self.session_agents(root_of(thread_id))
                if agent.thread_id == thread_id or agent.thread_id.startswith(f"{thread_id}.")]

    def subtree_usage(self, thread_id: str) -> Usage:
        """Tokens, cost and turns of a subtree, summed from the agent rows (each keeps its
        totals of `llm_calls`, updated in the transaction that records a call): one row per
        agent to read, not one per call."""
        row = sql.SUBTREE_USAGE.first(self.raw, {"me": thread_id, "after": f"{thread_id}.",
                                              "before": f"{thread_id}/"})
        assert row is not None  # an aggregate always has its one row
        return Usage(tokens=int(row["tokens"]), cost_usd=float(row["cost_usd"]),
                     turns=int(row["turns"]), reserved=int(row["reserved"]))

    def call_groups(self, root_id: str) -> list[CallGroup]:
        """A session's `llm_calls` summed per thread, model and day (failed calls counted
        apart), for `lace cost`."""
        calls, threads = schema.llm_calls.c, schema.threads.c
        day = sa.func.substr(calls.created_at, 1, 10)
        rows = self._execute(
            sa.select(calls.thread_id, calls.model, day.label("day"),
                      sa.func.count().label("calls"),
                      sa.func.count(calls.error).label("failed"),
                      _whole_sum(calls.prompt_tokens).label("tokens_in"),
                      _whole_sum(calls.completion_tokens).label("tokens_out"),
                      sa.func.sum(calls.cost_usd).label("cost_usd"))
            .join(schema.threads, threads.id == calls.thread_id)
            .where(threads.root_id == root_id)
            .group_by(calls.thread_id, calls.model, day)
            .order_by(calls.thread_id, calls.model, day))
        return [CallGroup(**row._mapping) for row in rows]

    def stop_subtree(self, thread_id: str, *, reason: str, by_person: bool = False) -> list[str]:
        """Stop an agent and everything below it: status `stopped` with the reason, their open
        tasks blocked with a note, and the creators of those tasks told. A stop by a person
        lasts until a person resumes the agent."""
        stopped = []
        for agent in self.subtree_agents(thread_id):
            if agent.status == "stopped":
                if by_person and not agent.stopped_by_person:
                    self.update_agent(agent.thread_id, stopped_by_person=True)
                continue
            self.update_agent(agent.thread_id, status="stopped", stop_reason=reason,
                              stopped_by_person=by_person, tokens_reserved=0)
            self.append_event(agent.thread_id, "error", {"error": f"stopped: {reason}",
                                                         "stopped": True})
            stopped.append(agent.thread_id)
            tasks, _ = self.query_tasks(root_of(agent.thread_id),
                                        where=schema.tasks.c.assigned_to == agent.thread_id)
            for task in tasks:
                if task.status in ACTIVE_STATUSES:
                    self.insert_note(task.id, agent.thread_id, f"Blocked: stopped: {reason}")
                    self.update_task(task.id, session_id=task.thread_id, actor=agent.thread_id,
                                     changes={"status": "blocked"}, reason=f"stopped: {reason}")
        self._stopped.extend(stopped)
        return stopped

    def resume_agent(self, thread_id: str) -> bool:
        """A stopped (or failed, or interrupted) agent becomes idle with a `resume` message."""
        agent = self.get_agent(thread_id)
        if agent.status not in RESUMABLE_STATUSES:
            return False
        self.update_agent(thread_id, status="idle", stop_reason=None, stopped_by_person=False)
        self.post_inbox(thread_id, sender=notifications.LACE_SENDER, kind="resume",
                        priority="high",
                        text=notifications.resumed(agent.stop_reason or agent.status))
        return True

    # approvals

    def request_approval(self, thread_id: str, tool: str, arguments: dict[str, object]) -> int:
        """A pending approval request; returns its id."""
        result = self._execute(schema.approvals.insert().values(
            thread_id=thread_id, tool=tool, arguments=mask_data(arguments, credential_values()),
            status="pending",
            created_at=now_iso()))
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    def orphan_approvals(self, thread_id: str) -> None:
        """Deny the agent's pending requests: the process that asked is gone, and the resumed
        turn asks again if it still needs the tool."""
        approvals = schema.approvals
        self._execute(approvals.update().where(approvals.c.thread_id == thread_id,
                                               approvals.c.status == "pending")
                      .values(status="denied", decided_by="lace: the process that asked ended",
                              decided_at=now_iso()))

    def get_approval(self, approval_id: int) -> Approval:
        """One approval request, or NotFoundError."""
        row = self._execute(sa.select(schema.approvals)
                            .where(schema.approvals.c.id == approval_id)).first()
        if row is None:
            raise NotFoundError(f"Unknown approval request {approval_id}.")
        return Approval(**row._mapping)

    def pending_approvals(self, root_id: str | None = None) -> list[Approval]:
        """Undecided requests, oldest first (of one session, or of all)."""
        approvals, threads = schema.approvals, schema.threads
        statement = sa.select(approvals).where(approvals.c.status == "pending")
        if root_id is not None:
            statement = statement.join(threads, threads.c.id == approvals.c.thread_id).where(
                threads.c.root_id == root_id)
        return [Approval(**row._mapping) for row in self._execute(
            statement.order_by(approvals.c.id))]

    def decide_approval(self, approval_id: int, status: str, decided_by: str) -> Approval:
        """Approve (once or for the session) or deny a pending request."""
        approval = self.get_approval(approval_id)
        if approval.status != "pending":
            raise LaceError(f"Approval request {approval_id} was already decided "
                            f"({approval.status} by {approval.decided_by}).")
        self._execute(schema.approvals.update().where(schema.approvals.c.id == approval_id)
                      .values(status=status, decided_by=decided_by, decided_at=now_iso()))
        if status == "approved_session":  # the same tool's other waiting requests, too
            session_id = root_of(approval.thread_id)
            for other in self.pending_approvals(session_id):
                if other.tool == approval.tool:
                    self._execute(schema.approvals.update()
                                  .where(schema.approvals.c.id == other.id)
                                  .values(status="approved", decided_by=decided_by,
                                          decided_at=now_iso()))
        return self.get_approval(approval_id)

    def allowed_for_session(self, root_id: str, tool: str) -> bool:
        """Whether the person allowed `tool` for the whole session."""
        approvals, threads = schema.approvals, schema.threads
        row = self._execute(sa.select(approvals.c.id)
                            .join(threads, threads.c.id == approvals.c.thread_id)
                            .where(threads.c.root_id == root_id, approvals.c.tool == tool,
                                   approvals.c.status == "approved_session")).first()
        return row is not None
