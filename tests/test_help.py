"""Every command's --help ends with examples that the parser accepts; `lace --version`."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from importlib.metadata import version

import pytest

from lace.cli import build_parser
from lace.cli.commands import EXAMPLES, subcommands


def every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for child in subcommands(parser):
        found += every_parser(child)
    return found


PARSERS = {parser.prog: parser for parser in every_parser(build_parser())}


def test_every_command_has_examples_and_no_example_is_left_over() -> None:
    assert len(PARSERS) > 20
    assert set(PARSERS) == set(EXAMPLES)


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_the_help_ends_with_examples_the_parser_accepts(prog: str) -> None:
    shown = PARSERS[prog].format_help()
    assert shown.rstrip().endswith("\n".join(f"  {line}" for line in EXAMPLES[prog]))
    for line in EXAMPLES[prog]:
        words = shlex.split(line)
        assert line.startswith(prog) and words[0] == "lace"
        args = build_parser().parse_args(words[1:])  # a bad example exits with 2 here
        assert getattr(args, "handler", None) is not None or prog == "lace"


def test_version() -> None:
    shown = subprocess.run([sys.executable, "-m", "lace", "--version"], capture_output=True,
                           text=True, check=True)
    assert shown.stdout == f"lace {version('lace')}\n"
