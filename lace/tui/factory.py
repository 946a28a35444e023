"""Builds the app with its store and runtime; the CLI and the tests share it."""

from __future__ import annotations

import os
from pathlib import Path

from lace.config import DEMO_MODEL, Settings, config_path, default_model, load_settings
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.llm.types import ModelClient
from lace.paths import lace_home
from lace.runtime import open_runtime
from lace.runtime.board import Board
from lace.runtime.databases import open_store
from lace.tui.app import LaceApp
from lace.tui.widgets.welcome import ModelReadiness

LATEST = "latest"


def create_app(*, db: str | None = None, model: str | None = None,
               continue_thread: str | None = None, settings: Settings | None = None,
               client: ModelClient | None = None, workspace: Path | None = None) -> LaceApp:
    """The app on a (migrated) database; `continue_thread` is a thread id or LATEST. An
unknown provider is refused here; a missing key is shown on the first screen."""
    from lace.llm.checks import check_model, check_provider

    settings = settings or load_settings()
    source = model_source(model, settings)
    model = model or settings.model or default_model()
    provider, name = parse_model(model)
    unknown = check_provider(provider, name)
    if unknown:
        raise LaceError(unknown)
    readiness = model_readiness(model, source, check_model(provider, name))
    store = open_store(db)
    session_id = None
    if continue_thread == LATEST:
        latest = Board(store, settings).latest_session()
        if latest is None:
            raise LaceError("No session to continue yet: run lace and type a request.")
        session_id = latest.id
    elif continue_thread is not None:
        session_id = Board(store, settings).get_thread(continue_thread).root_id
    if client is None:
        from lace.llm.client import default_client

        client = default_client()
    runtime = open_runtime(store, settings, client, check_model=check_model,
                           workspace=workspace or Path.cwd())
    app = LaceApp(runtime, model=model, session_id=session_id, readiness=readiness)
    if continue_thread not in (None, LATEST):
        app.selected = continue_thread
    return app


def model_source(flag: str | None, settings: Settings) -> str:
    """Where the root's model comes from, in the words a person would use to change it."""
    if flag:
        return "from --model"
    if os.environ.get("LACE_MODEL"):
        return "from LACE_MODEL"
    if settings.model != DEMO_MODEL:
        return f"from {config_path() or 'the settings'}"
    return "the default: lace's offline demo"


def model_readiness(model: str, source: str, problem: str | None) -> ModelReadiness:
    """What the first screen says about the model: `problem` is `check_model`'s answer."""
    from lace.llm.checks import has_custom_base_url, local_provider

    provider = model.split("/", 1)[0]
    if local_provider(provider):
        key = "no key needed: lace runs this model itself, offline"
    elif has_custom_base_url(provider):
        key = f"no key needed: {provider} calls go to the endpoint set in the environment"
    else:
        key = f"a key for {provider} is set in the environment"
    config_file = shown_path(config_path()) or \
        f"./lace.toml or {shown_path(lace_home() / 'config.toml')}"
    return ModelReadiness(model=model, source=source, config_file=config_file, key=key,
                          problem=problem)


def shown_path(path: Path | None) -> str | None:
    """A path as a person would type it: `~/...` under the home folder."""
    if path is None:
        return None
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_absolute() and path.is_relative_to(home) \
        else str(path)
