"""`lace wait`: wait, running no agent, until a session is quiet, then report it as `lace run`
does (the root's last answer and the same exit codes)."""

from __future__ import annotations

import argparse
import sys
import time

from lace.cli.board import answered_board_of, note_unserved
from lace.cli.commands import EXIT_STILL_RUNNING
from lace.cli.loop import run_async
from lace.cli.output import print_json, say
from lace.runtime.board import Board
from lace.runtime.databases import when_reachable
from lace.runtime.outcome import Outcome
from lace.runtime.public import within

EXIT_INTERRUPTED = 130
UNANSWERED_S = 2.0
"""How long `lace wait` past its --timeout reads how the session stands, before it says the
server does not answer (a paused or silent server would hold it for good)."""


def wait_command(args: argparse.Namespace) -> int:
    """Check the session exists (writing nothing), wait for it, and report it; a server that
    does not answer as it starts counts against --timeout; once the database opened, a
    dropped connection or a server restart is waited out."""
    db = getattr(args, "db", None)  # not given: the default board
    started = time.monotonic()
    try:  # a server that is not there at all is an error at once
        board = within(lambda: answered_board_of(args), _past(args.timeout, UNANSWERED_S))
    except KeyboardInterrupt:
        return _stopped_waiting(args.session)
    if board is None:  # the timeout came while the server does not answer
        return _unanswered(args.session, args)
    with board:
        root_id = when_reachable(lambda: board.session(args.session).id, db)
        left = _past(args.timeout, started - time.monotonic())
        try:
            went_quiet = run_async(lambda: board.until_quiet(
                root_id, left, lambda: _waiting(board, root_id)))
        except KeyboardInterrupt:
            return _stopped_waiting(root_id)
        outcome = within(lambda: when_reachable(lambda: board.outcome(root_id), db),
                         None if went_quiet else UNANSWERED_S)
    if outcome is None:  # the timeout came while the server does not answer
        return _unanswered(root_id, args)
    return _report(outcome, went_quiet, args)


def _past(timeout: float | None, seconds: float) -> float | None:
    """`seconds` past `timeout` (None: no timeout), never below zero."""
    return None if timeout is None else max(0.0, timeout + seconds)


def _stopped_waiting(root_id: str) -> int:
    print(f"lace: stopped waiting; session {root_id} is left as it is "
          f"(lace wait {root_id} waits again)", file=sys.stderr)
    return EXIT_INTERRUPTED


def _unanswered(root_id: str, args: argparse.Namespace) -> int:
    if args.json:
        print_json({"session": root_id, "status": "unknown", "root_status": None,
                    "answer": None, "tasks": None, "usage": None,
                    "exit_code": EXIT_STILL_RUNNING})
    else:
        print(f"lace: session {root_id} may still run after {args.timeout:g}s (its database "
              f"server does not answer); lace wait {root_id} waits again", file=sys.stderr)
    return EXIT_STILL_RUNNING


def _waiting(board: Board, root_id: str) -> None:
    """Say what is waited for and, when no lace process runs this board, how to start one."""
    print(f"Waiting for session {root_id} (Ctrl+C stops waiting, not the session)",
          file=sys.stderr)
    note_unserved(board, root_id)


def _report(outcome: Outcome, went_quiet: bool, args: argparse.Namespace) -> int:
    """Print the answer (or the JSON object) and return the exit code."""
    code = outcome.exit_code if went_quiet else EXIT_STILL_RUNNING
    if args.json:
        print_json({"session": outcome.root_id, "status": "quiet" if went_quiet else "running",
                    "root_status": outcome.root.status, "answer": outcome.answer,
                    "tasks": outcome.task_counts(), "usage": outcome.usage(),
                    "exit_code": code})
        return code
    if not went_quiet:
        print(f"lace: session {outcome.root_id} still runs after {args.timeout:g}s; "
              f"lace wait {outcome.root_id} waits again", file=sys.stderr)
    elif outcome.answer:
        say(outcome.answer)
    if went_quiet and outcome.problem:
        say(f"lace: {outcome.problem}", one_line=True, file=sys.stderr)
    return code
