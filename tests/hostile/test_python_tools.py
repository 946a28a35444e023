"""Hostile calls of a person's Python functions: a model sending bombs and wrong types, and
functions that return too much, leak a key, never return or end the process; each must end as a
tool result the model can read, with lace and every other agent still running."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lace.config import Limits
from lace.llm.types import ScriptedReply
from lace.store import Store
from lace.tools.python_tools import ToolDefinitionError, python_tools
from lace.tools.shell import OUTPUT_CAP
from tests.conftest import query
from tests.root_turn import first_root_answer
from tests.scripted import ScriptedModels, reply, text
from tests.test_python_tools import running

SECRET = "sk-hostile-python-tool-0123456789"


def one_call(name: str, arguments: Any) -> Callable[[list[dict[str, Any]]], ScriptedReply]:
    """A root that calls `name` once, then answers with what the model was told."""

    def root(messages: list[dict[str, Any]]) -> ScriptedReply:
        told = [text(message) for message in messages if message["role"] == "tool"]
        return reply(told[-1]) if told else reply(None, (name, arguments))

    return root


def stored_results(db_path: Path, session_id: str) -> list[tuple[Any, ...]]:
    return query(db_path, "SELECT json_extract(data, '$.is_error'), json_extract(data, "
                          "'$.message.content') FROM events WHERE thread_id = ? AND type = "
                          "'tool_result' ORDER BY id", session_id)


def count(n: int) -> int:
    """A number back."""
    return n


async def test_a_nesting_bomb_a_huge_string_and_wrong_types_are_tool_errors(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    for arguments in ("[" * 100_000 + "]" * 100_000, '{"n": ' + "[" * 5000 + "]" * 5000 + "}",
                      {"n": "x" * 10_000_000}, {"n": "12abc"}, {"n": 1, "extra": 2}, "not json",
                      '["n"]'):
        models.on("root", one_call("count", arguments))
        async with running(store, count) as runtime:
            session, answer = await first_root_answer(runtime, "go", "scripted/root")
        ((is_error, content),) = stored_results(db_path, session.id)
        assert is_error == 1 and "count" in (answer or ""), arguments if len(
            str(arguments)) < 100 else len(str(arguments))
        assert len(content) < 5000


def leak() -> dict[str, str]:
    """Reads a key it should not hand back."""
    return {"key": SECRET}


def fail_with_key() -> str:
    """Fails and says the key."""
    raise RuntimeError(f"bad token {SECRET}")


@pytest.mark.parametrize("function", [leak, fail_with_key])
async def test_a_credential_in_a_result_is_masked_before_the_model_reads_it(
        store: Store, models: ScriptedModels, db_path: Path, monkeypatch: pytest.MonkeyPatch,
        function: Callable[..., Any]) -> None:
    monkeypatch.setenv("ACME_API_KEY", SECRET)
    models.on("root", one_call(function.__name__, {}))
    async with running(store, function) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    sent = str(models.calls_of("root"))
    assert SECRET not in sent and SECRET not in (answer or "")
    assert SECRET not in str(stored_results(db_path, session.id))


def flood() -> str:
    """Ten megabytes of text."""
    return "y" * 10_000_000


async def test_a_huge_result_is_capped_like_bash_output(
        store: Store, models: ScriptedModels, db_path: Path) -> None:
    models.on("root", one_call("flood", {}))
    async with running(store, flood) as runtime:
        session, _answer = await first_root_answer(runtime, "go", "scripted/root")
    ((is_error, content),) = stored_results(db_path, session.id)
    assert is_error == 0 and len(content) < OUTPUT_CAP + 200
    assert "characters cut" in content


def circular() -> list[Any]:
    """A list that holds itself."""
    items: list[Any] = []
    items.append(items)
    return items


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def unprintable() -> Unprintable:
    """Something that has no text."""
    return Unprintable()


def surrogate() -> str:
    """Text that is not valid Unicode."""
    return "half \ud800 a pair \x00 and a nul"


@pytest.mark.parametrize("function", [circular, unprintable, surrogate])
async def test_a_result_that_is_not_json_or_not_text_is_still_a_tool_result(
        store: Store, models: ScriptedModels, db_path: Path,
        function: Callable[..., Any]) -> None:
    models.on("root", one_call(function.__name__, {}))
    async with running(store, function) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert len(stored_results(db_path, session.id)) == 1
    assert answer


def exits(code: int) -> str:
    """Ends the process, as argparse does on bad input."""
    sys.exit(code)


def interrupts() -> str:
    """Raises KeyboardInterrupt from its thread."""
    raise KeyboardInterrupt


async def exits_async() -> str:
    """Ends the process from the event loop."""
    raise SystemExit(3)


class Odd(BaseException):
    def __str__(self) -> str:
        raise RuntimeError("not even a message")


def odd() -> str:
    """Raises a BaseException of its own."""
    raise Odd("odd")


@pytest.mark.parametrize(("function", "arguments"), [
    (exits, {"code": 2}), (interrupts, {}), (exits_async, {}), (odd, {})])
async def test_a_function_that_raises_system_exit_ends_its_call_not_lace(
        store: Store, models: ScriptedModels, db_path: Path,
        function: Callable[..., Any], arguments: dict[str, Any]) -> None:
    models.on("root", one_call(function.__name__, arguments))
    async with running(store, function) as runtime:
        session, answer = await first_root_answer(runtime, "go", "scripted/root")
    assert (answer or "").startswith(f"{function.__name__} raised ")
    assert stored_results(db_path, session.id)[0][0] == 1


HANG = threading.Event()


def hang() -> str:
    """Never returns (until the test ends)."""
    HANG.wait(30)
    return "woke"


@pytest.fixture
def hanging() -> Iterator[None]:
    HANG.clear()
    yield
    HANG.set()


async def test_a_function_that_never_returns_is_cut_by_the_turn_watchdog(
        store: Store, models: ScriptedModels, db_path: Path, hanging: None) -> None:
    models.on("root", one_call("hang", {}))
    limits = Limits(retry_base_s=0.001, retry_max_s=0.005, turn_timeout_s=0.5)
    async with running(store, hang, limits=limits) as runtime:
        session = await runtime.start_session("go", "scripted/root")
        async with asyncio.timeout(10):
            await runtime.run_until_quiet(session.id)
    (status,) = query(db_path, "SELECT status FROM agent_metadata WHERE thread_id = ?",
                      session.id)
    assert status != "running"


def numbers():  # type: ignore[no-untyped-def]
    """A generator."""
    yield 1


async def numbers_async():  # type: ignore[no-untyped-def]
    """An async generator."""
    yield 1


@pytest.mark.parametrize("function", [numbers, numbers_async])
def test_a_generator_function_is_refused_when_the_runtime_is_assembled(
        function: Callable[..., Any]) -> None:
    with pytest.raises(ToolDefinitionError, match="generator"):
        python_tools([function])
