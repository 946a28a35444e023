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


def test_every_model_option_names_the_setting_it_defaults_to() -> None:
    """The config file's `model` starts a session when `--model` is not given
    (tests/test_first_hour_details.py), so each `--model` help says so."""
    helps = {prog: action.help for prog, parser in PARSERS.items()
             for action in parser._actions if "--model" in action.option_strings}
    assert {"lace", "lace run", "lace web", "lace acp"} <= set(helps)
    for prog, text in helps.items():
        assert "$LACE_MODEL" in str(text) and "config file" in str(text), prog


def test_every_argument_says_what_it_takes() -> None:
    bare = [f"{prog} {action.option_strings or action.dest}"
            for prog, parser in PARSERS.items() for action in parser._actions
            if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
            and not action.help]
    assert bare == []


NO_DATABASE = {"lace config": [], "lace hooks": [], "lace completion": ["bash"], "lace keys": [],
               "lace keys set": ["openai"], "lace keys list": [], "lace trust": [],
               "lace mcp list": []}
"""The commands that open no database (with arguments they need): `--db` would do nothing."""


def test_db_is_offered_where_a_database_is_opened_and_refused_elsewhere() -> None:
    offered = {prog for prog, parser in PARSERS.items()
               if any("--db" in action.option_strings for action in parser._actions)}
    assert offered == set(PARSERS) - set(NO_DATABASE)
    for prog, needed in NO_DATABASE.items():
        shown = subprocess.run([sys.executable, "-m", "lace", *prog.split()[1:], *needed,
                                "--db=x.db"],
                               capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert shown.returncode == 2 and shown.stderr.count("\n") == 1, (prog, shown.stderr)
        assert "unrecognized arguments: --db=x.db" in shown.stderr, prog
