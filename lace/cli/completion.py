"""`lace completion bash|zsh|fish`: the shell code that completes lace's commands and options.

argcomplete answers each TAB by running `lace` itself with the parser `lace --help` uses, so
the completion never goes stale after an upgrade and knows every command and option without a
list kept by hand; its bash code needs no bash-completion package, and it writes zsh and fish
code from the same parser. Where a command expects a session or thread id, a TAB offers those
of the database the command line names (read only: a missing database is not created); after
`--model`, the offline demo and the models that board's agents ran."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lace.runtime.board import Board

SHELLS = ("bash", "zsh", "fish")
TAB_WAIT_S = 1.0
"""How long a TAB waits for the board it reads ids and models from (a few milliseconds once
lace is imported, which happens before: only the database is waited for)."""


def completion_command(args: argparse.Namespace) -> int:
    """Print the completion script for the shell."""
    from argcomplete.shell_integration import shellcode

    print(shellcode(["lace"], shell=args.shell), end="")
    return 0


def session_ids(prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """The sessions of the command line's database (`--db`, else lace's own) whose id starts
    with `prefix`, the newest first; none when there is no board there."""
    return _from_board(parsed_args, lambda board: [
        session.id for session in board.sessions() if session.id.startswith(prefix)])


def thread_ids(prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """The sessions while `prefix` names no whole session, then that session's threads."""
    from lace.core.ids import root_of

    root = root_of(prefix)

    def read(board: Board) -> list[str]:
        sessions = [session.id for session in board.sessions()]
        if root not in sessions:
            return [session for session in sessions if session.startswith(prefix)]
        return [view.thread.id for view in board.threads(root)
                if view.thread.id.startswith(prefix)]

    return _from_board(parsed_args, read)


def models(prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """The offline demo model and the models the board's agents ran (the latest first) that
    start with `prefix`; litellm's whole table is not offered (importing it takes seconds)."""
    from lace.config import DEMO_MODEL

    used = _from_board(parsed_args, lambda board: board.models())
    return [model for model in dict.fromkeys([DEMO_MODEL, *used]) if model.startswith(prefix)]


def _from_board(parsed_args: argparse.Namespace, read: Callable[[Board], list[str]]) -> list[str]:
    """What `read` finds on the command line's board that may be offered (`typeable`); none
    when there is no board, it cannot be read, or it does not answer within TAB_WAIT_S (a
    file another process locks, a server paused): a TAB never fails and never waits long. The
    read goes on, on a daemon thread, until the shell's call of lace exits."""
    from lace.cli.board import board_of  # imported here, outside the wait
    from lace.runtime.public import within

    def offered() -> list[str]:
        with board_of(parsed_args) as board:
            return [word for word in read(board) if typeable(word)]

    try:
        return within(offered, TAB_WAIT_S) or []
    except Exception:  # a TAB never fails
        return []


def typeable(word: str) -> bool:
    """Whether a word read from a database may be offered to the shell: no control or format
    character (an escape would reach the person's terminal as the shell lists the choices) and
    no white space (the shell would split it, argcomplete's separator among them)."""
    return word.isprintable() and not any(character.isspace() for character in word)
