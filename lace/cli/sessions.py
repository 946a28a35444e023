"""`lace sessions` and `lace follow`: finding a session, and watching one as it runs."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from lace.cli.board import answered_board_of, board_of, note_unserved
from lace.cli.loop import run_async
from lace.cli.output import print_json, say
from lace.core.lines import event_text
from lace.core.records import Event, SessionSummary
from lace.core.shown import shown, shown_briefly
from lace.core.text import printable_json
from lace.core.usage import dollars
from lace.runtime.databases import missing_board
from lace.runtime.public import within

EXIT_INTERRUPTED = 130
FOLLOWED_CHARACTERS = 300
"""How much of one event `lace follow` prints (`lace show THREAD_ID` has it whole)."""
START_ONE = "lace run \"PROMPT\" starts one."
"""How `lace sessions` ends when it has none to list."""


def sessions_command(args: argparse.Namespace) -> int:
    """`lace sessions [TEXT]`: the newest first, one line each; no board yet is no session
    yet (with where lace looked), and nothing is created."""
    missing = missing_board(getattr(args, "db", None))
    if missing is not None:
        if args.json:
            print_json([])
        else:
            say(f"No sessions yet: {missing}; {START_ONE}", one_line=True, file=sys.stderr)
        return 0
    with board_of(args) as board:
        sessions = board.sessions(args.text)
    if args.limit is not None:
        sessions = sessions[:args.limit]
    if args.json:
        print_json([asdict(session) for session in sessions])
        return 0
    if not sessions:
        print("No sessions" + (f" hold {args.text!r}." if args.text else f" yet: {START_ONE}"),
              file=sys.stderr)
    for session in sessions:
        say(session_line(session), one_line=True)
    return 0


def session_line(session: SessionSummary) -> str:
    """id, status word, when it started (UTC), cost and the start of its prompt (or title)."""
    when = session.created_at[:16].replace("T", " ")
    title = shown_briefly(session.title or "(untitled)", 60)
    return f"{session.id}  {session.status:<11}  {when}  {dollars(session.cost_usd):<10}  {title}"


def follow_command(args: argparse.Namespace) -> int:
    """`lace follow SESSION`: print the session's events as they are written (from its first),
    and end once it is quiet; started while its server does not answer, it waits for it."""
    try:
        board = within(lambda: answered_board_of(args), None)  # Ctrl+C: heard at once
    except KeyboardInterrupt:
        return _stopped_following(args.session)
    assert board is not None  # no time limit
    with board:
        root_id = board.session(args.session).id
        note_unserved(board, root_id)  # else it would wait for a process that never comes
        printer = _json_line if args.json else _readable_line
        try:
            run_async(lambda: board.follow(root_id, printer))
        except KeyboardInterrupt:
            return _stopped_following(root_id)
    return 0


def _stopped_following(root_id: str) -> int:
    print(f"lace: stopped following; session {root_id} is left as it is "
          f"(lace follow {root_id} follows it again)", file=sys.stderr)
    return EXIT_INTERRUPTED


def _readable_line(event: Event) -> None:
    """One line: the time (UTC), the thread, the kind and the start of the text, its line
    breaks shown as ↵; a reply that only calls tools is left to its calls' lines."""
    if event.type == "agent_message" and not (event.data.get("message") or {}).get("content"):
        return
    text = event_text(event.type, event.data)
    if event.type == "system_prompt":  # the same long text for every agent: its size only
        text = f"({len(text)} characters; lace show {event.thread_id} prints it)"
    text = " ↵ ".join(line.strip() for line in text.splitlines() if line.strip())
    text = shown(text, FOLLOWED_CHARACTERS, f"lace show {event.thread_id}")
    say(f"{event.created_at[11:19]}  {event.thread_id}  {event.type}: {text}", one_line=True)
    sys.stdout.flush()  # into a pipe too, as it happens


def _json_line(event: Event) -> None:
    print(printable_json(json.dumps(asdict(event), default=str, ensure_ascii=False)))
    sys.stdout.flush()

