"""Where a person's settings come from, driven as they would: their own file in the user config
folder, `$LACE_HOME/config.toml`, the project's `lace.toml` found from the workspace up to the
repository root (once trusted), merged key by key, and `lace config` saying where each value
came from."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.config_files import repository, shown
from tests.processes import lace_at, user_config


def test_user_and_project_files_merge_key_by_key_and_lace_config_says_where_from(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    user = user_config(home, 'model = "openai/gpt-4o-mini"\n'
                             "[limits]\nmax_depth = 1\nmax_running = 5\n")
    repo, deep = repository(tmp_path, "[limits]\nmax_running = 3\n")

    before = shown(lace_at(deep, home, "config", "--json"))  # not trusted yet: the user's only
    assert before["limits.max_running"] == {"value": 5, "from": str(user)}
    assert before["model"] == {"value": "openai/gpt-4o-mini", "from": str(user)}

    assert lace_at(deep, home, "trust", "--yes").returncode == 0  # trusts the repository root
    after = shown(lace_at(deep, home, "config", "--json"))
    assert after["limits.max_running"] == {"value": 3, "from": str(repo / "lace.toml")}
    assert after["limits.max_depth"] == {"value": 1, "from": str(user)}
    assert after["model"] == {"value": "openai/gpt-4o-mini", "from": str(user)}
    assert after["limits.max_children"] == {"value": 20, "from": "default"}

    environment = shown(lace_at(deep, home, "config", "--json", LACE_LIMITS__MAX_DEPTH="2"))
    assert environment["limits.max_depth"] == {"value": 2, "from": "LACE_LIMITS__MAX_DEPTH"}

    text = lace_at(deep, home, "config")
    assert text.returncode == 0, text.stderr
    assert f"limits.max_running = 3  # {repo / 'lace.toml'}\n" in text.stdout
    assert f"limits.max_depth = 1  # {user}\n" in text.stdout


def test_the_workspace_flag_chooses_the_project(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo, deep = repository(tmp_path, "[limits]\nmax_running = 3\n")
    assert lace_at(repo, home, "trust", "--yes").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert shown(lace_at(elsewhere, home, "config", "--json"))["limits.max_running"][
        "from"] == "default"
    chosen = shown(lace_at(elsewhere, home, "config", "--json", "--workspace", str(deep)))
    assert chosen["limits.max_running"] == {"value": 3, "from": str(repo / "lace.toml")}


def test_lace_home_config_and_lace_config_keep_working(tmp_path: Path) -> None:
    """`$LACE_HOME/config.toml` over the user's file, key by key; `LACE_CONFIG` is the one
    file read when it is set."""
    home = tmp_path / "home"
    home.mkdir()
    user = user_config(home, "[limits]\nmax_depth = 1\nmax_running = 5\n")
    (home / "config.toml").write_text("[limits]\nmax_running = 7\n")
    both = shown(lace_at(tmp_path, home, "config", "--json"))
    assert both["limits.max_running"] == {"value": 7, "from": str(home / "config.toml")}
    assert both["limits.max_depth"] == {"value": 1, "from": str(user)}

    named = tmp_path / "named.toml"
    named.write_text("[limits]\nmax_children = 9\n")
    only = shown(lace_at(tmp_path, home, "config", "--json", LACE_CONFIG=str(named)))
    assert only["limits.max_children"] == {"value": 9, "from": str(named)}
    assert only["limits.max_running"]["from"] == "default"


def test_the_users_model_starts_every_session_and_the_command_line_wins(
        tmp_path: Path) -> None:
    """`lace task add` (which opens a session when there is none) and `lace run` both use the
    user's `model`; `--model` beats it."""
    home = tmp_path / "home"
    user_config(home, 'model = "demo/worker"\n')
    added = lace_at(tmp_path, home, "task", "add", "Sign off the launch", "--assign", "human")
    assert added.returncode == 0, added.stderr
    run = lace_at(tmp_path, home, "run", "--detach", "Plan the launch")
    assert run.returncode == 0, run.stderr
    flag = lace_at(tmp_path, home, "run", "--detach", "--model", "demo/coordinator", "Plan it")
    assert flag.returncode == 0, flag.stderr
    with sqlite3.connect(home / "lace.db") as connection:
        models = connection.execute("SELECT model FROM agent_metadata WHERE parent_thread_id "
                                    "IS NULL ORDER BY rowid").fetchall()
    assert models == [("worker",), ("worker",), ("coordinator",)]


def test_a_mistyped_key_names_the_keys_it_may_have_meant(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for text, where, meant in [('modle = "openai/gpt-4o"\n', "modle", "did you mean 'model'?"),
                               ("[limts]\nmax_running = 3\n", "limts", "did you mean 'limits'?"),
                               ('[profiles.critic]\nmodle = "openai/gpt-4o"\n',
                                "profiles.critic.modle", "did you mean 'model'?"),
                               ("[limits]\ncolour = 3\n", "limits.colour",
                                "(docs/configuration.md lists every one)")]:
        user = user_config(home, text)
        done = lace_at(tmp_path, home, "config")
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == f"lace: error: Bad setting {where} in {user}: unknown setting" + (
            f"; {meant}\n" if meant.startswith("did") else f" {meant}\n")
    user.unlink()
    repo, deep = repository(tmp_path, "[limits]\nmax_runing = 3\n")  # a project's, at trust
    done = lace_at(deep, home, "trust", "--yes")
    assert done.returncode == 2
    assert done.stderr == (f"lace: error: Bad setting limits.max_runing in {repo / 'lace.toml'}: "
                           "unknown setting; did you mean 'max_running'?\n")
