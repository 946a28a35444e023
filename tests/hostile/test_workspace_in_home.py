"""A workspace inside lace's home folder: its ordinary files are the person's and the file tools
write and read them, while lace's own files there (database, settings, logs, records) stay out
of reach, also when the workspace is the home itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lace.llm.openai_fake import FakeOpenAI
from lace.llm.types import ScriptedReply
from tests.lace_forks import run_lace
from tests.processes import lace_env


def calls_in_turn(*calls: tuple[str, dict[str, Any]]) -> Any:
    """A model that makes `calls` one per reply, then answers with every result, in order,
    as a JSON list."""

    def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        results = [message["content"] for message in messages if message["role"] == "tool"]
        if len(results) < len(calls):
            return ScriptedReply(text=None, tool_calls=[calls[len(results)]])
        return ScriptedReply(text=json.dumps(results))

    return script


def run_in(folder: Path, home: Path, fake: FakeOpenAI) -> list[str]:
    """`lace run --yes` started in `folder`, on `home`; the tool results the model got."""
    env = lace_env(home, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
    done = run_lace(["run", "go", "--model", "openai/fake", "--yes"], env=env, cwd=folder,
                    timeout=120)
    assert done.returncode == 0, done.stderr
    results: list[str] = json.loads(done.stdout)
    return results


def test_a_workspace_inside_the_home_is_usable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workspace = home / "projects" / "app"
    workspace.mkdir(parents=True)
    (workspace / "README.md").write_text("# app\n")
    script = calls_in_turn(("file_write", {"path": "notes/plan.md", "content": "step one\n"}),
                           ("file_edit", {"path": "README.md", "old_text": "# app",
                                          "new_text": "# the app"}),
                           ("file_read", {"path": "notes/plan.md"}),
                           ("file_list", {"path": "."}))
    with FakeOpenAI(script) as fake:
        results = run_in(workspace, home, fake)
    assert "Wrote" in results[0], results
    assert (workspace / "notes" / "plan.md").read_text() == "step one\n"
    assert (workspace / "README.md").read_text() == "# the app\n"
    assert "step one" in results[2] and "README.md" in results[3], results


def test_lace_own_files_stay_protected_when_the_workspace_is_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("# the person's settings\n")
    targets = ["config.toml", "lace.db", "lace.db-wal", "mcp-logs/notes.log",
               "mcp-approved.json", "a-record-lace-adds-later.json"]
    with FakeOpenAI(calls_in_turn(*[("file_write", {"path": path, "content": "x"})
                                    for path in targets])) as fake:
        results = run_in(home, home, fake)
    assert all("is protected: it is lace's home folder" in result for result in results), \
        results
    assert (home / "config.toml").read_text() == "# the person's settings\n"
    assert not (home / "a-record-lace-adds-later.json").exists()


def test_lace_secrets_are_never_read_by_a_workspace_that_encloses_the_home(
        tmp_path: Path) -> None:
    """The workspace is the person's whole folder and lace's home is inside it (`~` and
    `~/.lace`): a model asks to read, list and search the stored keys and the front ends'
    tokens, directly and through a link; none of their text reaches it."""
    folder = tmp_path / "me"
    home = folder / ".lace-home"
    (home / "tokens").mkdir(parents=True)
    secret = "stored-key-value-0123456789"
    (home / "keys.json").write_text(json.dumps(
        {"openai": {"variable": "OPENAI_API_KEY", "key": secret}}))
    (home / "tokens" / "web").write_text(f"{secret}-web\n")
    (folder / "notes.txt").write_text("ordinary\n")
    (folder / "link.json").symlink_to(home / "keys.json")
    calls = [("file_read", {"path": ".lace-home/keys.json"}),
             ("file_read", {"path": ".lace-home/tokens/web"}),
             ("file_read", {"path": "link.json"}),
             ("file_list", {"path": ".lace-home"}),
             ("file_search", {"pattern": "stored-key", "path": "."}),
             ("file_read", {"path": "notes.txt"})]
    with FakeOpenAI(calls_in_turn(*calls)) as fake:
        env = lace_env(home, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="not-a-key")
        done = run_lace(["run", "go", "--model", "openai/fake", "--yes"], env=env, cwd=folder,
                        timeout=120)
        sent = json.dumps(fake.requests)
    assert done.returncode == 0, done.stderr
    results: list[str] = json.loads(done.stdout)
    assert secret not in sent and secret not in done.stdout
    assert all("lace's own secrets" in result for result in results[:3]), results
    assert "keys.json" not in results[3] and "tokens" not in results[3], results
    assert "ordinary" in results[5], results
