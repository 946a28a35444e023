"""Typos get help: a mistyped command or action exits 2 naming the nearest ones; a model name
that litellm's table does not list names the nearest ones it does (read from the table, without
importing litellm), while a local server's models are never second-guessed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.processes import lace_at


def test_a_mistyped_command_exits_2_and_suggests_the_nearest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = lace_at(tmp_path, home, "tsks")
    assert done.returncode == 2
    assert done.stderr == ("lace: error: unknown command 'tsks': did you mean 'tasks' or 'task'? "
                           "(see lace --help)\n")
    action = lace_at(tmp_path, home, "task", "ad", "A title")
    assert action.returncode == 2
    assert action.stderr == ("lace task: error: unknown action 'ad': did you mean 'add'? "
                             "(see lace task --help)\n")
    choice = lace_at(tmp_path, home, "cost", "--by", "modle")
    assert choice.returncode == 2 and "did you mean 'model'?" in choice.stderr
    assert not home.exists()


def test_an_unknown_model_suggests_the_nearest_known_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = lace_at(tmp_path, home, "run", "--detach", "--model", "anthropic/claude-sonet-4-5",
                   "Plan the launch", ANTHROPIC_API_KEY="sk-ant-test-0123456789")
    assert done.returncode == 0, done.stderr
    assert ("lace: note: anthropic/claude-sonet-4-5 is not in litellm's model table; did you "
            "mean 'anthropic/claude-sonnet-4-5'") in done.stderr

    missing_key = lace_at(tmp_path, home, "run", "--model", "openai/gpt-4oo", "hi")
    assert missing_key.returncode == 2
    note, error = missing_key.stderr.splitlines()
    assert note.startswith("lace: note: openai/gpt-4oo is not in litellm's model table; did "
                           "you mean 'openai/gpt-4o'")
    assert error.startswith("lace: error: Cannot call openai/gpt-4oo: set OPENAI_API_KEY")

    assigned = lace_at(tmp_path, home, "task", "add", "Check the links", "--assign",
                       "new:openai/gpt-4o-mni", OPENAI_API_KEY="sk-test-0123456789")
    assert "did you mean 'openai/gpt-4o-mini'" in assigned.stderr

    local = lace_at(tmp_path, home, "run", "--detach", "--model", "openai/my-llama", "hi",
                    OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert local.returncode == 0, local.stderr
    assert "lace: note" not in local.stderr
    known = lace_at(tmp_path, home, "run", "--detach", "--model", "openai/gpt-4o", "hi",
                    OPENAI_API_KEY="sk-test-0123456789")
    assert known.returncode == 0 and "lace: note" not in known.stderr
    assert json.dumps("lace: note") not in known.stdout
