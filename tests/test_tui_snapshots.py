"""Snapshots of the main screen and the board (SVG under tests/__snapshots__), with fixed ids."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from lace.core import ids
from lace.tui.app import LaceApp
from tests.scripted import ScriptedModels
from tests.test_tui import SIZE, make_app, settle


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    numbers = itertools.count(1)
    monkeypatch.setattr(ids, "new_root_thread_id", lambda: "lace_20261122_snap01")
    monkeypatch.setattr(ids, "new_task_id", lambda: f"task_20261122_00000{next(numbers)}")


def after_the_run(app: LaceApp, key: str, pause: float) -> Callable[[Any], Awaitable[None]]:
    """Type the prompt, let every agent finish, then leave the input and press `key`."""

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", key)
        await pilot.pause(pause or None)

    return run_before


def test_main_screen(snap_compare: Any, db_path: Path, models: ScriptedModels,
                     fixed_ids: None) -> None:
    app = make_app(db_path, models)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, "n", 0))


def test_board(snap_compare: Any, db_path: Path, models: ScriptedModels,
               fixed_ids: None) -> None:
    app = make_app(db_path, models)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_the_run(app, "b", 0.3))
