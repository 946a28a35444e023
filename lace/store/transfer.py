"""Moving a session between databases: `export_session` reads it whole into one document (the
shape in `export_format`), `import_session` writes a checked document back under new ids where
its own clash, every reference rewritten (in text too: conversations name tasks and threads)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from lace.config import Limits
from lace.core import ids
from lace.core.agents import HELD_STATUSES
from lace.core.clock import now_iso
from lace.core.secrets import mask_data
from lace.core.text import map_strings
from lace.core.version import __version__
from lace.paths import credential_values
from lace.store import schema
from lace.store.export_format import FORMAT, VERSION, SessionDocument
from lace.store.tx import Tx

LOCAL_COLUMNS = ("lease_holder", "lease_epoch", "host", "workspace", "inert")
"""An agent's claim by a process of the database it came from, the host and folder it was
bound to, and whether it was inert there: meaningless elsewhere (an imported agent is inert
until a person resumes its session, and then runs where they resume it)."""
LOCAL_TRACE = ("trace_parent",)
"""The trace a thread (or a waiting helper's plan) continues: of the database it came from (an
imported session starts a trace of its own)."""


@dataclass(frozen=True)
class Imported:
    """What `import_session` wrote: the session's id here, the approvals it left out, and the
    waiting helpers' plans it reset (this board's spawn limits, no worktree of the file's)."""

    session: str
    approvals_dropped: int
    plans_reset: int = 0


def _reset_plan(task: dict[str, Any]) -> bool:
    """A waiting task's planned helper as this board would plan it: under lace's default spawn
    limits (the file's may be none at all), and with no worktree (the file names folders and
    repositories of another machine, where git would make it one). Whether it changed."""
    plan = (task.get("held_assignment") or {}).get("agent")
    if plan is None:
        return False
    defaults = Limits()
    reset = {**plan, "worktree": None, "limits": {
        "max_depth": defaults.max_depth, "max_children": defaults.max_children,
        "spawns_per_minute": defaults.spawns_per_minute}}
    task["held_assignment"] = {**task["held_assignment"], "agent": reset}
    return bool(reset != plan)


def _rows(tx: Tx, table: sa.Table, where: sa.ColumnElement[bool], *,
          join: bool = True, drop: tuple[str, ...] = (),
          order: list[sa.ColumnElement[Any]] | None = None) -> list[dict[str, Any]]:
    """Rows of `table` in the session (`where`, over `threads` when `join`), in the order they
    were written: by integer id, else by time (or by `order`)."""
    threads = schema.threads
    columns = [column for column in table.c if column.name not in drop]
    statement = sa.select(*columns)
    if join:
        statement = statement.join(threads, threads.c.id == table.c.thread_id)
    id_column = table.c.get("id")
    if order is None and id_column is not None and isinstance(id_column.type, sa.Integer):
        order = [id_column]
    elif order is None:
        order = [table.c.created_at, *([id_column] if id_column is not None else [])]
    return [dict(row._mapping) for row in tx.connection.execute(
        statement.where(where).order_by(*order))]


def export_session(tx: Tx, root_id: str) -> dict[str, Any]:
    """The whole session as one JSON-ready document, credential values masked."""
    tx.threads.get_session(root_id)
    in_session = schema.threads.c.root_id == root_id
    tasks = _rows(tx, schema.tasks, schema.tasks.c.thread_id == root_id, join=False)
    notes = _rows(tx, schema.task_notes, schema.task_notes.c.task_id.in_(
        [task["id"] for task in tasks]), join=False, drop=("id",))
    for task in tasks:
        held_plan = (task["held_assignment"] or {}).get("agent") or {}
        for column in LOCAL_TRACE:
            held_plan.pop(column, None)
        task["notes"] = [{key: note[key] for key in ("author", "content", "created_at")}
                         for note in notes if note["task_id"] == task["id"]]
    edges = _rows(tx, schema.task_dependencies, schema.task_dependencies.c.task_id.in_(
        [task["id"] for task in tasks]), join=False,
        order=[schema.task_dependencies.c.created_at])
    created = {task["id"]: task["created_at"] for task in tasks}
    edges.sort(key=lambda edge: (edge["created_at"], created[edge["task_id"]],  # by time, so
                                 created[edge["blocked_by"]]))  # a renamed id keeps its place
    agents = _rows(tx, schema.agent_metadata, in_session, drop=LOCAL_COLUMNS)
    calls = _rows(tx, schema.llm_calls, in_session, drop=("id",))
    document = {
        "format": FORMAT, "version": VERSION, "session": root_id, "exported_at": now_iso(),
        "lace_version": __version__,
        "threads": _rows(tx, schema.threads, in_session, join=False, drop=LOCAL_TRACE),
        "agents": agents, "tasks": tasks,
        "events": _rows(tx, schema.events, in_session),
        "inbox": _rows(tx, schema.inbox, in_session),
        "llm_calls": calls,
        "subscriptions": _rows(tx, schema.subscriptions, in_session),
        "approvals": _rows(tx, schema.approvals, in_session, drop=("id",)),
        "task_dependencies": edges,
        "usage": {"calls": len(calls),
                  "tokens_in": sum(call["prompt_tokens"] for call in calls),
                  "tokens_out": sum(call["completion_tokens"] for call in calls),
                  "cost_usd": sum(call["cost_usd"] or 0.0 for call in calls)},
    }
    return dict(mask_data(document, credential_values()))


def _new_ids(tx: Tx, document: SessionDocument) -> dict[str, str]:
    """Old id to new id, for the session's root (its children follow it) and each task whose
    id this database already has; empty when nothing clashes."""
    renamed: dict[str, str] = {}
    threads = schema.threads.c
    if tx.connection.execute(sa.select(threads.id).where(
            threads.id == document.session)).first() is not None:
        renamed[document.session] = _unused(tx, schema.threads, ids.new_root_thread_id)
    taken = {task.id for task in tx.tasks.by_ids([task.id for task in document.tasks])}
    for task_id in sorted(taken):
        renamed[task_id] = _unused(tx, schema.tasks, ids.new_task_id, set(renamed.values()))
    return renamed


def _unused(tx: Tx, table: sa.Table, make: Callable[[], str],
            also_taken: set[str] | None = None) -> str:
    while True:
        candidate = str(make())
        if candidate not in (also_taken or set()) and tx.connection.execute(
                sa.select(table.c.id).where(table.c.id == candidate)).first() is None:
            return candidate


def _rewriter(renamed: dict[str, str]) -> Callable[[str], str]:
    """A function giving each string with every renamed id in it replaced (a thread id
    `lace_..._abc.1.2` follows its root)."""
    if not renamed:
        return lambda text: text
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, renamed)) + r")\b")
    return lambda text: pattern.sub(lambda match: renamed[match.group()], text)


def _inbox_ids(tx: Tx, old: list[int]) -> dict[int, int]:
    """New ids for a document's inbox rows, in their order: their gaps (the rows folded into a
    batch's notice) kept, unless the ids span far more than their number (a file's odd ids),
    which are numbered one after another."""
    ordered = sorted(old)
    if ordered and ordered[-1] - ordered[0] <= 2 * len(ordered) + 1000:
        fresh = _fresh_ids(tx, schema.inbox, ordered[-1] - ordered[0] + 1)
        return {row_id: fresh[row_id - ordered[0]] for row_id in ordered}
    return dict(zip(ordered, _fresh_ids(tx, schema.inbox, len(ordered)), strict=True))


def _fresh_ids(tx: Tx, table: sa.Table, count: int) -> list[int]:
    """`count` ids, ascending, that no other row of `table` takes. On PostgreSQL drawn from the
    table's sequence: a process writing beside the import (its rows not yet committed) draws
    other ids, and so do the rows written after it (an id given explicitly would leave the
    sequence behind); on SQLite those after the highest (its writes run one at a time)."""
    if not count:
        return []
    if tx.connection.dialect.name == "postgresql":
        return sorted(tx.connection.execute(sa.text(
            "SELECT nextval(pg_get_serial_sequence(:table, 'id')) "
            "FROM generate_series(1, :count)"), {"table": table.name, "count": count}).scalars())
    first = int(tx.connection.execute(sa.select(sa.func.max(table.c.id))).scalar() or 0) + 1
    return list(range(first, first + count))


_NO_CALLS = {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0}


def _call_totals(calls: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each agent's totals of its model calls, summed in the order they were made (as each call
    added to them): what a file says of them is not believed, or it could hide what a session
    spent from its budget."""
    totals: dict[str, dict[str, Any]] = {}
    for call in calls:
        total = totals.setdefault(call["thread_id"], dict(_NO_CALLS))
        total["tokens_in"] += call["prompt_tokens"]
        total["tokens_out"] += call["completion_tokens"]
        total["cost_usd"] += call["cost_usd"] or 0.0
    return totals


def _new_batches(tx: Tx, data: dict[str, Any]) -> None:
    """Fresh ids for the document's batches of tasks that this database already has, so none
    can join a batch of another session (and hold or release its notices)."""
    rows = [*((task, "batch") for task in data["tasks"]),
            *((item, "held_for") for item in data["inbox"])]
    named = {row[key] for row, key in rows if row.get(key) is not None}
    tasks, inbox = schema.tasks.c, schema.inbox.c
    taken = set(tx.connection.execute(sa.select(tasks.batch).where(tasks.batch.in_(named))
                                      .union(sa.select(inbox.held_for)
                                             .where(inbox.held_for.in_(named)))).scalars())
    fresh = {batch: uuid.uuid4().hex for batch in taken}
    for row, key in rows:
        row[key] = fresh.get(row.get(key), row.get(key))


def import_session(tx: Tx, document: SessionDocument) -> Imported:
    """Write a checked document into this database (one transaction). Every agent is inert: no
    process runs it until a person resumes the session (`lace run --continue`, the app), and
    those cut off mid-turn where it came from are `interrupted` here. Approvals are left out:
    a permission is the person's, given in this database, never read from a file; a waiting
    task's planned helper gets lace's default spawn limits and no worktree. Credential
    values of this process are masked."""
    renamed = _new_ids(tx, document)
    data = document.model_dump(exclude={"usage"})
    if renamed:  # each is a copy of the whole session
        data = map_strings(data, _rewriter(renamed))
    data = mask_data(data, credential_values())
    inbox_ids = _inbox_ids(tx, [item["id"] for item in data["inbox"]])
    for item in data["inbox"]:
        item["id"] = inbox_ids[item["id"]]
    for event, event_id in zip(data["events"], _fresh_ids(tx, schema.events, len(data["events"])),
                               strict=True):
        event["id"] = event_id
        if "inbox_id" in event["data"]:
            event["data"]["inbox_id"] = inbox_ids[event["data"]["inbox_id"]]
        if isinstance(event["data"].get("inbox_ids"), list):
            event["data"]["inbox_ids"] = [inbox_ids[old] for old in event["data"]["inbox_ids"]]
    _new_batches(tx, data)
    totals = _call_totals(data["llm_calls"])
    for agent in data["agents"]:
        agent.update(inert=True, **totals.get(agent["thread_id"], _NO_CALLS))
        if agent["status"] in HELD_STATUSES:
            agent["status"] = "interrupted"
    notes = sorted(({**note, "task_id": task["id"]} for task in data["tasks"]
                    for note in task.pop("notes")), key=lambda note: note["created_at"])
    plans_reset = sum(_reset_plan(task) for task in data["tasks"])
    threads = sorted(data["threads"], key=lambda thread: thread["id"].count("."))
    for table, rows in ((schema.threads, threads), (schema.tasks, data["tasks"]),
                        (schema.agent_metadata, data["agents"]), (schema.task_notes, notes),
                        (schema.inbox, data["inbox"]), (schema.events, data["events"]),
                        (schema.llm_calls, data["llm_calls"]),
                        (schema.subscriptions, data["subscriptions"]),
                        (schema.task_dependencies, data["task_dependencies"])):
        if rows:
            tx.connection.execute(table.insert(), rows)
    return Imported(session=str(data["session"]), approvals_dropped=len(data["approvals"]),
                    plans_reset=plans_reset)
