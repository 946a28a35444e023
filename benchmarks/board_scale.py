"""Board and thread scale: one lace file with 100,000 tasks and 1,000,000 events, and the time of
the reads lace makes on it (task_list, task_view, `lace tasks`, opening a 10,000-event thread in
the app, begin_turn, the app's refresh), each statement checked with EXPLAIN QUERY PLAN.

The schema comes from lace's own migrations (`open_database`: WAL, synchronous=NORMAL); the rows
are bulk-inserted for speed. The file is cached (`--db`, with a `.shape.json` beside it), so a
rerun only times the reads. Run from the repo root: `python -m benchmarks.board_scale`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import table, traced_statements
from lace.cli.board import tasks_command, threads_command
from lace.config import Budgets
from lace.runtime.board import pick_session
from lace.runtime.conversation import begin_turn
from lace.runtime.tool_runner import call_tool
from lace.store import Store, Tx, open_database, schema
from lace.store.budgets import check_before_call
from lace.tools.base import ToolContext
from lace.tui.session_view import load_session_view
from lace.tui.widgets.conversation import SHOWN_EVENTS

TARGET_MS = 50.0
BASE_TIME = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
SESSION_SPACING_S = 3600.0
SESSION_LENGTH_S = 3000.0
FLUSH_ROWS = 50_000
STATUS_WEIGHTS = {"completed": 60, "archived": 5, "pending": 15, "in_progress": 12, "blocked": 8}
PRIORITY_WEIGHTS = {"high": 20, "medium": 60, "low": 20}
TOOLS = ("task_add_note", "task_list", "task_create", "task_view", "task_update", "task_complete")
WORDS = ("the", "board", "task", "agent", "thread", "note", "result", "plan", "check", "draft",
         "review", "launch", "risk", "owner", "step", "write", "read", "test", "fix", "ship",
         "data", "model", "answer", "list", "budget", "helper", "summary", "detail")
TEXT = " ".join(random.Random(1).choices(WORDS, k=8000))


@dataclass(frozen=True)
class Shape:
    """How big the file is and how its rows are spread."""

    tasks: int = 100_000
    events: int = 1_000_000
    sessions: int = 1_000
    big_session_tasks: int = 20_000
    big_session_agents: int = 200
    long_thread_events: int = 10_000
    seed: int = 7

    @classmethod
    def tiny(cls) -> Shape:
        """The size the test uses: 1,000 tasks and 10,000 events."""
        return cls(tasks=1_000, events=10_000, sessions=10, big_session_tasks=300,
                   big_session_agents=20, long_thread_events=2_000)


@dataclass
class SessionPlan:
    """One session's ids and how many tasks and events each of its threads gets."""

    index: int
    root: str
    tasks: int
    threads: list[str]
    big: bool = False
    events: list[int] = field(default_factory=list)


def iso(seconds: float) -> str:
    """An ISO time `seconds` after BASE_TIME, in lace's format."""
    return (BASE_TIME + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, rest = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rest] + digits
        if not number:
            return digits.rjust(6, "0")


def plan_sessions(shape: Shape, rng: random.Random) -> list[SessionPlan]:
    """Sessions (the big one last, so it is the latest), their threads, and event counts that
    add up to `shape.events` exactly."""
    others = shape.sessions - 1
    plans = []
    for index in range(shape.sessions):
        big = index == others
        tasks = shape.big_session_tasks if big else (
            (shape.tasks - shape.big_session_tasks) // others
            + (index < (shape.tasks - shape.big_session_tasks) % others))
        root = f"lace_{iso(index * SESSION_SPACING_S)[:10].replace('-', '')}_{_base36(index)}"
        children = shape.big_session_agents if big else max(1, tasks // 5)
        threads = [root]
        for number in range(1, children + 1):
            threads.append(f"{root}.{number}")
            if number % 5 == 1:
                threads.append(f"{root}.{number}.1")
        plans.append(SessionPlan(index, root, tasks, threads, big))
    weights = [rng.uniform(0.5, 1.5) for plan in plans for _ in plan.threads[1:]]
    weights += [rng.uniform(0.5, 1.5) for plan in plans[:-1]]  # the other roots
    rest = shape.events - shape.long_thread_events
    counts = [int(rest * weight / sum(weights)) for weight in weights]
    for position in range(rest - sum(counts)):
        counts[position % len(counts)] += 1
    children_counts, root_counts = iter(counts[:-others or None]), iter(counts[-others:])
    for plan in plans:
        first = shape.long_thread_events if plan is plans[-1] else next(root_counts)
        plan.events = [first] + [next(children_counts) for _ in plan.threads[1:]]
    return plans


COLUMNS: dict[sa.Table, tuple[str, ...]] = {
    schema.threads: ("id", "parent_id", "root_id", "title", "created_at", "updated_at"),
    schema.tasks: ("id", "title", "description", "prompt", "status", "priority", "assigned_to",
                   "created_by", "thread_id", "created_at", "updated_at"),
    schema.agent_metadata: ("thread_id", "name", "provider", "model", "profile", "type", "status",
                            "created_for_task", "parent_thread_id", "current_task", "tools",
                            "instructions", "stop_reason", "budget", "turns", "lease_holder",
                            "tokens_in", "tokens_out", "cost_usd", "created_at", "updated_at"),
    schema.task_notes: ("task_id", "author", "content", "created_at"),
    schema.inbox: ("thread_id", "sender", "task_id", "kind", "text", "priority", "created_at",
                   "consumed_at"),
    schema.events: ("thread_id", "type", "data", "created_at"),
    schema.llm_calls: ("thread_id", "model", "prompt_tokens", "completion_tokens", "cost_usd",
                       "latency_ms", "error", "created_at"),
}


def check_columns() -> None:
    """Fail loudly if the real schema gained a required column or lost one of ours."""
    for table_, names in COLUMNS.items():
        missing = set(names) - set(table_.c.keys())
        required = {column.name for column in table_.columns
                    if not column.nullable and column.server_default is None
                    and not (column.primary_key and isinstance(column.type, sa.Integer))}
        if missing or required - set(names):
            raise SystemExit(f"benchmark out of date with {table_.name}: missing {missing}, "
                             f"required {required - set(names)}")


class Writer:
    """Buffers rows per table and inserts them in foreign-key order, one transaction a flush."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rows: dict[sa.Table, list[tuple[Any, ...]]] = {table_: [] for table_ in COLUMNS}

    def add(self, table_: sa.Table, *values: Any) -> None:
        self.rows[table_].append(values)

    def flush(self, force: bool = False) -> None:
        if not force and sum(map(len, self.rows.values())) < FLUSH_ROWS:
            return
        with self.store.database.engine.begin() as connection:
            for table_, names in COLUMNS.items():
                if self.rows[table_]:
                    connection.exec_driver_sql(
                        f"INSERT INTO {table_.name} ({', '.join(names)}) "
                        f"VALUES ({', '.join('?' * len(names))})", self.rows[table_])
                    self.rows[table_] = []


def text(rng: random.Random, length: int) -> str:
    """`length` characters of plausible words."""
    start = rng.randrange(len(TEXT) - length)
    return TEXT[start:start + length]


def event_kind(position: int, count: int) -> str:
    """The pattern of a conversation: system prompt, then an inbox message, two tool calls
    (message with the call, tool_call row, result) and an answer, again and again; it never
    ends with a call left without a result."""
    if position == 0:
        return "system_prompt"
    kind = ("notification", "agent_message+call", "tool_call", "tool_result",
            "agent_message+call", "tool_call", "tool_result", "agent_message")[(position - 1) % 8]
    last = position == count - 1
    if last and kind == "agent_message+call":
        return "agent_message"
    if last and kind == "tool_call":
        return "tool_result"
    return kind


def event_data(rng: random.Random, kind: str, thread: str, position: int) -> dict[str, Any]:
    """The `data` of one event, shaped as lace writes it."""
    call = f"call_{thread[-12:]}_{position - ((position - 1) % 8 - 1) % 3}"
    tool = TOOLS[position % len(TOOLS)]
    if kind == "system_prompt":
        return {"message": {"role": "system", "content": text(rng, 1500)}}
    if kind == "notification":
        return {"message": {"role": "user", "content": text(rng, 300)}, "sender": "lace",
                "kind": "completion", "task_id": None, "inbox_id": position}
    if kind == "agent_message+call":
        return {"message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": tool, "arguments": json.dumps({"note": text(rng, 120)})}}]}}
    if kind == "tool_call":
        return {"call_id": call, "tool_name": tool, "arguments": text(rng, 120)}
    if kind == "tool_result":
        return {"message": {"role": "tool", "tool_call_id": call, "content": text(rng, 400)},
                "call_id": call, "tool_name": tool, "is_error": False}
    return {"message": {"role": "assistant", "content": text(rng, 600)}}


def add_session(writer: Writer, plan: SessionPlan, rng: random.Random, task_numbers: Iterator[int],
                ) -> None:
    """Every row of one session: threads, tasks with notes and inbox rows, agents, events
    interleaved across threads as concurrent agents write them, and one llm_calls row a reply."""
    start = plan.index * SESSION_SPACING_S
    date = iso(start)[:10].replace("-", "")
    agents = plan.threads[1:]
    task_ids = [f"task_{date}_{next(task_numbers):06x}" for _ in range(plan.tasks)]
    for thread in plan.threads:
        parent = thread.rsplit(".", 1)[0] if "." in thread else None
        writer.add(schema.threads, thread, parent, plan.root, text(rng, 40), iso(start),
                   iso(start + SESSION_LENGTH_S))
    for number, task_id in enumerate(task_ids):
        made_for = agents[number] if number < len(agents) else None
        creator = (made_for.rsplit(".", 1)[0] if made_for else
                   plan.root if rng.random() < 0.7 or not agents else rng.choice(agents))
        assignee = made_for or rng.choices([rng.choice(agents) if agents else None, "human", None],
                                           [40, 20, 40])[0]
        status = rng.choices(list(STATUS_WEIGHTS), list(STATUS_WEIGHTS.values()))[0]
        created = iso(start + SESSION_LENGTH_S * 0.9 * number / plan.tasks)
        writer.add(schema.tasks, task_id, text(rng, 50), text(rng, 200) if number % 3 else None,
                   text(rng, 500), status,
                   rng.choices(list(PRIORITY_WEIGHTS), list(PRIORITY_WEIGHTS.values()))[0],
                   assignee, creator, plan.root, created, created)
        notes = rng.randint(1, 3) if status == "completed" else rng.randint(0, 1)
        for _ in range(notes):
            writer.add(schema.task_notes, task_id, assignee or creator, text(rng, 200), created)
        if assignee and assignee.startswith("lace_"):
            writer.add(schema.inbox, assignee, creator, task_id, "assignment", text(rng, 300),
                       "normal", created, created)
        if status == "completed":
            pending = plan.big and number % 100 == 0
            writer.add(schema.inbox, creator, assignee or "human", task_id, "completion",
                       text(rng, 300), "normal", created, None if pending else created)
    add_agents_and_events(writer, plan, rng, task_ids)


def add_agents_and_events(writer: Writer, plan: SessionPlan, rng: random.Random,
                          task_ids: list[str]) -> None:
    """The session's agent rows, then its events and llm_calls rows in time order."""
    start = plan.index * SESSION_SPACING_S
    slots = sorted(((position + rng.random()) / count, thread_index, position)
                   for thread_index, count in enumerate(plan.events) for position in range(count))
    usage = [[0, 0, 0.0, 0] for _ in plan.threads]
    events: list[tuple[Any, ...]] = []
    calls: list[tuple[Any, ...]] = []
    for moment, thread_index, position in slots:
        thread, created = plan.threads[thread_index], iso(start + moment * SESSION_LENGTH_S)
        kind = event_kind(position, plan.events[thread_index])
        data = event_data(rng, kind, thread, position)
        events.append((thread, kind.split("+")[0], json.dumps(data), created))
        if kind.startswith("agent_message"):
            prompt, completion = min(900 + 40 * position, 120_000), rng.randint(40, 400)
            cost = prompt * 1.5e-7 + completion * 6e-7
            calls.append((thread, "openai/gpt-4o-mini", prompt, completion, cost,
                          rng.uniform(400, 4000), None, created))
            usage[thread_index][0] += prompt
            usage[thread_index][1] += completion
            usage[thread_index][2] += cost
            usage[thread_index][3] += kind == "agent_message"
    created = iso(start)
    for thread_index, thread in enumerate(plan.threads):
        task = task_ids[thread_index - 1] if 0 < thread_index <= len(task_ids) else None
        parent = thread.rsplit(".", 1)[0] if "." in thread else None
        tokens_in, tokens_out, cost, turns = usage[thread_index]
        writer.add(schema.agent_metadata, thread, "root" if parent is None else "gpt-4o-mini",
                   "openai", "gpt-4o-mini", None, "persistent", "idle", task, parent, task,
                   "null", None, None, "null", turns, None, tokens_in, tokens_out, cost,
                   created, created)
    for event in events:
        writer.add(schema.events, *event)
    for call in calls:
        writer.add(schema.llm_calls, *call)
    writer.flush()


def build(path: Path, shape: Shape) -> float:
    """Create the file through lace's migrations and fill it; returns the seconds taken."""
    check_columns()
    started = time.perf_counter()
    store = Store(open_database(str(path)))
    try:
        rng = random.Random(shape.seed)
        writer = Writer(store)
        numbers = iter(range(1, shape.tasks + 1))
        for plan in plan_sessions(shape, rng):
            add_session(writer, plan, rng, numbers)
        writer.flush(force=True)
    finally:
        store.close()
    return time.perf_counter() - started


def cached_or_built(path: Path, shape: Shape, rebuild: bool) -> tuple[float, bool]:
    """The build time of the file at `path` for this shape: built now, or read from its
    `.shape.json`. A file without one is not ours and is never replaced."""
    sidecar = path.with_name(path.name + ".shape.json")
    if sidecar.exists() and not rebuild:
        recorded = json.loads(sidecar.read_text())
        if recorded["shape"] == asdict(shape):
            return float(recorded["build_s"]), True
    if path.exists() and not sidecar.exists():
        raise SystemExit(f"{path} exists and was not built by this benchmark; pick another --db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    sidecar.unlink(missing_ok=True)
    seconds = build(path, shape)
    sidecar.write_text(json.dumps({"shape": asdict(shape), "build_s": seconds}))
    return seconds, False


@dataclass(frozen=True)
class Probe:
    """One read lace makes: its name, the lace function behind it, and a call returning how
    many items it produced."""

    name: str
    calls: str
    run: Callable[[], int]


@dataclass(frozen=True)
class Subjects:
    """What the probes read: the big session, an agent in it, a task with notes."""

    root: str
    child: str
    task: str


def find_subjects(store: Store) -> Subjects:
    """The latest session (the big one), its 7th agent, and its task with the most notes."""
    with store.reading() as tx:
        root = pick_session(tx, None).id
        notes = schema.task_notes.c
        task = tx.connection.execute(
            sa.select(notes.task_id).join(schema.tasks, schema.tasks.c.id == notes.task_id)
            .where(schema.tasks.c.thread_id == root).group_by(notes.task_id)
            .order_by(sa.func.count().desc(), notes.task_id).limit(1)).scalar_one()
    return Subjects(root=root, child=f"{root}.7", task=task)


def quiet(command: Callable[[argparse.Namespace], int], **arguments: Any) -> int:
    """Run a `lace` command in this process with its output thrown away; returns the lines."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        command(argparse.Namespace(**arguments))
    return output.getvalue().count("\n")


def rolled_back_turn(store: Store, thread_id: str) -> int:
    """begin_turn (of a message) in a write transaction that is rolled back, so the file stays
    as built."""
    with store.database.engine.connect() as connection:
        transaction = connection.begin()
        tx = Tx(connection)
        tx.inbox.post(thread_id, sender="human", kind="message", text="a turn starts")
        start = begin_turn(tx, thread_id, {}, holder="board-scale")
        transaction.rollback()
    assert start is not None, f"{thread_id} is not idle"
    return len(start.messages)


def probes(store: Store, path: Path, subjects: Subjects) -> list[Probe]:
    """The reads behind the tools, the commands and the app, on the big session."""
    root, child = subjects.root, subjects.child

    def tool(actor: str, name: str, **arguments: Any) -> Callable[[], int]:
        context = ToolContext(thread_id=actor, session_id=root)

        def call() -> int:
            result = call_tool(store, context, name, arguments)
            assert not result.is_error, result.text
            return result.text.count("\n") + 1
        return call

    def read(work: Callable[[Tx], Any], size: Callable[[Any], int] = len) -> Callable[[], int]:
        def call() -> int:
            with store.reading() as tx:
                return size(work(tx))
        return call

    def lace_tasks(limit: int | None) -> Callable[[Tx], Any]:
        return lambda tx: tx.tasks.query(pick_session(tx, None).id, include_closed=False,
                                         limit=limit)[0]

    db = str(path)
    return [
        Probe("task_list (root)", "tool task_list → tx.board.list_tasks",
              tool(root, "task_list")),
        Probe("task_list (agent .7)", "tool task_list → tx.board.list_tasks",
              tool(child, "task_list")),
        Probe("task_list filter=all +done", "tool task_list → tx.board.list_tasks",
              tool(root, "task_list", filter="all", include_completed=True)),
        Probe("task_view", "tool task_view → tx.tasks.get(with_notes)",
              tool(root, "task_view", task_id=subjects.task)),
        Probe("lace tasks (query)", "tx.tasks.query(limit=None)", read(lace_tasks(None))),
        Probe("lace tasks --limit 50 (query)", "tx.tasks.query(limit=50)", read(lace_tasks(50))),
        Probe("lace tasks (command)", "cli.board.tasks_command",
              lambda: quiet(tasks_command, db=db, session=None, all=False, limit=None,
                            json=False)),
        Probe("lace threads (command)", "cli.board.threads_command",
              lambda: quiet(threads_command, db=db, session=None, json=False)),
        Probe("app: open long thread", f"tx.events.latest({SHOWN_EVENTS})",
              read(lambda tx: tx.events.latest(root, SHOWN_EVENTS)[0])),
        Probe("app: refresh (every 0.5 s)", "tui.session_view.load_session_view",
              read(lambda tx: load_session_view(tx, root, with_tasks=False),
                   lambda view: len(view.rows))),
        Probe("app: refresh, board open", "load_session_view(with_tasks)",
              read(lambda tx: load_session_view(tx, root), lambda view: len(view.tasks))),
        Probe("begin_turn: thread_events", "tx.events.of_thread (whole thread)",
              read(lambda tx: tx.events.of_thread(root))),
        Probe("begin_turn (rolled back)", "runtime.conversation.begin_turn",
              lambda: rolled_back_turn(store, root)),
        Probe("runnable_threads (0.5 s)", "tx.inbox.runnable(session)",
              read(lambda tx: tx.inbox.runnable(root))),
        Probe("check_before_call", "store.budgets.check_before_call (2M cap)",
              read(lambda tx: check_before_call(tx, child, Budgets()), lambda halt: 1)),
    ]


@dataclass
class Measured:
    """Timings of one probe (seconds) and the statements it ran."""

    probe: Probe
    items: int
    samples: list[float]
    statements: list[tuple[str, Any]]


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[str, Any]]]:
    """Every statement SQLite runs for any pooled connection meanwhile, its values inlined."""
    seen: list[tuple[str, Any]] = []

    def record(statement: str) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE")):
            seen.append((statement, ()))

    with traced_statements(sa.pool.Pool, record):
        yield seen


def _shape(statement: str) -> str:
    """A statement with its inlined values blanked out."""
    return re.sub(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b", "?", statement)


def measure(probe: Probe, runs: int) -> Measured:
    """One recorded warm-up run, then `runs` timed ones."""
    with recording() as statements:
        items = probe.run()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        probe.run()
        samples.append(time.perf_counter() - started)
    unique = list({_shape(statement): (statement, parameters)  # the first of each shape
                   for statement, parameters in reversed(statements)}.values())[::-1]
    return Measured(probe, items, samples, unique)


def query_plan(path: Path, statement: str, parameters: Any) -> list[str]:
    """EXPLAIN QUERY PLAN of one statement, indented as a tree."""
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as connection:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {statement}", parameters).fetchall()
    depth: dict[int, int] = {0: 0}
    lines = []
    for node, parent, _, detail in rows:
        depth[node] = depth.get(parent, 0) + 1
        lines.append("  " * depth[node] + detail)
    return lines


def full_scan(plan: list[str]) -> bool:
    """Whether a plan reads a whole table (or a whole index) instead of searching it."""
    return any(line.strip().startswith("SCAN ") and "CONSTANT ROW" not in line for line in plan)


def report_plans(path: Path, measured: list[Measured], everything: bool) -> None:
    """Print the plans of the slow reads' statements and of any full scan (all: `--plans`)."""
    print("\nQuery plans of the slow reads and of any full scan (--plans shows all):")
    for result in measured:
        slow = statistics.median(result.samples) * 1000 >= TARGET_MS
        for statement, parameters in result.statements:
            plan = query_plan(path, statement, parameters)
            if everything or slow or full_scan(plan):
                print(f"\n[{result.probe.name}] {' '.join(statement.split())[:240]}")
                print("\n".join(plan))


def file_counts(path: Path) -> dict[str, int]:
    """Rows per table of the built file."""
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as connection:
        return {name: connection.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]
                for name in ("threads", "agent_metadata", "tasks", "task_notes", "inbox",
                             "events", "llm_calls")}


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Shape]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    defaults = Shape()
    parser.add_argument("--tasks", type=int, default=defaults.tasks)
    parser.add_argument("--events", type=int, default=defaults.events)
    parser.add_argument("--sessions", type=int, default=defaults.sessions)
    parser.add_argument("--big-session-tasks", type=int, default=defaults.big_session_tasks)
    parser.add_argument("--big-session-agents", type=int, default=defaults.big_session_agents)
    parser.add_argument("--long-thread-events", type=int, default=defaults.long_thread_events)
    parser.add_argument("--tiny", action="store_true",
                        help="1,000 tasks and 10,000 events (what the test runs)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per read (median)")
    parser.add_argument("--db", type=Path, help="the cached file (default: in the temp dir)")
    parser.add_argument("--rebuild", action="store_true", help="build the file again")
    parser.add_argument("--plans", action="store_true", help="print every query plan")
    args = parser.parse_args(argv)
    shape = Shape.tiny() if args.tiny else Shape(
        tasks=args.tasks, events=args.events, sessions=args.sessions,
        big_session_tasks=args.big_session_tasks, big_session_agents=args.big_session_agents,
        long_thread_events=args.long_thread_events)
    if shape.sessions < 2 or shape.tasks <= shape.big_session_tasks + shape.sessions \
            or shape.events < shape.long_thread_events + 10 * shape.tasks // 4:
        parser.error("need 2+ sessions, more tasks than the big session's plus one a session, "
                     "and enough events for every thread")
    return args, shape


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the file, time every read, print the table and the suspicious plans."""
    args, shape = parse_args(argv)
    path = args.db or Path(tempfile.gettempdir()) / (
        f"lace-board-scale-{shape.tasks}-{shape.events}.db")
    build_s, cached = cached_or_built(path, shape, args.rebuild)
    counts = file_counts(path)
    print(f"File {path}: {path.stat().st_size / 1e6:,.0f} MB, "
          + ", ".join(f"{count:,} {name}" for name, count in counts.items()))
    print(f"Build: {build_s:.1f} s{' (cached; --rebuild to build again)' if cached else ''}")
    store = Store(open_database(str(path)))
    try:
        subjects = find_subjects(store)
        print(f"Big session {subjects.root}; agent {subjects.child}; task {subjects.task}; "
              f"median of {args.runs} warm runs, in process; target < {TARGET_MS:.0f} ms\n")
        measured = [measure(probe, args.runs) for probe in probes(store, path, subjects)]
    finally:
        store.close()
    rows = []
    for result in measured:
        median = statistics.median(result.samples) * 1000
        rows.append((result.probe.name, result.probe.calls, result.items, round(median, 1),
                     round(min(result.samples) * 1000, 1), round(max(result.samples) * 1000, 1),
                     "ok" if median < TARGET_MS else "SLOW"))
    print(table(("read", "lace function", "items", "median ms", "min ms", "max ms", "target"),
                rows))
    report_plans(path, measured, args.plans)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
