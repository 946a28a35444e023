"""Builds the app with its store and runtime; the CLI and the tests share it."""

from __future__ import annotations

from pathlib import Path

from lace.config import Settings, default_model, load_settings
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.llm.types import ModelClient
from lace.runtime.supervisor import Supervisor
from lace.store import Store, open_database
from lace.tui.app import LaceApp

LATEST = "latest"


def create_app(*, db: str | None = None, model: str | None = None,
               continue_thread: str | None = None, settings: Settings | None = None,
               client: ModelClient | None = None, workspace: Path | None = None) -> LaceApp:
    """The app on a (migrated) database; `continue_thread` is a thread id or LATEST."""
    from lace.llm.checks import check_model

    settings = settings or load_settings()
    model = model or settings.model or default_model()
    provider, name = parse_model(model)
    problem = check_model(provider, name)
    if problem:
        raise LaceError(problem)
    store = Store(open_database(db))
    session_id = None
    if continue_thread is not None:
        with store.reading() as tx:
            if continue_thread == LATEST:
                latest = tx.latest_session()
                if latest is None:
                    raise LaceError("No session to continue yet: run lace and type a request.")
                session_id = latest.id
            else:
                session_id = tx.get_thread(continue_thread).root_id
    if client is None:
        from lace.llm.client import default_client

        client = default_client()
    runtime = Supervisor(store=store, client=client, settings=settings, check_model=check_model,
                         workspace=workspace or Path.cwd())
    app = LaceApp(runtime, model=model, session_id=session_id)
    if continue_thread not in (None, LATEST):
        app.selected = continue_thread
    return app
