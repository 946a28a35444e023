"""Snapshots of the main screen and the board (SVG under tests/__snapshots__), with fixed ids."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from lace.core import ids
from tests.scripted import ScriptedModels
from tests.test_tui import SIZE, make_app, settle


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    numbers = itertools.count(1)
    monkeypatch.setattr(ids, "new_root_thread_id", lambda: "lace_20261122_snap01")
    monkeypatch.setattr(ids, "new_task_id", lambda: f"task_20261122_00000{next(numbers)}")


def test_main_screen(snap_compare: Any, db_path: Path, models: ScriptedModels,
                     fixed_ids: None) -> None:
    app = make_app(db_path, models)

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", "n")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_board(snap_compare: Any, db_path: Path, models: ScriptedModels,
               fixed_ids: None) -> None:
    app = make_app(db_path, models)

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        await pilot.press("escape", "b")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
