"""`lace` with no command: the Textual app on the chosen database."""

from __future__ import annotations

import argparse
import logging
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
    finally:
        app.runtime.close()  # the store thread stops and the lease row goes
    return 0
