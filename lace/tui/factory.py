"""Builds the app with its store and runtime; the CLI and the tests share it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lace.config import DEFAULT, DEMO_MODEL, Settings, checked_project, default_model, load_settings
from lace.config.sources import project_folder
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.llm.types import ModelClient
from lace.paths import user_config_file
from lace.runtime import Runtime, open_runtime
from lace.runtime.board import Board
from lace.runtime.databases import missing_board, open_store
from lace.trust import Project, described, trust
from lace.tui.app import AppStart, LaceApp, TrustOffer
from lace.tui.widgets.welcome import ModelReadiness

LATEST = "latest"


def create_app(*, db: str | None = None, model: str | None = None,
               continue_thread: str | None = None, settings: Settings | None = None,
               client: ModelClient | None = None, workspace: Path | None = None,
               reload_settings: Callable[[], Settings] = load_settings) -> LaceApp:
    """The app on a (migrated) database; `continue_thread` is a thread id or LATEST. An
unknown provider is refused here; a missing key is shown on the first screen. When the folder
brings configuration the person has not trusted, the app asks first; a yes rebuilds it from
`reload_settings`."""
    from lace.llm.checks import check_model

    flag = model
    settings = settings or load_settings(workspace=workspace)
    model, readiness = _root_model(flag, settings)
    missing = missing_board(db) if continue_thread is not None else None
    if missing is not None:  # nothing to continue: refused before any file is made
        raise LaceError(f"No session to continue: {missing}; nothing was created (lace opens "
                        "a new session without --continue)")
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
    chosen_client, folder = client, workspace or Path.cwd()

    def runtime_for(chosen: Settings) -> Runtime:
        return open_runtime(store, chosen, chosen_client, check_model=check_model,
                            workspace=folder)

    def rebuilt() -> AppStart:
        again = reload_settings()
        model, readiness = _root_model(flag, again)
        return AppStart(runtime_for(again), model, readiness)

    app = LaceApp(runtime_for(settings), model=model, session_id=session_id,
                  readiness=readiness, trust=trust_offer([project_folder(folder), folder], rebuilt))
    if continue_thread not in (None, LATEST):
        app.selected = continue_thread
    return app


def _root_model(flag: str | None, settings: Settings) -> tuple[str, ModelReadiness]:
    """The root's model and what the first screen says of it; an unknown provider is refused."""
    from lace.llm.checks import check_model, check_provider

    source = model_source(flag, settings)
    model = flag or settings.model or default_model()
    provider, name = parse_model(model)
    unknown = check_provider(provider, name)
    if unknown:
        raise LaceError(unknown)
    origin = settings.origin_of(("model",))
    config_file = Path(origin) if origin not in (DEFAULT, "given") and \
        not origin.startswith("LACE_") else user_config_file()
    return model, model_readiness(model, source, check_model(provider, name), config_file)


def trust_offer(folders: list[Path], rebuilt: Callable[[], AppStart]) -> TrustOffer | None:
    """The question for the folders whose own configuration the person has not trusted as it
    is (None when there is none): all of it, and what a yes does (trust each, then rebuild). A
    file that cannot be read is not offered: the settings ignore it, and say so."""
    untrusted: list[Project] = []
    lines: list[str] = []
    for folder in dict.fromkeys(path.resolve() for path in folders):
        try:
            project = checked_project(folder)
            shown = described(project)
        except LaceError:
            continue
        if project.files and not project.trusted():
            untrusted.append(project)
            lines += shown

    def accept() -> AppStart:
        for project in untrusted:
            trust(project)
        return rebuilt()

    folder_names = ", ".join(str(project.folder) for project in untrusted)
    return TrustOffer(folder_names, lines, accept) if untrusted else None


def model_source(flag: str | None, settings: Settings) -> str:
    """Where the root's model comes from, in the words a person would use to change it."""
    if flag:
        return "from --model"
    origin = settings.origin_of(("model",))
    if origin.startswith("LACE_"):
        return f"from {origin}"
    if settings.model != DEMO_MODEL and origin != DEFAULT:
        return f"from {shown_path(Path(origin))}"
    return "the default: lace's offline demo"


def model_readiness(model: str, source: str, problem: str | None,
                    config_file: Path | None = None) -> ModelReadiness:
    """What the first screen says about the model: `problem` is `check_model`'s answer;
    `config_file` is where to set another (default: the person's own file)."""
    from lace.llm.checks import has_custom_base_url, keyless, local_provider

    provider = model.split("/", 1)[0]
    endpoint = f"{provider} calls go to the endpoint set in the environment"
    if local_provider(provider):
        key = "no key needed: lace runs this model itself, offline"
    elif keyless(provider):
        key = f"no key needed: {endpoint}"
    elif has_custom_base_url(provider):
        key = f"{endpoint}, with the key {key_origin(provider)}"
    else:
        key = f"a key for {provider} is {key_origin(provider)}"
    shown = shown_path(config_file or user_config_file()) or "config.toml"
    return ModelReadiness(model=model, source=source, config_file=shown, key=key,
                          problem=problem)


def key_origin(provider: str) -> str:
    """Where the provider's key comes from: `lace keys set` or the environment."""
    from lace.config.keys import stored_key_in_use
    from lace.llm.checks import OPENAI_ENDPOINT_OF, key_variable

    try:
        variable = key_variable(OPENAI_ENDPOINT_OF.get(provider, provider))
    except LaceError:  # a provider with no one key variable: the environment has what it needs
        return "set in the environment"
    return "stored with lace keys set" if stored_key_in_use(variable) else "set in the environment"


def shown_path(path: Path | None) -> str | None:
    """A path as a person would type it: relative inside this folder, `~/...` under the home
    folder."""
    if path is None:
        return None
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        return str(path.relative_to(Path.cwd()))
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_absolute() and path.is_relative_to(home) \
        else str(path)
