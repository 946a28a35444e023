"""The first screen of a new session: what it says about the model and its key, that it goes
away with the first message and comes back for a new session, and the title bar."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from lace.config.keys import store_key, use_stored_keys
from lace.tui.app import LaceApp
from lace.tui.factory import create_app
from lace.tui.widgets.welcome import EXAMPLES, Welcome
from tests.conftest import query
from tests.piloted_app import SIZE, make_app, settle
from tests.processes import trust_folder
from tests.scripted import ScriptedModels

SECRET = "sk-lace-test-0123456789abcdef"


def welcome_text(app: LaceApp) -> str:
    return app.query_one(Welcome).text


async def test_the_first_screen_explains_then_goes_away_with_the_first_message(
        db_path: Path, models: ScriptedModels) -> None:
    app = make_app(db_path, models)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = welcome_text(app)
        assert "lace · a task board for LLM agents" in shown
        assert "scripted/root  (from --model)" in shown
        assert "lace --model provider/model" in shown and "LACE_MODEL=" in shown
        assert "✓ no key needed" in shown
        assert all(example in shown for example in EXAMPLES)
        assert "Enter send" in shown and "b Board" in shown and "q Quit" in shown
        assert (app.title, app.sub_title) == ("lace", "new session")

        await pilot.press(*"Plan the launch", "enter")
        await settle(app, pilot)
        assert not app.query(Welcome)
        root = app.session_id
        assert app.sub_title == f"session {root} · Plan the launch"

        await pilot.press("escape", "N")
        await pilot.pause()
        assert app.query(Welcome) and app.sub_title == "new session"


async def test_a_missing_key_is_named_and_no_session_starts(
        db_path: Path, unchanged: Any) -> None:
    app = create_app(db=str(db_path), model="openai/gpt-4o")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "✗ Cannot call openai/gpt-4o: set OPENAI_API_KEY in the environment" \
            in welcome_text(app)
        with unchanged():
            await pilot.press(*"Plan the launch", "enter")
            await pilot.pause()
        assert app.session_id is None and app.query(Welcome)
        assert app.query_one(Input).value == "Plan the launch"  # kept, to send once fixed
        assert [n.message for n in app._notifications] == [
            "Cannot call openai/gpt-4o: set OPENAI_API_KEY in the environment, or store the key "
            "once with lace keys set openai (or pick another model)"]
    assert query(db_path, "SELECT count(*) FROM threads") == [(0,)]


async def test_a_present_key_is_said_to_be_set_and_never_shown(
        db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("LACE_MODEL", "openai/gpt-4o")
    app = create_app(db=str(db_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = welcome_text(app)
        assert "openai/gpt-4o  (from LACE_MODEL)" in shown
        assert "✓ a key for openai is set in the environment" in shown
        screen = html.unescape(app.export_screenshot()).replace("\u00a0", " ")
        assert "a key for openai is set" in screen
        assert SECRET not in screen and SECRET not in shown


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:9/v1"],
                         ids=["provider", "own endpoint"])
async def test_a_stored_key_is_said_to_be_stored_not_in_the_environment(
        db_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: str | None) -> None:
    store_key("openai", "OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", "")  # unset, and set back after the test
    if endpoint:
        monkeypatch.setenv("OPENAI_BASE_URL", endpoint)
    use_stored_keys()  # as every lace command does first
    app = create_app(db=str(db_path), model="openai/gpt-4o")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = welcome_text(app)
    assert ("✓ openai calls go to the endpoint set in the environment, with the key stored with "
            "lace keys set" if endpoint else "✓ a key for openai is stored with lace keys set"
            ) in " ".join(shown.split())
    assert "no key needed" not in shown and SECRET not in shown


async def test_the_model_named_in_a_settings_file_names_that_file(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lace.toml").write_text('model = "scripted/root"\n')
    trust_folder(tmp_path)
    app = create_app(db=str(db_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = welcome_text(app)
        assert "scripted/root  (from lace.toml)" in shown
        assert 'model = "provider/model" in lace.toml' in shown


async def test_markup_in_the_first_prompt_is_shown_literally_in_the_title(
        db_path: Path, models: ScriptedModels) -> None:
    app = make_app(db_path, models)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"[/] [bold]x", "enter")
        await settle(app, pilot)
        assert app.sub_title == f"session {app.session_id} · [/] [bold]x"

