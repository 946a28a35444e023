"""The one place a Runtime is put together from settings: every front end and every test calls
`open_runtime`, so no two of them wire the parts differently."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lace.config import Settings
from lace.llm.types import ModelClient
from lace.runtime.acp_worker import acp_checked
from lace.runtime.approvals import Approvals
from lace.runtime.database import AsyncStore
from lace.runtime.events import EventBus, Warned
from lace.runtime.facade import Runtime
from lace.runtime.hook_points import HookPoints
from lace.runtime.hooks import HookRunner
from lace.runtime.scheduler import Scheduler
from lace.runtime.sessions import place_of
from lace.runtime.tool_runner import ToolRunner
from lace.runtime.tracing import tracing_from
from lace.runtime.turns import TurnRunner
from lace.store import Store
from lace.store.engines import ChangeFeed, Polling
from lace.store.retry import never
from lace.tools.base import ModelCheck, no_model_check
from lace.tools.mcp.configured import configured_servers
from lace.tools.mcp.servers import McpServers
from lace.tools.python_tools import PythonTool
from lace.tools.python_tools import python_tools as python_tools_of
from lace.tools.workspace import EditorFiles, Workspace

PythonFunction = Callable[..., Any]
log = logging.getLogger("lace.runtime")


@dataclass(frozen=True)
class Sharing:
    """How a process shares its database with other processes that run agents."""

    feed: ChangeFeed | None = None
    """How it hears of their commits (None: it runs its sessions alone and only polls)."""
    share_work: bool = False
    """It claims only a fair share of the turns at once, and a session is quiet only when the
    database says so (`lace run --workers`, `lace worker`, `lace mcp serve`)."""
    sessions: frozenset[str] = field(default_factory=frozenset)
    """The sessions it serves from the start."""
    serve_all: bool = False
    """It serves every session of the database, new ones too (`lace worker` alone)."""
    max_agents: int | None = None
    """At most this many turns at once here."""


ALONE = Sharing()


def open_runtime(store: Store, settings: Settings, client: ModelClient, *,
                 check_model: ModelCheck = no_model_check, workspace: Path | None = None,
                 sharing: Sharing = ALONE,
                 python_tools: Sequence[PythonFunction | PythonTool] = (),
                 editor: EditorFiles | None = None,
                 stopping: Callable[[], bool] = never) -> Runtime:
    """A runtime over `store`: the process registered (its lease), the workspace's tools, the
    configured MCP servers and the person's `python_tools` (both checked first: a bad one is
    refused before anything is written), the approval policy, the turns and the scheduler.
    Agents work in `workspace` (None: no file tools or bash); their file tools use `editor`'s
    buffers when given (`lace acp`). The registration waits out a server's outage until
    `stopping` says so (then GaveUpError)."""
    check_model = acp_checked(check_model, settings.acp_agents)
    functions = python_tools_of(python_tools)  # may refuse
    servers, warnings = configured_servers(settings, workspace)  # may refuse
    process_id = uuid.uuid4().hex
    store.write(lambda tx: tx.processes.register(  # on a server: waits out a restart
        process_id, settings.limits.lease_timeout_s), stopping=stopping)
    bus = EventBus()
    db = AsyncStore(store)
    tools = ToolRunner(db=db, bus=bus, check_model=check_model, limits=settings.limits,
                       tracing=tracing_from(os.environ, db, log.warning),
                       profiles=settings.profiles, budgets=settings.budgets,
                       workspace=None if workspace is None else Workspace.for_lace(
                           workspace, database_url=store.database.url,
                           protected_paths=settings.tools.protected_paths, editor=editor),
                       workspace_settings=settings.workspace, python_tools=functions)
    tools.approvals = Approvals(db=db, bus=bus, settings=settings.tools,
                                timeout_s=settings.limits.approval_timeout_s,
                                changed=tools.change_signal)
    if settings.hooks:
        tools.hooks = HookPoints(HookRunner(
            settings.hooks, workspace, settings.tools.bash.pass_env,
            lambda text: bus.publish(Warned(text))), db, tools.workspace)
        bus.subscribe(tools.hooks.published)
    if servers or warnings:
        tools.mcp = McpServers(servers, settings.limits,
                               lambda text: bus.publish(Warned(text)), warnings)
    place = None if workspace is None else place_of(workspace)
    turns = TurnRunner(db=db, client=client, limits=settings.limits, bus=bus, tools=tools,
                       budgets=settings.budgets, holder=process_id,
                       place=place if sharing.share_work else None,
                       fallbacks_for=settings.fallbacks_for, acp_agents=settings.acp_agents)
    scheduler = Scheduler(db=db, runner=turns, bus=bus, limits=settings.limits,
                          process_id=process_id, database_path=store.database.path,
                          feed=sharing.feed or Polling(), sessions=set(sharing.sessions),
                          serve_all=sharing.serve_all, max_agents=sharing.max_agents,
                          share_work=sharing.share_work)
    db.on_commit = scheduler.apply  # wake-ups, announcements and cancels after each COMMIT
    return Runtime(store=store, db=db, settings=settings, client=client, bus=bus, tools=tools,
                   scheduler=scheduler, workspace=workspace, place=place)
