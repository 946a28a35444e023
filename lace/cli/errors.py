"""Runs a command and turns the errors a person can fix into one line on stderr."""

from __future__ import annotations

import argparse
import sys

from lace.core.errors import LaceError


def run_reporting_errors(args: argparse.Namespace) -> int:
    """Call the command's handler; known errors print `lace: error: ...` and return 2."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        code: int = args.handler(args)
        return code
    except LaceError as error:
        message = str(error)
    except SQLAlchemyError as error:
        message = f"database error: {error.orig if hasattr(error, 'orig') else error!s}"
    except OSError as error:
        message = str(error)
    except KeyboardInterrupt:
        return 130
    one_line = "; ".join(line.strip().lstrip("- ") for line in message.splitlines() if line.strip())
    print(f"lace: error: {one_line or 'failed'}", file=sys.stderr)
    return 2
