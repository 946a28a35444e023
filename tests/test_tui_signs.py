"""What the app shows while something happens elsewhere, driven with Textual's pilot and the
scripted model: a sign while a model call is under way, and an approval prompt that goes away
once the request was answered from another terminal (issue 33, item 12)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lace.llm.types import ScriptedReply
from lace.tui.app import LaceApp
from lace.tui.factory import create_app
from lace.tui.widgets.approval_modal import ApprovalModal
from tests.conftest import query
from tests.lace_forks import run_lace
from tests.piloted_app import SIZE
from tests.processes import lace_env
from tests.scripted import ScriptedModels, reply, tools_called


def status_of(app: LaceApp) -> str:
    return str(app.query_one("#status").render())


async def until(pilot: Any, holds: Callable[[], bool], what: str) -> None:
    """Let the app run until `holds()` is true, or fail after a deadline."""
    deadline = time.monotonic() + 30
    while not holds():
        assert time.monotonic() < deadline, f"never: {what}"
        await pilot.pause(0.05)


async def test_the_status_bar_shows_a_model_call_under_way(db_path: Path,
                                                           models: ScriptedModels) -> None:
    answer = asyncio.Event()

    async def slow_root(messages: list[dict[str, Any]]) -> ScriptedReply:
        await answer.wait()
        return reply("Here it is.")

    models.on("root", slow_root)
    app = create_app(db=str(db_path), model="scripted/root")
    async with app.run_test(size=SIZE) as pilot:
        assert "waiting for a model" not in status_of(app)
        await pilot.press(*"go", "enter")
        await until(pilot, lambda: app.session_id is not None
                    and f"⋯ waiting for a model: {app.session_id} (scripted/root)"
                    in status_of(app), "the sign of the call")
        answer.set()
        assert app.session_id is not None
        await asyncio.wait_for(app.runtime.run_until_quiet(app.session_id), 30)
        await until(pilot, lambda: "waiting for a model" not in status_of(app),
                    "the sign gone once the model answered")


def lace_approve(db_path: Path, home: Path, approval_id: int) -> subprocess.CompletedProcess[str]:
    return run_lace(["approve", str(approval_id), "--db", str(db_path)], env=lace_env(home),
                    timeout=60)


async def test_an_approval_answered_from_the_command_line_leaves_the_screen(
        db_path: Path, models: ScriptedModels, tmp_path: Path) -> None:
    models.on("root", lambda messages: reply(None, ("file_write", {
        "path": "plan.md", "content": "the plan\n"})) if "file_write" not in tools_called(
        messages) else reply("Written."))
    app = create_app(db=str(db_path), model="scripted/root", workspace=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"write the plan", "enter")
        await until(pilot, lambda: isinstance(app.screen, ApprovalModal), "the prompt")
        assert isinstance(app.screen, ApprovalModal)
        approval_id = app.screen.approval.id
        done = await asyncio.to_thread(lace_approve, db_path, tmp_path / "home", approval_id)
        assert done.returncode == 0, done.stderr
        await until(pilot, lambda: not isinstance(app.screen, ApprovalModal),
                    "the prompt gone")
        await until(pilot, lambda: any(
            "answered elsewhere: approved by human" in str(notification.message)
            for notification in app._notifications), "the notice")
        assert app.session_id is not None
        await asyncio.wait_for(app.runtime.run_until_quiet(app.session_id), 30)
    assert (tmp_path / "plan.md").read_text() == "the plan\n"
    assert query(db_path, "SELECT status, decided_by FROM approvals") == [("approved", "human")]
