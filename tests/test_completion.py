"""`lace completion bash|zsh|fish`: the script a person puts in their shell's startup file. The
bash one is loaded into a plain bash (no bash-completion package, no startup files) and driven
as bash drives it on TAB: `complete -p lace` names the function, which is called with
COMP_WORDS, COMP_CWORD, COMP_LINE and COMP_POINT set; every command and every option of every
command comes back."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lace.cli import build_parser
from tests.completing import BIN, completions
from tests.conftest import on_ci
from tests.lace_forks import run_lace
from tests.processes import lace, lace_env


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
             ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command path (`()`, `("task", "add")`, ...) with its parser."""
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += commands(child, (*path, name))
    return found


def test_bash_completes_every_command_and_option_in_plain_bash(tmp_path: Path) -> None:
    tree = commands(build_parser())
    lines = ["lace ta", "lace tsks", "lace task a", "lace cost --by m", "lace completion "]
    lines += [" ".join(("lace", *path, "-")) for path, _parser in tree]
    offered = completions(tmp_path / "home", lines)
    assert [sorted(words) for words in offered[:5]] == [
        ["task", "tasks"], [], ["add"], ["model"], ["bash", "fish", "zsh"]]
    for (path, parser), options in zip(tree, offered[5:], strict=True):
        expected = {option for action in parser._actions for option in action.option_strings
                    if action.help != argparse.SUPPRESS}
        assert expected <= set(options), (path, expected - set(options))
    top = offered[5]
    assert "--version" in top and "--db" in top
    names = {path[-1] for path, _parser in tree if len(path) == 1}
    assert names <= set(completions(tmp_path / "home", ["lace "])[0])


def need_shell(shell: str) -> None:
    """A shell the test drives: missing, the test is skipped here, and fails on CI (which
    installs it: .ci/run)."""
    if shutil.which(shell) is None:
        message = f"{shell} is not installed here (apt-get install {shell})"
        if on_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_a_script_that_its_shell_accepts(tmp_path: Path, shell: str) -> None:
    done = run_lace(["completion", shell], env=lace_env(tmp_path / "home"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "lace" in done.stdout and done.stderr == ""
    need_shell(shell)
    script = tmp_path / f"lace.{shell}"
    script.write_text(done.stdout)
    check = ["-n", str(script)] if shell != "fish" else ["--no-execute", str(script)]
    parsed = subprocess.run([shell, *check], capture_output=True, text=True, timeout=60)
    assert parsed.returncode == 0, parsed.stderr


def test_a_shell_lace_has_no_script_for_is_one_line(tmp_path: Path) -> None:
    done = run_lace(["completion", "powershell"], env=lace_env(tmp_path / "home"), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "bash" in done.stderr
    assert not (tmp_path / "home").exists()


def test_fish_completes_commands_and_options(tmp_path: Path) -> None:
    need_shell("fish")
    env = {**lace_env(tmp_path / "home"), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["fish", "--no-config", "-c", "lace completion fish | source; "
                           "complete -C 'lace ta'; echo ---; complete -C 'lace tasks --'"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    commands_part, options_part = done.stdout.split("---\n")
    assert {line.split("\t")[0] for line in commands_part.splitlines()} == {"task", "tasks"}
    assert {"--json", "--all", "--limit", "--session", "--db"} <= {
        line.split("\t")[0] for line in options_part.splitlines()}


def test_bash_completes_session_and_thread_ids_where_one_is_expected(tmp_path: Path) -> None:
    home = tmp_path / "home"
    added = lace(home, "task", "add", "Count the words", "--assign", "new:demo/worker",
                 "--json")
    assert added.returncode == 0, added.stderr
    first = json.loads(added.stdout)["session"]
    detached = lace(home, "run", "--detach", "Say hi.")
    assert detached.returncode == 0, detached.stderr
    second = detached.stdout.strip()
    missing = tmp_path / "missing.db"
    offered = completions(home, [
        "lace follow ", "lace wait lace_", "lace export ", "lace tasks --session ",
        "lace worker --session ", f"lace session end {first[:-2]}", f"lace show {first}",
        f"lace run --continue {first}.", f"lace stop {second}", "lace approve --session ",
        f"lace follow --db {missing} "])
    both = sorted([first, second])
    assert [sorted(words) for words in offered[:9]] == [
        both, both, both, both, both, [first], sorted([first, f"{first}.1"]), [f"{first}.1"],
        [second]]
    for words in offered[9:]:  # a flag, and a board that is not there: no id (bash's files)
        assert not {first, second} & set(words), words
    assert not missing.exists()


def test_bash_completes_the_demo_and_the_boards_models_after_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    added = lace(home, "task", "add", "Count the words", "--assign", "new:demo/worker")
    assert added.returncode == 0, added.stderr
    local = lace(home, "run", "--detach", "--model", "openai/my-local-model", "Say hi.",
                 OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert local.returncode == 0, local.stderr
    offered = completions(home, ["lace run --model ", "lace --model demo/w",
                                 "lace web --model openai/", "lace acp --model "])
    everything = ["demo/coordinator", "openai/my-local-model", "demo/worker"]
    assert offered == [everything, ["demo/worker"], ["openai/my-local-model"], everything]
