"""The details of the first hour (issue 33): the model of the person's own config file starts
every session a command starts, and `lace.run` treats an empty answer as `lace run` does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import lace
from tests.conftest import query, run_cli
from tests.scripted import ScriptedModels, reply

CaptureFixture = pytest.CaptureFixture[str]


def root_models(db_path: Path) -> list[tuple[str, str]]:
    """Each session's root and its model, oldest first."""
    return query(db_path, "SELECT a.thread_id, a.provider || '/' || a.model FROM agent_metadata a "
                          "JOIN threads t ON t.id = a.thread_id WHERE t.parent_id IS NULL "
                          "ORDER BY t.created_at, t.id")


def test_the_user_config_model_starts_every_session(capsys: CaptureFixture, db_path: Path,
                                                    models: ScriptedModels) -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "lace" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('model = "scripted/greeter"\n')
    models.on("greeter", lambda messages: reply("Hello."))
    db = ("--db", str(db_path))
    code, out, err = run_cli(capsys, "task", "add", "Sign off", "--assign", "human", *db)
    assert code == 0, err
    code, out, err = run_cli(capsys, "run", "Say hello.", *db)
    assert (code, out) == (0, "Hello.\n"), err
    code, out, err = run_cli(capsys, "run", "--detach", "Say hello again.", *db)
    assert code == 0, err
    code, out, err = run_cli(capsys, "run", "Say hello.", "--model", "demo/coordinator", *db)
    assert code == 0, err
    assert [model for _root, model in root_models(db_path)] == [
        "scripted/greeter", "scripted/greeter", "scripted/greeter", "demo/coordinator"]


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LACE_LIMITS__RETRY_BASE_S", "0.001")
    monkeypatch.setenv("LACE_LIMITS__RETRY_MAX_S", "0.002")


def test_an_empty_answer_fails_lace_run_in_python_as_on_the_command_line(
        capsys: CaptureFixture, db_path: Path, models: ScriptedModels,
        quick_retries: None) -> None:
    models.on("mute", lambda messages: reply(""))
    code, out, err = run_cli(capsys, "run", "Say hello.", "--model", "scripted/mute",
                             "--db", str(db_path))
    assert code == 1 and out == "" and "scripted/mute gave no answer" in err
    with pytest.raises(lace.RunError) as raised:
        lace.run("Say hello.", model="scripted/mute", db=db_path)
    (_first, _), (second, _) = root_models(db_path)
    assert str(raised.value) == (f"session {second}: the model scripted/mute gave no answer "
                                 f"(an empty reply); see lace show {second}")
    assert isinstance(raised.value, lace.LaceError)
