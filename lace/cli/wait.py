"""`lace wait`: wait, running no agent, until a session is quiet, then report it as `lace run`
does (the root's last answer and the same exit codes)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from lace.cli.board import open_store, print_json, say
from lace.cli.commands import EXIT_STILL_RUNNING
from lace.core.errors import NotFoundError
from lace.runtime.outcome import Outcome, read_outcome
from lace.runtime.sessions import until_quiet
from lace.store.db import resolve_db_url
from lace.store.engines import engine_for

EXIT_INTERRUPTED = 130


def wait_command(args: argparse.Namespace) -> int:
    """Check the session exists (writing nothing), wait for it, and report it."""
    engine = engine_for(resolve_db_url(getattr(args, "db", None)))
    if engine.path is not None and not engine.path.exists():
        raise NotFoundError(f"Unknown session {args.session!r}: there is no database at "
                            f"{engine.path}.")
    if engine.existing_revision() is None:  # empty: migrating would write
        raise NotFoundError(f"Unknown session {args.session!r}: {engine.shown()} holds no lace "
                            "board.")
    store = open_store(args)
    try:
        with store.reading() as tx:
            root_id = tx.threads.get_session(args.session).id
        try:
            went_quiet = asyncio.run(until_quiet(store, root_id, args.timeout, lambda: print(
                f"Waiting for session {root_id} (Ctrl+C stops waiting, not the session)",
                file=sys.stderr)))
        except KeyboardInterrupt:
            print(f"lace: stopped waiting; session {root_id} is left as it is "
                  f"(lace wait {root_id} waits again)", file=sys.stderr)
            return EXIT_INTERRUPTED
        outcome = read_outcome(store, root_id)
    finally:
        store.close()
    return _report(outcome, went_quiet, args)


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
    if went_quiet and outcome.root.status == "error":
        print(f"lace: the root agent failed; see lace show {outcome.root_id}", file=sys.stderr)
    return code
