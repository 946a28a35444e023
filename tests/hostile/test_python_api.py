"""Hostile input to `lace.run` and `lace.open_board`: bad places for the database and the
workspace, a JSON bomb for an answer, a bad retry count; each a clear LaceError, nothing
written where nothing should be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lace
from tests.scripted import ScriptedModels, reply


class Tree(BaseModel):
    child: Tree | None = None


def never_called(messages: list[dict[str, Any]]) -> Any:
    pytest.fail("no model call may be made")


@pytest.mark.parametrize(("place", "problem"), [
    ("folder", "is a folder"), ("missing/x.db", "does not exist"), ("garbage.db", "not a lace")])
def test_a_bad_database_place_is_refused_and_nothing_is_written(
        models: ScriptedModels, tmp_path: Path, place: str, problem: str) -> None:
    models.on("root", never_called)
    (tmp_path / "folder").mkdir()
    (tmp_path / "garbage.db").write_text("not a database")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(lace.LaceError, match=problem):
        lace.run("go", model="scripted/root", db=tmp_path / place, workspace=tmp_path)
    with pytest.raises(lace.LaceError, match=problem):
        lace.open_board(tmp_path / place)
    assert sorted(tmp_path.rglob("*")) == before
    assert (tmp_path / "garbage.db").read_text() == "not a database"


def test_a_missing_workspace_is_refused_before_the_database_is_made(
        models: ScriptedModels, tmp_path: Path) -> None:
    models.on("root", never_called)
    with pytest.raises(lace.LaceError, match="is not a folder"):
        lace.run("go", model="scripted/root", db=tmp_path / "w.db", workspace=tmp_path / "none")
    assert not (tmp_path / "w.db").exists()


def test_a_negative_retry_count_is_refused_before_anything_is_written(
        models: ScriptedModels, tmp_path: Path) -> None:
    models.on("root", never_called)
    with pytest.raises(lace.LaceError, match="output_retries"):
        lace.run("go", model="scripted/root", db=tmp_path / "r.db", workspace=tmp_path,
                 output_type=Tree, output_retries=-1)
    assert not (tmp_path / "r.db").exists()


def test_a_json_bomb_for_an_answer_is_an_output_validation_error(
        models: ScriptedModels, tmp_path: Path) -> None:
    """A recursive output type, answered with a million levels of nesting, every time."""
    bomb = '{"child": ' * 1_000_000 + "null" + "}" * 1_000_000
    models.on("root", lambda messages: reply(bomb))
    with pytest.raises(lace.OutputValidationError):
        lace.run("go", model="scripted/root", db=tmp_path / "b.db", workspace=tmp_path,
                 output_type=Tree, output_retries=1)
