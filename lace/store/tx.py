"""One open transaction as a small object: its connection, what it caused, and its parts (row
verbs per table, and the rules over them), each built on first use.

A transaction is built for every store call (about 10 per agent turn), and most use two or
three parts: building the others anyway would cost more than the lookups they save."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

import sqlalchemy as sa

from lace.core.effects import EffectLog
from lace.store.agent_rows import AgentCache, AgentRows
from lace.store.agent_rules import AgentLifecycle
from lace.store.approval_rows import ApprovalRows
from lace.store.assignment_rules import AssignmentRules
from lace.store.db import driver
from lace.store.dependencies import EdgeRows
from lace.store.event_rows import EventRows
from lace.store.grant_rows import GrantRows
from lace.store.inbox_rows import InboxRows
from lace.store.leases import Leases, ProcessRows
from lace.store.subscriptions import SubscriptionRows
from lace.store.task_rows import NoteRows, TaskRows
from lace.store.task_rules import TaskBoard
from lace.store.thread_rows import ThreadRows
from lace.store.usage import UsageRows
from lace.store.worktree_rows import WorktreeRows

PartT = TypeVar("PartT")


class _Part(Generic[PartT]):
    """An attribute of `Tx` built by `build` on first use, then kept on the instance (like
    `functools.cached_property`, whose lock Python 3.11 takes on every first use)."""

    def __init__(self, build: Callable[[Tx], PartT]) -> None:
        self.build = build
        self.name = build.__name__

    def __set_name__(self, owner: type[Tx], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, tx: None, owner: type[Tx]) -> _Part[PartT]: ...

    @overload
    def __get__(self, tx: Tx, owner: type[Tx]) -> PartT: ...

    def __get__(self, tx: Tx | None, owner: type[Tx]) -> _Part[PartT] | PartT:
        if tx is None:
            return self
        part = self.build(tx)
        tx.__dict__[self.name] = part
        return part


class Tx:
    """One transaction: `tx.tasks.get(...)`, `tx.board.complete_task(...)`. Its verbs record
    what they caused in `effects`, a log the owner of the transaction (who opened it) gives
    and reads once it committed; without one, nobody acts on them (the command line)."""

    def __init__(self, connection: sa.Connection, effects: EffectLog | None = None,
                 agents: AgentCache | None = None) -> None:
        """`agents`: the agent rows this transaction read, when several works share it."""
        self.connection = connection
        self.raw: Any = driver(connection)
        self._effects = effects if effects is not None else EffectLog()
        self._agent_cache = agents if agents is not None else AgentCache()

    # rows, per table

    @_Part
    def threads(self) -> ThreadRows:
        return ThreadRows(self.connection, self.raw, self.agents)

    @_Part
    def agents(self) -> AgentRows:
        return AgentRows(self.connection, self.raw, self._agent_cache)

    @_Part
    def events(self) -> EventRows:
        return EventRows(self.connection, self.raw)

    @_Part
    def inbox(self) -> InboxRows:
        return InboxRows(self.connection, self.raw, self.agents, self._effects)

    @_Part
    def tasks(self) -> TaskRows:
        return TaskRows(self.connection, self.raw, self.notes, self._effects)

    @_Part
    def notes(self) -> NoteRows:
        return NoteRows(self.connection, self.raw, self._effects)

    @_Part
    def edges(self) -> EdgeRows:
        return EdgeRows(self.connection, self.raw, self._effects)

    @_Part
    def worktrees(self) -> WorktreeRows:
        return WorktreeRows(self.connection, self.raw)

    @_Part
    def subscriptions(self) -> SubscriptionRows:
        return SubscriptionRows(self.connection, self.raw)

    @_Part
    def processes(self) -> ProcessRows:
        return ProcessRows(self.connection, self.raw)

    @_Part
    def usage(self) -> UsageRows:
        return UsageRows(self.connection, self.raw, self._agent_cache)

    @_Part
    def grants(self) -> GrantRows:
        return GrantRows(self.connection, self.raw)

    @_Part
    def approvals(self) -> ApprovalRows:
        return ApprovalRows(self.connection, self.raw)

    # rules over them

    @_Part
    def leases(self) -> Leases:
        return Leases(self.agents, self.processes)

    @_Part
    def assignments(self) -> AssignmentRules:
        return AssignmentRules(
            threads=self.threads, agents=self.agents, inbox=self.inbox, tasks=self.tasks,
            notes=self.notes, edges=self.edges, worktrees=self.worktrees,
            subscriptions=self.subscriptions, effects=self._effects)

    @_Part
    def board(self) -> TaskBoard:
        return TaskBoard(threads=self.threads, tasks=self.tasks, notes=self.notes,
                         edges=self.edges, inbox=self.inbox, assignments=self.assignments)

    @_Part
    def lifecycle(self) -> AgentLifecycle:
        return AgentLifecycle(agents=self.agents, events=self.events, inbox=self.inbox,
                              tasks=self.tasks, notes=self.notes, board=self.board,
                              worktrees=self.worktrees, effects=self._effects)
