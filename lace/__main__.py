"""Run the command line with `python -m lace` (and the `lace` script)."""

from __future__ import annotations

from lace.cli import leave, main


def entry() -> None:
    """Run the command, then leave at once (`leave`); the exit code is the command's."""
    leave(main())


if __name__ == "__main__":
    entry()
