"""`lace completion bash|zsh|fish`: the shell code that completes lace's commands and options.

argcomplete answers each TAB by running `lace` itself with the parser `lace --help` uses, so
the completion never goes stale after an upgrade and knows every command and option without a
list kept by hand; its bash code needs no bash-completion package, and it writes zsh and fish
code from the same parser. Where a command expects a session or thread id, a TAB offers those
of the database the command line names (read only: a missing database is not created); after
`--model`, the offline demo and the models that board's agents ran."""

from __future__ import annotations

import argparse
import contextlib

SHELLS = ("bash", "zsh", "fish")


def completion_command(args: argparse.Namespace) -> int:
    """Print the completion script for the shell."""
    from argcomplete.shell_integration import shellcode

    print(shellcode(["lace"], shell=args.shell), end="")
    return 0


def session_ids(prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """The sessions of the command line's database (`--db`, else lace's own) whose id starts
    with `prefix`, the newest first; none when there is no board there."""
    from lace.cli.board import board_of

    with contextlib.suppress(Exception), board_of(parsed_args) as board:  # a TAB never fails
        return [session.id for session in board.sessions() if session.id.startswith(prefix)]
    return []


def thread_ids(prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """The sessions while `prefix` names no whole session, then that session's threads."""
    from lace.cli.board import board_of
    from lace.core.ids import root_of

    root = root_of(prefix)
    if root not in session_ids(root, parsed_args):
        return session_ids(prefix, parsed_args)
    with contextlib.suppress(Exception), board_of(parsed_args) as board:
        return [view.thread.id for view in board.threads(root)
                if view.thread.id.startswith(prefix)]
    return []


def models(prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """The offline demo model and the models the board's agents ran (the latest first) that
    start with `prefix`; litellm's whole table is not offered (importing it takes seconds)."""
    from lace.cli.board import board_of
    from lace.config import DEMO_MODEL

    used: list[str] = []
    with contextlib.suppress(Exception), board_of(parsed_args) as board:  # a TAB never fails
        used = board.models()
    return [model for model in dict.fromkeys([DEMO_MODEL, *used]) if model.startswith(prefix)]
