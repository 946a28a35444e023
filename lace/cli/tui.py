"""`lace` with no command: the Textual app on the chosen database."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lace.core.errors import LaceError

if TYPE_CHECKING:
    from lace.trust import Project
    from lace.tui.app import LaceApp

Ask = Callable[["Project", list[str]], bool]


def ask_in_a_dialog(project: Project, lines: list[str]) -> bool:
    """The app's trust question, answered before its main screen is built."""
    from lace.tui.widgets.trust_modal import TrustQuestion

    return TrustQuestion(str(project.folder), lines).run() is True


def ask_trust(args: argparse.Namespace, ask: Ask = ask_in_a_dialog) -> None:
    """Before the app reads its settings: for each folder whose own configuration it would
    read (the current folder's lace.toml, the workspace's .mcp.json) and the person has not
    trusted as it is now, show it whole and ask; a yes is recorded as `lace trust` records it.
    A file that cannot be read is not offered (the run ignores it and says so)."""
    from lace.cli.run import workspace_of
    from lace.config import checked_project
    from lace.trust import described, trust

    for folder in dict.fromkeys([Path.cwd().resolve(), workspace_of(args)]):
        try:
            project = checked_project(folder)
            lines = described(project)
        except LaceError:
            continue
        if project.files and not project.trusted() and ask(project, lines):
            trust(project)


def build_app(args: argparse.Namespace, ask: Ask = ask_in_a_dialog) -> LaceApp:
    """The app for these flags, after the trust question; bad options fail here, before any
    screen is drawn."""
    from lace.cli.run import runtime_settings, workspace_of
    from lace.tui.factory import create_app

    ask_trust(args, ask)
    return create_app(db=getattr(args, "db", None), model=args.model,
                      continue_thread=args.continue_thread,
                      settings=runtime_settings(args),
                      workspace=workspace_of(args))


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
