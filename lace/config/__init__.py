"""Settings: the person's own files, then the project's `lace.toml` once trusted, merged key by
key (`lace.config.sources`; `$LACE_CONFIG` names the one file instead), with `LACE_...`
environment variables on top (e.g. `LACE_LIMITS__MAX_RUNNING=32`) and what the caller gives
(the command line) over all; each value remembers where it came from."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from lace.config.hooks import Hooks
from lace.config.problems import problem_text, setting_name
from lace.config.sources import Key, Merged, settings_files
from lace.core.assignee import parse_model
from lace.core.errors import LaceError
from lace.core.tool_names import unknown_tool_problem
from lace.core.tool_sets import EVERY_MCP_TOOL, is_mcp_tool, matches
from lace.core.worktrees import Isolation
from lace.trust import (
    PROJECT_SETTINGS,
    Project,
    parsed,
    project_of,
    prompt_files,
    trusted_bytes,
)

DEMO_MODEL = "demo/coordinator"
UNREADABLE_PROMPT = ("missing, or not a regular file of at most 1 MiB trusted with the "
                     "folder's lace.toml (lace trust shows and trusts nothing else)")
DEFAULT = "default"
"""Where a value no file, variable or flag set comes from."""
_reading: ContextVar[Merged | None] = ContextVar("settings_files", default=None)
"""The files `load_settings` read for the Settings being built (else this folder's)."""
ModelCheck = Callable[[str, str], "str | None"]
"""Why `provider, model` cannot be called, or None (`lace.llm.checks.check_model`)."""


class Limits(BaseModel):
    """How much runs at once, and how model failures are retried."""

    model_config = ConfigDict(extra="forbid")
    max_running: int = Field(default=16, ge=1, description="model calls in flight at once")
    per_provider: dict[str, int] = Field(default_factory=dict,
                                         description="model calls in flight per provider")
    model_retries: int = Field(default=4, ge=0, description="retries of a transient failure")
    retry_base_s: float = Field(default=1.0, ge=0, description="first backoff delay")
    retry_max_s: float = Field(default=30.0, ge=0, description="longest backoff delay")
    max_depth: int = Field(default=3, ge=0, description="agent levels below the root")
    max_children: int = Field(default=20, ge=0, description="live children per agent")
    spawns_per_minute: int = Field(default=30, ge=0, description="spawns per agent per minute")
    delegate_timeout_s: float = Field(default=600.0, gt=0, description="longest delegate wait")
    turn_timeout_s: float = Field(default=1800.0, gt=0, description="longest turn (not waiting)")
    stall_timeout_s: float = Field(default=300.0, gt=0,
                                   description="longest model call without an answer, and "
                                               "longest an ACP agent may leave what lace "
                                               "wrote to it unread")
    approval_timeout_s: float = Field(default=900.0, gt=0,
                                      description="how long an approval request waits")
    lease_timeout_s: float = Field(default=15.0, gt=0,
                                   description="a process silent this long has died; its "
                                               "agents are taken over")
    reserve_tokens: int = Field(default=4096, ge=0,
                                description="tokens set aside for each model call's answer "
                                            "(with its prompt's estimate) against budgets")
    mcp_start_timeout_s: float = Field(default=30.0, gt=0,
                                       description="how long an MCP server may take to start")
    mcp_call_timeout_s: float = Field(default=120.0, gt=0,
                                      description="longest MCP tool call")
    mcp_retry_s: float = Field(default=60.0, gt=0,
                               description="how long a server that failed to start is left "
                                           "out before it is tried again")


Policy = Literal["allow", "ask", "deny"]
WRITING_TOOLS = ("file_write", "file_edit", "bash")


class BashSettings(BaseModel):
    """`[tools.bash]`: `bash` runs without lace's credentials and database settings, except
    the variables named in `pass_env`."""

    model_config = ConfigDict(extra="forbid")
    pass_env: list[str] = Field(default_factory=list,
                                description="credential variables bash may see")


class ToolSettings(BaseModel):
    """`[tools.policy]`: allow, ask or deny per tool or pattern (`"mcp__git__*"`); tools not
    named are allowed, except the writing ones and MCP tools not marked read-only, which ask.
    `[tools.bash]`: what bash's environment keeps."""

    model_config = ConfigDict(extra="forbid")
    policy: dict[str, Policy] = Field(default_factory=dict)
    _read_only: bool = PrivateAttr(default=False)
    bash: BashSettings = Field(default_factory=BashSettings)
    protected_paths: list[str] = Field(
        default_factory=list, description="what file tools never write, besides lace's own "
        "files and git's: a name or glob (any folder), a path relative to the workspace, or "
        "an absolute path")

    def policy_for(self, tool: str, *, read_only_hint: bool = False) -> Policy:
        """The policy of one tool: its own entry, else the longest pattern that covers it, else
        the default (an MCP tool's server says whether it only reads: `read_only_hint`)."""
        writes = tool in WRITING_TOOLS or (is_mcp_tool(tool) and not read_only_hint)
        if self._read_only and writes:
            return "deny"
        if tool in self.policy:
            return self.policy[tool]
        patterns = [entry for entry in self.policy if entry.endswith("*") and
                    matches(entry, tool)]
        if patterns:
            return self.policy[max(patterns, key=len)]
        return "ask" if writes else "allow"

    def overridden(self, *, allow_all: bool = False, read_only: bool = False) -> ToolSettings:
        """`--yes` allows every tool for a run; `--read-only` denies every tool that writes
        (an MCP tool writes unless its server marks it read-only)."""
        policy = dict(self.policy)
        if allow_all:
            policy = {tool: "allow" for tool in (*policy, *WRITING_TOOLS, EVERY_MCP_TOOL)}
        if read_only:
            policy.update({tool: "deny" for tool in WRITING_TOOLS})
        copy = self.model_copy(update={"policy": policy})
        copy._read_only = self._read_only or read_only
        return copy


class WorkspaceSettings(BaseModel):
    """`[workspace]`: whether every helper gets a git worktree of its own (`isolation`), and
    what a spawn does when its creator's tree has uncommitted changes: refuse with an error,
    or `copy` them onto the helper's branch first."""

    model_config = ConfigDict(extra="forbid")
    isolation: Isolation = Field(default="none", description="none, or worktree: every "
                                 "writing helper works in its own git worktree")
    uncommitted: Literal["refuse", "copy"] = Field(
        default="refuse", description="refuse a worktree spawn over uncommitted changes, or "
        "copy them onto the helper's branch")


class Budget(BaseModel):
    """Caps on a subtree: tokens, cost, turns and wall-clock seconds (None: no cap)."""

    model_config = ConfigDict(extra="forbid")
    tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    turns: int | None = Field(default=None, ge=0)
    seconds: float | None = Field(default=None, ge=0)


DEFAULT_SESSION_TOKENS = 2_000_000


class Budgets(BaseModel):
    """Caps on a whole session; `session_tokens` defaults to 2 million with a real provider."""

    model_config = ConfigDict(extra="forbid")
    session_tokens: int | None = Field(default=None, ge=0)
    session_cost_usd: float | None = Field(default=None, ge=0)
    session_turns: int | None = Field(default=None, ge=0)
    session_seconds: float | None = Field(default=None, ge=0)

    def for_session(self, real_provider: bool) -> Budget:
        """The session's caps; a real provider with no cap at all gets the default token cap."""
        budget = Budget(tokens=self.session_tokens, cost_usd=self.session_cost_usd,
                        turns=self.session_turns, seconds=self.session_seconds)
        if real_provider and budget == Budget():
            budget = Budget(tokens=DEFAULT_SESSION_TOKENS)
        return budget


class Profile(BaseModel):
    """A named kind of helper: `new:<profile>` or `spawn {profile}` uses it."""

    model_config = ConfigDict(extra="forbid")
    description: str | None = None
    system_prompt: str | None = None
    system_prompt_file: str | None = None
    tools: list[str] = Field(default_factory=list)
    model: str | None = None
    fallbacks: list[str] = Field(default_factory=list,
                                 description="provider/model to continue on, in order, when "
                                             "this profile's model keeps failing")
    isolation: Isolation | None = Field(default=None, description="worktree: each helper of "
                                        "this profile works in its own git worktree")

    def prompt_text(self, config_file: Path | None, *, project: bool = False) -> str | None:
        """The inline prompt, else the file's text (relative to the config file). A trusted
        project's prompt file (`project`) is read as `lace trust` hashed it, bytes for bytes,
        or not at all: a file it could not show (past 1 MiB, not a regular file) never acts."""
        if self.system_prompt or not self.system_prompt_file:
            return self.system_prompt
        base = config_file.parent if config_file else Path.cwd()
        path = (base / self.system_prompt_file).expanduser()
        if project:
            data = trusted_bytes(base, self.system_prompt_file)
            if data is None:
                raise LaceError(f"Cannot read system_prompt_file {path}: {UNREADABLE_PROMPT}")
            return data.decode(errors="replace")
        try:
            return path.read_text()
        except OSError as error:
            raise LaceError(f"Cannot read system_prompt_file {path}: {error.strerror}") from None


class McpServer(BaseModel):
    """`[mcp_servers.NAME]`: a server lace starts (`command`, `args`, `env`, `cwd`: stdio) or
    reaches (`url`, `headers`: streamable HTTP). `${VAR}` and `${VAR:-default}` in any of them
    are read from the environment, as in `.mcp.json`."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["stdio", "http", "streamable-http"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a server lace starts) or url (one it "
                             "reaches over streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for a command; a url server takes headers")
        if self.command is not None and self.headers:
            raise ValueError("headers are for a url server; a command takes env")
        return self


class AcpAgent(BaseModel):
    """`[acp_agents.NAME]`: an ACP agent lace starts (in the task's workspace) for a task
    assigned to `acp:NAME`, speaking ACP on its stdin and stdout."""

    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict,
                                description="variables it gets besides a minimal environment")
    tools: list[str] | None = Field(
        default=None, description="the lace tools whose powers its permission and file "
        "requests may use, within its creator's (default: all of its creator's)")


class WebSettings(BaseModel):
    """`[web]`: how `lace web` serves the app."""

    model_config = ConfigDict(extra="forbid")
    max_apps: int = Field(default=4, ge=1, description="app processes (open pages) at once")


class Settings(BaseSettings):
    """Everything configurable; unknown keys are errors so typos do not pass silently."""

    model_config = SettingsConfigDict(env_prefix="LACE_", env_nested_delimiter="__",
                                      extra="forbid")
    model: str = DEMO_MODEL
    limits: Limits = Field(default_factory=Limits)
    budgets: Budgets = Field(default_factory=Budgets)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    workspace: WorkspaceSettings = Field(default_factory=WorkspaceSettings)
    profiles: dict[str, Profile] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    acp_agents: dict[str, AcpAgent] = Field(default_factory=dict)
    web: WebSettings = Field(default_factory=WebSettings)
    hooks: Hooks = Field(default_factory=dict, description="[[hooks.EVENT]]: commands run at "
                         "points of every agent's work, in Claude Code's hooks contract")
    fallbacks: list[str] = Field(default_factory=list,
                                 description="provider/model to continue on, in order, for "
                                             "every agent whose profile has none")

    def fallbacks_for(self, profile: str | None) -> tuple[str, ...]:
        """The models an agent falls back to: its profile's list, else the top-level one."""
        own = self.profiles[profile].fallbacks if profile in self.profiles else []
        return tuple(own or self.fallbacks)

    _files: Merged = PrivateAttr(default_factory=Merged)
    _given: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        files = _reading.get() or Merged.of(settings_files())
        return (init_settings, env_settings, InitSettingsSource(settings_cls, files.data))

    def origin_of(self, key: Key) -> str:
        """Where the value at `key` (`("limits", "max_running")`) came from: `given` (the
        command line), the environment variable that set it, the file that set it, or
        `default`."""
        if _set_in(self._given, key):
            return "given"
        for length in range(1, len(key) + 1):
            name = "LACE_" + "__".join(key[:length]).upper()
            if any(variable.upper() == name for variable in os.environ):
                return name
        path = self._files.file_of(key)
        return str(path) if path is not None else DEFAULT

    @property
    def files(self) -> Merged:
        """The settings files read, and what each set."""
        return self._files


def _set_in(data: Any, key: Key) -> bool:
    for part in key:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def leaves(value: Any, prefix: Key = ()) -> Iterator[tuple[Key, Any]]:
    """`(key, value)` for each value of a dumped Settings that is not a non-empty table."""
    if isinstance(value, dict) and value:
        for name, child in value.items():
            yield from leaves(child, (*prefix, str(name)))
    else:
        yield prefix, value


Source = Callable[..., str]
"""Where the setting at a key (its parts as arguments) came from, for an error message."""


def _check_tool_names(settings: Settings, source: Source,
                      python_tools: tuple[str, ...] = ()) -> None:
    """Every tool named in `[tools.policy]` and in each profile's `tools` must exist (lace's,
    or one of the process's `python_tools`): a typo (`Bash = "deny"`) would otherwise leave the
    real tool on its default, silently."""
    named = [("tools.policy", ("tools", "policy", tool), tool) for tool in settings.tools.policy]
    named += [(f"profiles.{name}.tools", ("profiles", name, "tools"), tool)
              for name, profile in settings.profiles.items() for tool in profile.tools]
    named += [(f"acp_agents.{name}.tools", ("acp_agents", name, "tools"), tool)
              for name, agent in settings.acp_agents.items() for tool in agent.tools or []]
    for where, key, tool in named:
        problem = unknown_tool_problem(tool, python_tools)
        if problem:
            raise LaceError(f"Bad setting {where} in {source(*key)}: {problem}")


def _check_fallbacks(settings: Settings, source: Source,
                     check_model: ModelCheck | None) -> None:
    """Every fallback must be `provider/model` and, when `check_model` is given, callable
    (provider known, key present), as a spawn's model must be."""
    named: list[tuple[tuple[str, ...], str]] = [(("fallbacks",), model)
                                                for model in settings.fallbacks]
    named += [(("profiles", name, "fallbacks"), model)
              for name, profile in settings.profiles.items() for model in profile.fallbacks]
    for key, model in named:
        where = f"Bad setting {'.'.join(key)} in {source(*key)}"
        try:
            provider, name = parse_model(model)
        except LaceError as error:
            raise LaceError(f"{where}: {error}") from None
        problem = check_model(provider, name) if check_model else None
        if problem:
            raise LaceError(f"{where}: {problem}")


def check_project_settings(data: dict[str, Any], source: Path) -> None:
    """A project's `lace.toml` (parsed) must be valid settings on its own (no environment, no
    other file): one clear error otherwise."""
    fields: dict[str, Any] = {name: (field.annotation, field)
                              for name, field in Settings.model_fields.items()}
    alone = create_model("SettingsFile", __config__=ConfigDict(extra="forbid"), **fields)
    try:
        settings = Settings.model_construct(**dict(alone.model_validate(data)))
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        raise LaceError(f"Bad setting {setting_name(problem)} in {source}: "
                        f"{problem_text(Settings, problem)}") from None
    _check_tool_names(settings, lambda *_key: str(source))


def checked_project(folder: Path) -> Project:
    """`folder`'s project files, each readable and its `lace.toml` valid settings; one clear
    error otherwise, so that nothing broken is offered for trust."""
    project = project_of(folder)
    if PROJECT_SETTINGS in project.files:
        check_project_settings(parsed(project, PROJECT_SETTINGS),
                               project.folder / PROJECT_SETTINGS)
    for name in prompt_files(project.files.get(PROJECT_SETTINGS)):
        if name not in project.files:  # never shown, so never trusted
            raise LaceError(f"Cannot read system_prompt_file "
                            f"{(project.folder / name).expanduser()}: {UNREADABLE_PROMPT}")
    return project


def load_settings(*, check_model: ModelCheck | None = None, python_tools: tuple[str, ...] = (),
                  workspace: Path | None = None, **overrides: Any) -> Settings:
    """The settings for `workspace` (default: this folder), or one clear error naming the bad
    key and where it came from; profile prompt files are read here (relative to the file that
    names them), so a missing one fails at start, not mid-session. With `check_model`
    (processes that run agents), every fallback model must be callable too; `python_tools`
    names the process's Python tools, which the settings may name."""
    files = Merged.of(settings_files(workspace))
    reading = _reading.set(files)
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        key = tuple(str(part) for part in problem["loc"])
        origin = files.file_of(key) or "the environment"
        raise LaceError(f"Bad setting {setting_name(problem)} in {origin}: "
                        f"{problem_text(Settings, problem)}") from None
    finally:
        _reading.reset(reading)
    settings._files, settings._given = files, overrides

    def source(*key: str) -> str:
        origin = settings.origin_of(key)
        return "the environment" if origin == DEFAULT else origin

    _check_tool_names(settings, source, python_tools)
    _check_fallbacks(settings, source, check_model)
    for name, profile in settings.profiles.items():
        if profile.model is not None and "/" not in profile.model:
            raise LaceError(f"Bad setting profiles.{name}.model in "
                            f"{source('profiles', name, 'model')}: expected provider/model, "
                            f"got {profile.model!r}")
        prompt_file = files.file_of(("profiles", name, "system_prompt_file"))
        project = any(found.kind == "project" and found.path == prompt_file
                      for found in files.files)
        settings.profiles[name] = profile.model_copy(update={
            "system_prompt": profile.prompt_text(prompt_file, project=project)})
    return settings


def default_model() -> str:
    """The root agent's model: `--model`, else `$LACE_MODEL`, else lace's offline demo model."""
    return os.environ.get("LACE_MODEL") or DEMO_MODEL
