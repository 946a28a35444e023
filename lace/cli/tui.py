"""`lace` with no command: the Textual app on the chosen database."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lace.tui.app import LaceApp


def build_app(args: argparse.Namespace) -> LaceApp:
    """The app for these flags; bad options fail here, before any screen is drawn."""
    from lace.cli.invocation import runtime_settings, workspace_of
    from lace.tui.factory import create_app

    return create_app(db=getattr(args, "db", None), model=args.model,
                      continue_thread=args.continue_thread,
                      settings=runtime_settings(args),
                      workspace=workspace_of(args),
                      reload_settings=lambda: runtime_settings(args))


def tui_command(args: argparse.Namespace) -> int:
    """Open the app; bad options fail before the screen takes over the terminal."""
    app = build_app(args)
    logging.getLogger("LiteLLM").handlers.clear()
    logging.getLogger("LiteLLM").propagate = False
    try:
        app.run()
        left = interrupted_note(app)
    finally:
        app.runtime.close()  # the store thread stops and the lease row goes
    if left:
        print(left, file=sys.stderr)
    return 0


NOTE_WITHIN_S = 2.0
"""How long a quitting app reads whether it left turns cut off, for its parting line."""


def interrupted_note(app: LaceApp) -> str | None:
    """The line that names the session the app left with turns cut off (by quitting while
    agents worked) and the commands that resume them; None when nothing was cut off."""
    from lace.runtime.board import Board
    from lace.runtime.databases import when_reachable
    from lace.runtime.public import within

    session_id = app.session_id
    if session_id is None:
        return None
    board = Board(app.runtime.store)
    summaries = within(lambda: when_reachable(  # a dropped connection: read again
        lambda: board.sessions(session_id), board.store.database.url), NOTE_WITHIN_S)
    if summaries is None:  # a server that does not answer: the app has quit, say nothing
        return None
    if not any(summary.id == session_id and summary.status == "interrupted"
               for summary in summaries):
        return None
    return (f"lace: session {session_id} was interrupted; lace --continue {session_id} reopens "
            f"it and resumes its agents (or lace run --continue {session_id})")
