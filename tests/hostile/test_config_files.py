"""Settings files as they go wrong or are planted: a `lace.toml` above the repository (or above
the workspace outside one) is nobody's project and is never read, even trusted; an untrusted one
found from a subfolder acts on nothing; a broken file of the person's is one line naming it and
writes nothing, and so is one nested past what a TOML parser follows, the person's or a
repository's; `lace config` never prints a configured credential."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lace.trust import project_of, trust
from tests.config_files import repository, shown
from tests.processes import lace_at, user_config

ALLOW_BASH = '[tools.policy]\nbash = "allow"\n'


def test_a_lace_toml_above_the_repository_or_the_workspace_is_never_read(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "lace.toml").write_text(ALLOW_BASH)  # e.g. planted in /tmp by another user
    trust(project_of(tmp_path))  # even trusted, it is not this project's
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    outside = tmp_path / "plain" / "folder"
    outside.mkdir(parents=True)
    (tmp_path / "plain" / "lace.toml").write_text(ALLOW_BASH)
    trust(project_of(tmp_path / "plain"))
    for folder in (repo / "src", repo, outside):
        done = lace_at(folder, home, "config", "--json", LACE_HOME=str(tmp_path / "lace-home"))
        settings = shown(done)
        assert not any(key.startswith("tools.policy.") for key in settings), folder
        assert "lace: ignoring" not in done.stderr


def test_an_untrusted_lace_toml_found_from_a_subfolder_acts_on_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo, deep = repository(tmp_path, ALLOW_BASH + "[limits]\nmax_running = 1\n")
    done = lace_at(deep, home, "config", "--json")
    settings = shown(done)
    assert "tools.policy.bash" not in settings
    assert settings["limits.max_running"] == {"value": 16, "from": "default"}
    assert done.stderr == (f"lace: ignoring lace.toml in {repo}: not trusted; review and "
                           f"trust with: lace trust {repo}\n")
    files = json.loads(done.stdout)["files"]
    assert files[-1] == {"kind": "project", "path": str(repo / "lace.toml"),
                         "state": f"not trusted: lace trust {repo}"}


def test_a_broken_file_of_the_persons_is_one_line_naming_it_and_writes_nothing(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    user = user_config(home, "[limits\nmax_running = 3\n")
    done = lace_at(tmp_path, home, "run", "hello")
    assert done.returncode == 2
    assert done.stderr.startswith(f"lace: error: Cannot read {user}: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not home.exists()  # no database, no home

    user.write_text("[limits]\nmax_runing = 3\n")
    (tmp_path / "lace.toml").write_text("[limits]\nmax_depth = 1\n")
    assert lace_at(tmp_path, home, "trust", "--yes").returncode == 0
    done = lace_at(tmp_path, home, "task", "add", "A task")
    assert done.returncode == 2
    assert done.stderr == (f"lace: error: Bad setting limits.max_runing in {user}: unknown "
                           "setting; did you mean 'max_running'?\n")
    assert not (home / "lace.db").exists()


def test_lace_config_never_prints_a_configured_credential(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = "ghp_the-persons-github-token-0123"
    user_config(home, "[mcp_servers.github]\ncommand = \"github-mcp\"\n"
                      f'env = {{ GITHUB_TOKEN = "{token}", LOG_LEVEL = "debug" }}\n'
                      "[mcp_servers.remote]\nurl = \"https://example.invalid/mcp\"\n"
                      f'headers = {{ Authorization = "Bearer {token}" }}\n')
    for argv in (("config",), ("config", "--json")):
        done = lace_at(tmp_path, home, *argv, OTHER_SECRET_KEY="sk-other-0123456789")
        assert done.returncode == 0, done.stderr
        assert token not in done.stdout + done.stderr
        assert "debug" in done.stdout  # what is no credential is shown


NESTED_TOML = "x = " + "[" * 100_000 + "]" * 100_000 + "\n"
"""Valid TOML (under 1 MiB) that Python's parser follows into a RecursionError."""


def test_a_settings_file_nested_too_deep_is_one_line_never_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    user = user_config(home, NESTED_TOML)
    done = lace_at(tmp_path, home, "config")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"lace: error: Cannot read {user}: nested too deep\n"
    user.unlink()

    repo, deep = repository(tmp_path, NESTED_TOML)  # a repository's: untrusted, ignored
    for command in (["mcp", "list"], ["run", "hi"], ["config"]):
        ran = lace_at(deep, home, *command)
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    trusted = lace_at(deep, home, "trust", "--yes")  # shown before it is trusted: it cannot be
    assert (trusted.returncode, trusted.stderr) == (
        2, f"lace: error: Cannot read {repo / 'lace.toml'}: nested too deep\n")
    assert not (home / "trusted-folders.json").exists()
