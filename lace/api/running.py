"""`lace.run` and `lace.run_async`: a session started from Python, run until it is quiet (the
root and every helper done), and its answer, usage and cost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from pydantic import BaseModel, ValidationError

from lace.api.output import (
    OUTPUT_RETRIES,
    ModelT,
    OutputValidationError,
    output_instruction,
    parse_output,
    retry_message,
)
from lace.api.result import Result, Usage
from lace.config import Settings, load_settings
from lace.config.keys import use_stored_keys
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.runtime import Runtime, open_runtime
from lace.runtime.databases import open_store
from lace.runtime.outcome import read_outcome, session_totals
from lace.runtime.public import Store, python_tools

PythonFunction = Callable[..., Any]


class RunError(LaceError):
    """The session ended without an answer from its root: the root's turn failed, or its model
    gave no answer (an empty reply), where `lace run` exits 1."""


@overload
def run(prompt: str, *, model: str, tools: Sequence[PythonFunction] = (),
        db: str | Path | None = None, workspace: str | Path | None = None,
        output_type: None = None, config: Settings | None = None,
        output_retries: int = OUTPUT_RETRIES) -> Result[str]: ...


@overload
def run(prompt: str, *, model: str, tools: Sequence[PythonFunction] = (),
        db: str | Path | None = None, workspace: str | Path | None = None,
        output_type: type[ModelT], config: Settings | None = None,
        output_retries: int = OUTPUT_RETRIES) -> Result[ModelT]: ...


def run(prompt: str, *, model: str, tools: Sequence[PythonFunction] = (),
        db: str | Path | None = None, workspace: str | Path | None = None,
        output_type: type[BaseModel] | None = None, config: Settings | None = None,
        output_retries: int = OUTPUT_RETRIES) -> Result[Any]:
    """Start a session with `prompt` for a root on `model` (`provider/model`), run it until
    the root and every helper are done, and return the root's answer. `tools` are your own
    Python functions, offered to the root (and to helpers it hands them to); `output_type` a
    pydantic model the answer must validate against. Blocks; inside a running event loop use
    `await lace.run_async(...)`."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise LaceError("lace.run() blocks, so it cannot be called inside a running event loop; "
                        "use `await lace.run_async(...)` there")
    return asyncio.run(run_async(prompt, model=model, tools=tools, db=db, workspace=workspace,
                                 output_type=output_type, config=config,
                                 output_retries=output_retries))


@overload
async def run_async(prompt: str, *, model: str, tools: Sequence[PythonFunction] = (),
                    db: str | Path | None = None, workspace: str | Path | None = None,
                    output_type: None = None, config: Settings | None = None,
                    output_retries: int = OUTPUT_RETRIES) -> Result[str]: ...


@overload
async def run_async(prompt: str, *, model: str, tools: Sequence[PythonFunction] = (),
                    db: str | Path | None = None, workspace: str | Path | None = None,
                    output_type: type[ModelT], config: Settings | None = None,
                    output_retries: int = OUTPUT_RETRIES) -> Result[ModelT]: ...


async def run_async(prompt: str, *, model: str, tools: Sequence[PythonFunction] = (),
                    db: str | Path | None = None, workspace: str | Path | None = None,
                    output_type: type[BaseModel] | None = None,
                    config: Settings | None = None,
                    output_retries: int = OUTPUT_RETRIES) -> Result[Any]:
    """`lace.run` for code already in an event loop; the same parameters."""
    from lace.llm.checks import check_model
    from lace.llm.client import default_client

    if output_retries < 0:
        raise LaceError(f"output_retries={output_retries} must be 0 or more.")
    use_stored_keys()  # `lace keys set`'s, where the environment has none
    provider, name = parse_model(model)
    problem = check_model(provider, name)
    if problem:
        raise LaceError(problem)
    functions = python_tools(tools)  # a bad function is refused before anything is written
    folder = Path(workspace or Path.cwd()).expanduser().resolve()
    if not folder.is_dir():
        raise LaceError(f"workspace={str(workspace)!r} is not a folder.")
    settings = config or load_settings(check_model=check_model, python_tools=tuple(functions),
                                       workspace=folder)
    store = open_store(None if db is None else str(db))
    try:
        runtime = open_runtime(store, settings, default_client(), check_model=check_model,
                               workspace=folder, python_tools=list(functions.values()))
        try:
            instruction = "" if output_type is None else output_instruction(output_type)
            root_id = (await runtime.start_session(prompt + instruction, model)).id
            await runtime.run_until_quiet(root_id)
            output: Any = _answer(store, root_id)
            if output_type is not None:
                output = await _validated(runtime, root_id, output_type, output,
                                          output_retries)
        finally:
            await runtime.stop()
            runtime.close()
        return _result(store, root_id, output)
    finally:
        store.close()


def _answer(store: Store, root_id: str) -> str:
    """The root's last answer; RunError when its turn failed or its model gave no answer."""
    outcome = read_outcome(store, root_id)
    if outcome.root.status == "error":
        raise RunError(f"the root of session {root_id} failed: {outcome.root.stop_reason or ''}"
                       f" (see lace show {root_id})")
    if outcome.silent:
        raise RunError(f"session {root_id}: {outcome.problem}")
    return outcome.answer or ""


async def _validated(runtime: Runtime, root_id: str, output_type: type[ModelT], answer: str,
                     retries: int) -> ModelT:
    """The answer as `output_type`; an answer that does not validate goes back to the root
    with the errors, at most `retries` times."""
    attempt = 0
    while True:
        try:
            return parse_output(output_type, answer)
        except ValidationError as error:
            if attempt >= retries:
                raise OutputValidationError(
                    f"the root's answer in session {root_id} did not validate against "
                    f"{output_type.__name__} after {attempt + 1} tries: {error}") from None
            told = retry_message(error)
        attempt += 1
        await runtime.send(root_id, told)
        await runtime.run_until_quiet(root_id)
        answer = _answer(runtime.store, root_id)


def _result(store: Store, root_id: str, output: Any) -> Result[Any]:
    totals = session_totals(store, root_id)
    usage = Usage(input_tokens=totals.tokens_in, output_tokens=totals.tokens_out,
                  calls=totals.calls)
    return Result(output=output, session_id=root_id, usage=usage,
                  cost_usd=None if totals.unpriced_calls else totals.cost_usd)
