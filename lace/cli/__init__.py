"""The `lace` command line: argument parsing here, each command's work in its own module."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from lace.core.version import __version__

EXIT_INTERRUPTED = 130
INTERRUPTED = "lace: interrupted"
"""The line for a Ctrl+C that no command answers with a line of its own (one that comes while
lace starts, say); `lace run`'s own begin so too."""


def interrupted() -> int:
    """Say the command was interrupted, on stderr; its exit code."""
    print(INTERRUPTED, file=sys.stderr)
    return EXIT_INTERRUPTED


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2, never a usage dump; a
    mistyped command or choice names the nearest ones."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        from lace.core.nearest import did_you_mean, nearest

        hint = did_you_mean(nearest(str(value), [str(choice) for choice in action.choices]))
        if isinstance(action, argparse._SubParsersAction):
            what = str(action.metavar or "command").lower()
            raise argparse.ArgumentError(None, f"unknown {what} {value!r}"
                                         + (f": {hint}" if hint else ""))
        choices = ", ".join(repr(choice) for choice in action.choices)
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}: "
                                     + (hint or f"choose from {choices}"))


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; imports nothing heavy so `lace --help` is instant."""
    from lace.cli.commands import (
        MODEL_DEFAULT,
        add_examples,
        add_id_completers,
        add_workspace_flags,
        register_commands,
    )

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH|URL",
                        help="database file, sqlite:/// or postgresql://USER@HOST:PORT/DBNAME "
                             "URL (default: $LACE_DB, else $LACE_HOME/lace.db, else "
                             "~/.lace/lace.db)")
    parser = OneLineParser(
        prog="lace", parents=[common],
        description="A task board for LLM agents: tasks, threads and spawned helpers in one "
                    "database (SQLite or PostgreSQL).")
    parser.add_argument("--version", action="version", version=f"lace {__version__}")
    parser.add_argument("--continue", dest="continue_thread", nargs="?", const="latest",
                        metavar="THREAD_ID",
                        help="with no command: reopen the last session (or THREAD_ID's)")
    parser.add_argument("--model", metavar="PROVIDER/MODEL",
                        help=f"with no command: the root's model for a new session {MODEL_DEFAULT}")
    add_workspace_flags(parser)
    register_commands(parser.add_subparsers(dest="command", metavar="COMMAND",
                                            parser_class=OneLineParser), common)
    add_examples(parser)
    add_id_completers(parser)
    return parser


def mask_log_records() -> None:
    """Mask credential values in every log record as it is made, lace's and its libraries'
    (litellm's) alike. A filter on the `lace` logger would not do: Python hands a record of
    `lace.llm` to the handlers without asking the filters of its parent loggers."""
    import logging

    from lace.core.secrets import mask
    from lace.paths import credential_values

    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "masks_credentials", False):
        return

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        secrets = credential_values()
        if not secrets:
            return record
        with contextlib.suppress(Exception):  # a bad format string is reported when emitted
            record.msg, record.args = mask(record.getMessage(), secrets), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = mask(record.stack_info, secrets)
        return record

    masked_record.masks_credentials = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(masked_record)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the command (the TUI when none is given); known errors
    become one line and exit code 2."""
    from lace.cli.errors import output_closed, reader_gone, run_reporting_errors

    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a TAB in a shell running `lace completion`'s code
        import argcomplete

        argcomplete.autocomplete(parser, always_complete_options=False)
    try:
        args = parser.parse_args(argv)
    except BrokenPipeError:  # `lace --help | head -1`
        if not output_closed():
            raise
        return reader_gone()
    mask_log_records()
    if getattr(args, "handler", None) is None:
        from lace.cli.commands import lazy

        args.handler = lazy("lace.cli.tui:tui_command")
    return run_reporting_errors(args)


def leave(code: int) -> NoReturn:
    """Leave at once with `code`: every write is committed and the store closed by then, so
    tearing the interpreter down (a second or more with litellm imported) is only waiting.
    Output is flushed first, and a command an agent started that is still running is killed
    (`os._exit` skips `atexit`)."""
    import logging

    process_groups = sys.modules.get("lace.tools.process_groups")
    if process_groups is not None:  # only a process that imported it started commands
        process_groups.kill_running_commands()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):  # a reader that went away must not change the code
        with contextlib.suppress(OSError):
            if stream is not None:  # None: started with it closed (`>&-`)
                stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
