"""Run the command line with `python -m lace` (and the `lace` script)."""

from __future__ import annotations


def entry() -> None:
    """Run the command, then leave at once (`leave`); the exit code is the command's. A Ctrl+C
    before the command runs (while lace imports, a second or so) ends it as one that no
    command answers does: one line, exit 130."""
    try:
        from lace.cli import leave, main

        code = main()
    except KeyboardInterrupt:
        from lace.cli import interrupted, leave

        code = interrupted()
    leave(code)


if __name__ == "__main__":
    entry()
