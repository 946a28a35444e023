"""Commands that read and change the board: tasks, threads, show, task add/note/complete, db."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lace.cli.output import print_json, report, say
from lace.config import Settings, load_settings
from lace.core.assignee import ACP_PROVIDER, NewAgentSpec, ThreadAssignee, parse_assignee
from lace.core.errors import LaceError, NotFoundError
from lace.core.lines import agent_line, event_text, in_tree_order, task_line
from lace.core.text import printable
from lace.runtime.board import NO_SESSION, Board, check_assignment
from lace.runtime.databases import (
    database_url,
    missing_board,
    open_store,
    shown_database,
    upgrade_database,
    when_answering,
    when_reachable,
)


def board_of(args: argparse.Namespace, settings: Settings | None = None, *,
             create: bool = False) -> Board:
    """The board named by `--db` (or the environment), with the folder lace was started in as
    the person's workspace; its settings are read when first needed, unless given. Unless
    `create` (a command that starts sessions), a database that holds no board yet is refused,
    and nothing is written."""
    db = getattr(args, "db", None)
    if not create:
        missing = missing_board(db)
        if missing is not None:
            raise NotFoundError(f"{missing}; nothing was created (lace run starts a board, "
                                "--db names another)")
    return Board(open_store(db), settings)


def answered_board_of(args: argparse.Namespace) -> Board:
    """`board_of(args)`, opened once its server answers: while it does not (paused, or its
    host silent), stderr says so once and lace keeps trying (a server that refuses is an
    error at once)."""
    return when_answering(lambda: board_of(args), getattr(args, "db", None), lambda server: print(
        f"lace: the database server {server} does not answer; still trying (Ctrl+C stops)",
        file=sys.stderr))


def tasks_command(args: argparse.Namespace) -> int:
    """`lace tasks`."""
    with board_of(args) as board:
        if args.session is None and board.latest_session() is None:
            print("[]" if args.json else f"No tasks: {NO_SESSION[0].lower()}{NO_SESSION[1:]}")
            return 0
        page = board.tasks(args.session, include_closed=args.all, limit=args.limit)
    session, tasks = page.session, page.tasks
    if args.json:
        print_json({"session": session.id, "total": page.total,
                    "tasks": [asdict(task) for task in tasks]})
        return 0
    say(f"Session {session.id}" + (f": {session.title}" if session.title else ""),
        one_line=True)
    if not tasks:
        print("  (no open tasks)" if not args.all else "  (no tasks)")
    for task in tasks:
        notes = f"  ({task.note_count} note{'s' if task.note_count != 1 else ''})"
        say(f"  {task_line(task)}{notes if task.note_count else ''}", one_line=True)
    if page.total > len(tasks):
        print(f"  … {page.total - len(tasks)} more")
    return 0


def threads_command(args: argparse.Namespace) -> int:
    """`lace threads`."""
    with board_of(args) as board:
        session = board.session(args.session)
        views = board.threads(session.id)
        current = board.current_tasks(views)
    if args.json:
        print_json({"session": session.id, "threads": [
            {**asdict(view.thread), "trace_id": view.thread.trace_id,
             "agent": asdict(view.agent) if view.agent else None,
             "subtree": asdict(view.subtree)}
            for view in views]})
        return 0
    titles = {task.id: task.title for task in current.values()}
    by_id = {view.thread.id: view for view in views}
    for thread in in_tree_order([view.thread for view in views]):
        view = by_id[thread.id]
        say(agent_line(thread, view.agent, titles, view.subtree), one_line=True)
    return 0


def show_command(args: argparse.Namespace) -> int:
    """`lace show THREAD_ID`."""
    with board_of(args) as board:
        thread, agent, events = board.thread(args.thread_id)
    if args.json:
        print_json({"thread": asdict(thread), "agent": asdict(agent) if agent else None,
                    "events": [asdict(event) for event in events]})
        return 0
    who = f"  {agent.name}  {agent.model_name}  [{agent.status}]" if agent else ""
    say(f"Thread {thread.id}{who}", one_line=True)
    for event in events:
        say(f"[{event.created_at[11:19]}] {event.type}: {event_text(event.type, event.data)}")
        for changed in event.data.get("files_changed") or []:
            say(f"    changed file: {changed}", one_line=True)
    if not events:
        print("  (no events yet)")
    return 0


def _run_as_human(args: argparse.Namespace, tool: str, arguments: dict[str, Any],
                  session_id: str | None = None, settings: Settings | None = None) -> int:
    """Call `tool` as the person; its text is the result (with `--json`: the session and the
    tasks the call made or changed, as `lace tasks --json` shows them)."""
    with board_of(args, settings) as board:
        result = board.call(tool, arguments, session_id)
        if result.is_error:
            raise LaceError(result.text)
        task_ids = (result.values or {}).get("task_ids") or [arguments["task_id"]]
        tasks = [board.task(task_id) for task_id in task_ids]
        note_unserved(board, tasks[0].thread_id)
    report(args, {"session": tasks[0].thread_id, "message": result.text,
                  "tasks": [asdict(task) for task in tasks]}, result.text)
    return 0


def note_unserved(board: Board, session_id: str) -> None:
    """One line on stderr when the person's call left agents of the session with work and no
    lace process runs this board: they wait until one does, and the line says how. A dropped
    connection or a restarting server is waited out, as the command's own reads are."""
    waiting = when_reachable(lambda: board.unserved(session_id), board.store.database.url)
    if waiting:
        say(f"lace: no lace process runs this board, so {', '.join(waiting)} "
            f"wait{'s' if len(waiting) == 1 else ''} for one; start one with: lace run "
            f"--continue {session_id} (or lace worker --session {session_id}, which stays)",
            one_line=True, file=sys.stderr)


def task_add_command(args: argparse.Namespace) -> int:
    """`lace task add TITLE`: in the session of the task it waits for, else the latest; creates
    a session first when there is none. Without `--assign` the task is the root's when the
    person has written to it (it takes the task up) and it is not stopped, failed or imported
    and not resumed yet, else nobody's."""
    session_id = args.session
    item = {"title": args.title, "prompt": args.prompt or args.title, "priority": args.priority,
            "description": args.description, "assigned_to": args.assigned_to,
            "blocked_by": args.blocked_by}
    arguments = {"tasks": [{key: value for key, value in item.items() if value is not None}]}
    settings = load_settings()  # bad settings are refused before the database is made
    _check_assignee(args.assigned_to, getattr(args, "db", None), settings)
    with board_of(args, settings, create=True) as board:
        if session_id is None and args.blocked_by:
            session_id = board.task(args.blocked_by[0]).thread_id
        if session_id is None and board.latest_session() is None:
            session_id = board.start_session_for(arguments)
            print(f"Started session {session_id}", file=sys.stderr)
        elif args.assigned_to is None:
            root = board.persons_agent(session_id)
            if root is not None:
                arguments["tasks"][0]["assigned_to"] = root
    return _run_as_human(args, "task_create", arguments, session_id, settings)


def task_note_command(args: argparse.Namespace) -> int:
    """`lace task note TASK_ID NOTE`."""
    return _run_as_human(args, "task_add_note", {"task_id": args.task_id, "note": args.note})


def task_complete_command(args: argparse.Namespace) -> int:
    """`lace task complete TASK_ID MESSAGE`."""
    return _run_as_human(args, "task_complete",
                         {"task_id": args.task_id, "message": args.message})


def task_help_command(_args: argparse.Namespace) -> int:
    """`lace task` with no action."""
    raise LaceError("choose an action: lace task add | note | complete (see lace task --help)")


def _check_assignee(assigned_to: str | None, db: str | None, settings: Settings) -> None:
    """`--assign`: refused before the database is made when the task call would refuse it (a
    malformed value, an unknown profile, a model that cannot be called here, an ACP agent not
    in [acp_agents], a thread of a board not made yet), in the call's own words, with one
    note line when a model looks mistyped."""
    from lace.cli.run import note_unlisted_model

    if assigned_to is None:
        return
    spec = parse_assignee(assigned_to)
    if isinstance(spec, ThreadAssignee) and missing_board(db) is not None:
        raise NotFoundError(f"No session yet, so {assigned_to!r} names no agent; nothing was "
                            "created (lace run starts a board, --db names another)")
    if isinstance(spec, NewAgentSpec) and spec.model_name and spec.provider != ACP_PROVIDER:
        note_unlisted_model(spec.model_name)
    check_assignment(assigned_to, settings, Path.cwd())


def session_help_command(_args: argparse.Namespace) -> int:
    """`lace session` with no action."""
    raise LaceError("choose an action: lace session end ROOT_ID (see lace session --help)")


def db_help_command(_args: argparse.Namespace) -> int:
    """`lace db` with no action."""
    raise LaceError("choose an action: lace db upgrade | path (see lace db --help)")


def db_upgrade(args: argparse.Namespace) -> int:
    """`lace db upgrade`: checks the file, then migrates it to head."""
    database = upgrade_database(getattr(args, "db", None))
    report(args, {"database": database, "schema": "up to date"},
           printable(f"{database}: schema up to date", one_line=True))
    return 0


def db_path(args: argparse.Namespace) -> int:
    """`lace db path`."""
    database = shown_database(database_url(getattr(args, "db", None)))
    report(args, {"database": database}, printable(database, one_line=True))
    return 0
