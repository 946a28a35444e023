"""What commands print: text for a person with control characters escaped, and JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from lace.core.text import printable, printable_json


def say(text: str, *, one_line: bool = False, file: TextIO | None = None,
        end: str = "\n") -> None:
    """Print text for a person with control characters escaped, so text from a model or the
    database never drives the terminal; `one_line` escapes line breaks too."""
    print(printable(text, one_line=one_line), file=file, end=end)


def print_json(value: Any) -> None:
    """Print a value as indented JSON (what a terminal would act on escaped as `\\uXXXX`)."""
    print(printable_json(json.dumps(value, indent=2, default=str, ensure_ascii=False)))


def report(args: argparse.Namespace, value: Any, text: str) -> None:
    """A command's result: `value` as JSON alone on stdout with `--json`, else `text` for a
    person."""
    if getattr(args, "json", False):
        print_json(value)
    else:
        say(text)
