"""Row verbs of the `agent_metadata` table, with the agent rows one transaction already read."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from lace.core.assignee import ACP_PROVIDER
from lace.core.clock import now_iso
from lace.core.errors import NotFoundError
from lace.core.ids import root_of
from lace.core.records import Agent, NewAgent
from lace.core.secrets import mask_data
from lace.core.tool_names import needs_workspace
from lace.core.usage import Usage
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.prepared import Prepared, insert_into, update_by_key
from lace.store.rows import Rows, record

TOTALS = frozenset({"tokens_in", "tokens_out", "cost_usd", "turns"})
"""The columns of an agent row that subtree usage sums."""


class AgentCache:
    """Agent rows read or written in one transaction, so a turn reads each once; a verb that
    changes a row forgets it."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._usage: dict[str, Usage] = {}  # by subtree, with this transaction's own changes

    def get(self, thread_id: str) -> Agent | None:
        """The row as this transaction last saw it, if it did."""
        return self._agents.get(thread_id)

    def keep(self, agent: Agent) -> Agent:
        """Remember `agent` as it is now; returns it."""
        self._agents[agent.thread_id] = agent
        return agent

    def forget(self, thread_id: str) -> None:
        """The row is about to change: read it again next time."""
        self._agents.pop(thread_id, None)

    def __contains__(self, thread_id: str) -> bool:
        return thread_id in self._agents

    def usage(self, owner: str) -> Usage | None:
        """What the subtree of `owner` used, as this transaction last summed it, if it did."""
        return self._usage.get(owner)

    def keep_usage(self, owner: str, usage: Usage) -> Usage:
        """Remember the sum over the subtree of `owner`; returns it."""
        self._usage[owner] = usage
        return usage

    def used(self, thread_id: str, more: Usage) -> None:
        """This transaction added `more` to the totals of `thread_id`'s row: every sum kept
        over a subtree holding it follows."""
        for owner, usage in self._usage.items():
            if thread_id == owner or thread_id.startswith(f"{owner}."):
                self._usage[owner] = usage + more

    def forget_usage(self) -> None:
        """Totals changed by an amount not known here: sum again next time."""
        self._usage.clear()


@dataclass(frozen=True)
class Claim:
    """An agent row locked to start a turn (`AgentRows.to_claim`), and what was read with it:
    whether its thread has a pending inbox row that starts a turn, whether it has its own
    worktree, whether it has had no turn yet (`untold`: no events but a stop's `error` rows; its
    first turn, which reads none), and then the row of the task it was created for (for
    `TaskRows.keep`)."""

    agent: Agent
    waking: bool
    worktree: bool
    untold: bool
    first_task: dict[str, Any] | None


def _task_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The task row a statement read with an agent row (its columns named TASK_COLUMN), if
    any."""
    task = {column.name: row[sql.TASK_COLUMN.format(column.name)] for column in schema.tasks.c}
    return None if task["id"] is None else task


class AgentRows(Rows):
    """One agent per thread that runs turns: its model, status, lease, totals and place."""

    def __init__(self, connection: sa.Connection, raw: Any, cache: AgentCache) -> None:
        super().__init__(connection, raw)
        self.cache = cache

    def create(self, new: NewAgent) -> Agent:
        """Write the `agent_metadata` row of a thread (its instructions credential-masked); a
        helper of an inert agent (one spawned by a person's task in an imported session not
        yet resumed) is inert too."""
        now = now_iso()
        parent = self.find(new.parent_thread_id) if new.parent_thread_id else None
        host, workspace = (new.place.host, new.place.workspace) if new.place else \
            (parent.host, parent.workspace) if parent else (None, None)
        if not needs_workspace(new.tools):
            host = workspace = None
        agent = Agent(
            thread_id=new.thread_id, name=new.name, provider=new.provider, model=new.model,
            profile=new.profile, type=new.type, status=new.status,
            created_for_task=new.created_for_task, parent_thread_id=new.parent_thread_id,
            current_task=new.current_task, tools=new.tools,
            instructions=mask_data(new.instructions, credential_values()), budget=new.budget,
            stop_reason=None, turns=0, lease_holder=None, tokens_in=0, tokens_out=0,
            cost_usd=0.0, created_at=now, updated_at=now, host=host, workspace=workspace,
            inert=bool(parent and parent.inert))
        values = vars(agent)
        insert_into("agent_metadata", tuple(values)).send(self.raw, values)
        return self.cache.keep(agent)

    def to_claim(self, thread_id: str) -> Claim | None:
        """The agent row, locked for this transaction, with what is read with it (`Claim`);
        None when it has no row, or on PostgreSQL when another transaction holds it (it is
        being claimed there: SKIP LOCKED)."""
        found = self._find_with(sql.AGENT_TO_CLAIM, thread_id)
        if found is None:
            return None
        agent, row = found
        return Claim(agent, bool(row["waking"]), bool(row["worktree"]), bool(row["untold"]),
                     _task_of(row))

    def find_waking(self, thread_id: str) -> tuple[Agent, bool] | None:
        """`find`, and whether the thread has a pending inbox row that starts a turn: one
        read."""
        found = self._find_with(sql.AGENT_WAKING, thread_id)
        return None if found is None else (found[0], bool(found[1]["waking"]))

    def get_with_open_work(self, thread_id: str) -> tuple[Agent, int | None]:
        """`get`, and for a `new:` helper whose current task is completed, how many other
        tasks assigned to it are pending or in progress and wait for none (else None): one
        read."""
        found = self._find_with(sql.AGENT_WITH_OPEN_WORK, thread_id)
        if found is None:
            raise NotFoundError(f"Thread {thread_id!r} has no agent.")
        open_work = found[1]["open_work"]
        return found[0], None if open_work is None else int(open_work)

    def get_with_current_task(self, thread_id: str,
                              ) -> tuple[Agent, dict[str, Any] | None]:
        """`get`, and for an agent created for a task, the row of its current task if it has
        one (for `TaskRows.keep`): one read."""
        found = self._find_with(sql.AGENT_WITH_CURRENT_TASK, thread_id)
        if found is None:
            raise NotFoundError(f"Thread {thread_id!r} has no agent.")
        agent, row = found
        return agent, _task_of(row)

    def _find_with(self, statement: Prepared,
                   thread_id: str) -> tuple[Agent, Mapping[str, Any]] | None:
        """The agent row read by `statement` (kept), and that row with the other columns it
        reads."""
        row = statement.first(self.raw, {"agent": thread_id})
        return None if row is None else (self.cache.keep(record(Agent, row)), row)

    def find(self, thread_id: str) -> Agent | None:
        """The agent row of a thread, if it has one."""
        agent = self.cache.get(thread_id)
        if agent is None:
            row = sql.AGENT_BY_ID.first(self.raw, {"agent": thread_id})
            if row is None:
                return None
            agent = self.cache.keep(record(Agent, row))
        return agent

    def get(self, thread_id: str) -> Agent:
        """The agent row of a thread, or NotFoundError."""
        agent = self.find(thread_id)
        if agent is None:
            raise NotFoundError(f"Thread {thread_id!r} has no agent.")
        return agent

    def by_ids(self, thread_ids: list[str]) -> list[Agent]:
        """The agent rows among `thread_ids` that exist."""
        missing = [thread_id for thread_id in thread_ids if thread_id not in self.cache]
        if missing:
            for row in sql.AGENTS_BY_IDS.rows(self.raw, {"agents": json.dumps(missing)}):
                self.cache.keep(record(Agent, row))
        return [agent for thread_id in thread_ids
                if (agent := self.cache.get(thread_id)) is not None]

    def count_turn(self, thread_id: str) -> None:
        """One more turn for this agent."""
        self.cache.forget(thread_id)
        sql.COUNT_TURN.send(self.raw, {"agent": thread_id})
        self.cache.used(thread_id, Usage(tokens=0, cost_usd=0.0, turns=1))

    def set_status(self, thread_id: str, status: str) -> None:
        """Change an agent's status unless it was stopped (only resuming it undoes that)."""
        self.cache.forget(thread_id)
        sql.SET_STATUS.send(self.raw, {"agent": thread_id, "new_status": status, "now": now_iso()})

    def update(self, thread_id: str, **values: Any) -> None:
        """Change columns of an agent row (text credential-masked)."""
        self._follow_totals(thread_id, values)
        self.cache.forget(thread_id)
        values = {**mask_data(values, credential_values()), "updated_at": now_iso()}
        update_by_key("agent_metadata", tuple(values)).send(
            self.raw, {**values, "key_value": thread_id})

    def _follow_totals(self, thread_id: str, values: Mapping[str, Any]) -> None:
        """Keep the subtree sums of `cache` right across a change of the row's totals (a
        test or a repair sets them): by the difference from the row as read, else
        by summing again."""
        changed = TOTALS.intersection(values)
        if not changed:
            return
        before = self.cache.get(thread_id)
        if before is None:
            self.cache.forget_usage()
            return
        difference = {name: values[name] - getattr(before, name) for name in changed}
        self.cache.used(thread_id, Usage(
            tokens=difference.get("tokens_in", 0) + difference.get("tokens_out", 0),
            cost_usd=difference.get("cost_usd", 0.0), turns=difference.get("turns", 0)))

    def of_session(self, root_id: str) -> list[Agent]:
        """Every agent row of a session."""
        rows = sql.SESSION_AGENTS.rows(self.raw, {"root": root_id})
        return [record(Agent, row) for row in rows]

    def stopped_among(self, thread_ids: Sequence[str]) -> list[str]:
        """Those of `thread_ids` whose agent is stopped (the watch asks for every running
        turn, twice a second)."""
        rows = sql.STOPPED_AMONG.rows(self.raw, {"agents": json.dumps(list(thread_ids))})
        return [str(row["thread_id"]) for row in rows]

    def cut_off(self, root_id: str, live: set[str]) -> list[str]:
        """The agents of a session, not inert, marked `interrupted`, or running or waiting for
        a holder not in `live`; in thread order. Only those rows are read (the heartbeat asks
        every few seconds, and a fan-out's session has thousands of agents)."""
        rows = sql.CUT_OFF_AGENTS.rows(self.raw, {"root": root_id,
                                               "live": json.dumps(sorted(live))})
        return [str(row["thread_id"]) for row in rows]

    def subtree(self, thread_id: str) -> list[Agent]:
        """An agent and all its descendants, in thread order."""
        return [agent for agent in self.of_session(root_of(thread_id))
                if agent.thread_id == thread_id or agent.thread_id.startswith(f"{thread_id}.")]

    def count_in(self, root_id: str, statuses: tuple[str, ...]) -> int:
        """How many agents of the session have one of `statuses`."""
        return int(sql.SESSION_AGENTS_IN.scalar(
            self.raw, {"root": root_id, "statuses": json.dumps(list(statuses))}))

    def by_session(self) -> list[tuple[str, str, bool, int, float]]:
        """For each session, its root apart from its helpers, and each status they have:
        (root id, status, whether it is the root, tokens, cost) summed over those agents."""
        agents, threads = schema.agent_metadata.c, schema.threads.c
        is_root = (threads.id == threads.root_id).label("is_root")
        rows: Sequence[Any] = self._execute(
            sa.select(threads.root_id, agents.status, is_root,
                      sa.func.sum(agents.tokens_in + agents.tokens_out),
                      sa.func.sum(agents.cost_usd))
            .join_from(schema.agent_metadata, schema.threads, threads.id == agents.thread_id)
            .group_by(threads.root_id, agents.status, is_root)).all()
        return [(str(row[0]), str(row[1]), bool(row[2]), int(row[3] or 0), float(row[4] or 0.0))
                for row in rows]

    def models(self) -> list[str]:
        """Every `provider/model` the board's agents were given (`acp:` agents aside), the
        latest first."""
        agents = schema.agent_metadata.c
        rows: Sequence[Any] = self._execute(
            sa.select(agents.provider, agents.model)
            .where(agents.provider != ACP_PROVIDER)
            .group_by(agents.provider, agents.model)
            .order_by(sa.func.max(agents.created_at).desc())).all()
        return [f"{row[0]}/{row[1]}" for row in rows]

    def sessions_with(self, statuses: tuple[str, ...]) -> dict[str, int]:
        """Each session that has agents with one of `statuses`, and how many."""
        rows = sql.SESSIONS_WITH_AGENTS_IN.rows(self.raw, {"statuses": json.dumps(list(statuses))})
        return {str(row["root_id"]): int(row["agents"]) for row in rows}

    def live_children(self, parent_id: str) -> int:
        """Children of an agent that still count against `max_children`: not stopped, and
        their task neither completed nor archived."""
        return int(sql.LIVE_CHILDREN.scalar(self.raw, {"parent": parent_id}))

    def children_since(self, parent_id: str, since: str) -> int:
        """How many agents `parent_id` spawned at or after `since` (ISO time)."""
        return int(sql.CHILDREN_SINCE.scalar(self.raw, {"parent": parent_id, "since": since}))

    def wait_edges(self, session_id: str, waiters: Iterable[str]) -> dict[str, set[str]]:
        """Who of `waiters` waits on whom in a session: each with a waiting call (`delegate`,
        `spawn_await`) not yet answered, to the assignees of the open tasks it waits for.
        Only those agents' events are read, so a check costs what it follows, not the
        session's size."""
        edges: dict[str, set[str]] = {}
        for row in sql.WAIT_EDGES.rows(self.raw, {"session": session_id,
                                                  "waiters": json.dumps(sorted(waiters))}):
            edges.setdefault(row["waiter"], set()).add(row["assignee"])
        return edges
