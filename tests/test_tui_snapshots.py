"""Snapshots of the main screen and the board (SVG under tests/__snapshots__), with fixed ids."""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from lace.core import ids
from lace.llm.types import ScriptedReply
from lace.tui.app import LaceApp
from lace.tui.board import BoardScreen
from lace.tui.factory import create_app
from tests.piloted_app import SIZE, make_app, settle
from tests.processes import trust_folder
from tests.scripted import ScriptedModels, assigned_task, reply, tools_called


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    numbers = itertools.count(1)
    monkeypatch.setattr(ids, "new_root_thread_id", lambda: "lace_20261122_snap01")
    monkeypatch.setattr(ids, "new_task_id", lambda: f"task_20261122_00000{next(numbers)}")


def at_once(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Workers that complete their task at once (no notes, which would reach the root at times
    that depend on timing): the two tasks of the root's one task_create wake it once, with both
    results, so the root's turns, and the tokens on screen, are the same on every run."""
    if "task_complete" in tools_called(messages):
        return reply("finished")
    return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                          "message": f"result of {assigned_task(messages)}"}))


async def steady_cursor(pilot: Any) -> None:
    """Stop the input cursors' blink (hidden): on a loaded machine the half-second blink timer
    fired before or after the screenshot, so the first screen differed from run to run."""
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False
    await pilot.pause()


def after_the_run(app: LaceApp, key: str) -> Callable[[Any], Awaitable[None]]:
    """Type the prompt, let every agent finish, then leave the input and press `key`; on the
    board, wait until it shows the tasks and the detail of the first."""

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", key)
        await pilot.pause()
        if key == "b":
            screen = app.screen
            assert isinstance(screen, BoardScreen)
            await app.refresh_view()  # draws what it read after it began
            assert screen.tasks
            await screen.workers.wait_for_complete()
            deadline = time.monotonic() + 60  # drawn after the refresh's worker is done
            while not all(task.id in app.export_screenshot() for task in screen.tasks):
                assert time.monotonic() < deadline, "the board's columns never showed whole ids"
                await pilot.pause(0.05)
        await steady_cursor(pilot)

    return run_before


def test_main_screen(snap_compare: Any, db_path: Path, models: ScriptedModels,
                     fixed_ids: None) -> None:
    app = make_app(db_path, models)
    models.on("worker", at_once)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, "n"))


def test_board(snap_compare: Any, db_path: Path, models: ScriptedModels,
               fixed_ids: None) -> None:
    app = make_app(db_path, models)
    models.on("worker", at_once)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, "b"))


def test_first_screen(snap_compare: Any, db_path: Path, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A new session on the default model, with a settings file in the working folder (named
    on screen, so the path is the same on every run)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lace.toml").write_text('model = "demo/coordinator"\n')
    trust_folder(tmp_path)
    assert snap_compare(create_app(db=str(db_path)), terminal_size=SIZE,
                        run_before=steady_cursor)
