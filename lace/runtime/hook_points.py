"""Where lace calls hooks: the one tool path (PreToolUse, PostToolUse), an agent's turn
(SubagentStart, Stop, SubagentStop, PreCompact), the person's prompts and sessions
(UserPromptSubmit, SessionStart, SessionEnd), and what the runtime publishes (Notification for
an approval waiting, TaskCreated and TaskCompleted). Every agent of every tree passes here, so
a hook reaches helpers of helpers as it reaches the root."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lace.config import Policy, Settings
from lace.config.hooks import HookEvent
from lace.core.clock import now_iso
from lace.core.errors import LaceError
from lace.core.ids import is_thread_id
from lace.core.records import Agent, Task
from lace.runtime.database import AsyncStore
from lace.runtime.events import ApprovalRequested, RuntimeEvent, TasksChanged
from lace.runtime.hooks import NOTHING, HookOutcome, HookRunner, stricter
from lace.runtime.isolation import workspace_of
from lace.runtime.tool_calls import Executed, ToolCall
from lace.tools.base import ToolContext, ToolError
from lace.tools.workspace import Workspace
from lace.tools.worktrees import NoWorkspace

Resolve = Callable[[dict[str, Any]], Awaitable[tuple[ToolCall, Policy]]]
"""The call again with other arguments (a PreToolUse `updatedInput`), validated, and its policy."""
MAX_STOP_BLOCKS = 8
"""How often Stop hooks may send an agent back to work in one turn."""
DONE = "completed"


@dataclass
class HookPoints:
    """The hooks of one runtime, called at each point of the work."""

    runner: HookRunner
    db: AsyncStore
    workspace: Workspace | None = None
    """The runtime's workspace; a helper with a worktree has its hooks run there."""
    stopping: dict[str, str] = field(default_factory=dict)
    """Agents a hook stopped (`continue: false`): their turn ends after this call."""
    sent_back: dict[str, int] = field(default_factory=dict)
    """How often Stop hooks sent each agent back to work in its current turn."""
    sessions: set[str] = field(default_factory=set)
    """Sessions started or resumed here: each gets its SessionEnd when lace exits."""
    announced: set[tuple[str, str]] = field(default_factory=set)
    since: str = field(default_factory=now_iso)

    async def _run(self, event: HookEvent, agent_id: str, fields: dict[str, Any],
                   subject: str | None = None) -> HookOutcome:
        """The event's hooks for an agent, run in its workspace (its worktree, if it has one;
        looked up only when a hook matches)."""
        if not self.runner.commands(event, subject):
            return NOTHING
        return await self.runner.run(event, agent_id, fields, subject,
                                     await self._folder_of(agent_id))

    async def _folder_of(self, agent_id: str) -> Path | None:
        """The agent's worktree, if it has one; None (the runtime's workspace) when it has
        none, or when a person pruned it: hooks are the person's commands, not the agent's."""
        if self.workspace is None:
            return None
        try:
            return (await workspace_of(self.db, self.workspace, agent_id)).folder
        except NoWorkspace:
            return None

    # the tool path

    async def before_tool(self, context: ToolContext, call: ToolCall, policy: Policy,
                          call_id: str, resolve: Resolve) -> tuple[ToolCall, Policy]:
        """PreToolUse: the call may be blocked (its reason is the tool's result), asked
        about, or given other arguments (checked as the model's would be); never allowed
        more than the policy allows."""
        if not self.runner.has("PreToolUse"):
            return call, policy
        outcome = await self._run("PreToolUse", context.thread_id, {
            "tool_name": call.name, "tool_input": call.shown_arguments(),
            "tool_use_id": call_id}, subject=call.name)
        self._note_stop(context.thread_id, outcome)
        if outcome.stop is not None:
            raise ToolError(f"Stopped by a hook: {outcome.stop}")
        if outcome.blocked is not None:
            raise ToolError(outcome.blocked)
        if outcome.permission == "deny":
            raise ToolError(f"Denied by a PreToolUse hook: "
                            f"{outcome.permission_reason or 'no reason given'}")
        if outcome.updated_input is not None:
            try:
                call, updated_policy = await resolve(outcome.updated_input)
            except LaceError as error:
                raise ToolError(f"A PreToolUse hook changed the arguments of {call.name}, "
                                f"and they are not valid: {error}") from None
            policy = stricter(policy, updated_policy) or policy
        return call, stricter(policy, outcome.permission) or policy

    async def after_tool(self, context: ToolContext, call: ToolCall | None, executed: Executed,
                         call_id: str) -> Executed:
        """PostToolUse, after a call that succeeded: what a hook says (exit 2's stderr, a
        `block` reason, `additionalContext`) is added to the result the model reads."""
        result = executed.result
        if call is None or result.is_error or not self.runner.has("PostToolUse"):
            return executed
        outcome = await self._run("PostToolUse", context.thread_id, {
            "tool_name": call.name, "tool_input": call.shown_arguments(),
            "tool_response": result.text, "tool_use_id": call_id}, subject=call.name)
        self._note_stop(context.thread_id, outcome)
        added = [text for text in (outcome.blocked, *outcome.context, outcome.stop) if text]
        if not added:
            return executed
        text = "\n\n".join([result.text, *(f"[PostToolUse hook] {line}" for line in added)])
        return dataclasses.replace(executed, result=dataclasses.replace(result, text=text))

    def take_stop(self, thread_id: str) -> str | None:
        """Why a hook stopped this agent, once (its turn ends now)."""
        return self.stopping.pop(thread_id, None)

    def _note_stop(self, thread_id: str, outcome: HookOutcome) -> None:
        if outcome.stop is not None:
            self.stopping[thread_id] = outcome.stop

    # an agent's turn

    async def turn_started(self, agent: Agent) -> None:
        """A turn starts: no hook has stopped the agent or sent it back yet (a turn cut off
        leaves nothing behind); SubagentStart, for a helper's."""
        self.sent_back[agent.thread_id] = 0
        self.stopping.pop(agent.thread_id, None)
        if agent.parent_thread_id is not None and self.runner.has("SubagentStart"):
            await self._run("SubagentStart", agent.thread_id, {
                "agent_type": _agent_type(agent)}, subject=_agent_type(agent))

    async def turn_ending(self, agent: Agent, answer: str | None) -> str | None:
        """Stop (the root) or SubagentStop (a helper) when the agent would end its turn: the
        text it goes on with when a hook blocks (at most MAX_STOP_BLOCKS times a turn), else
        None."""
        event: HookEvent = "Stop" if agent.parent_thread_id is None else "SubagentStop"
        if not self.runner.has(event):
            return None
        blocks = self.sent_back.get(agent.thread_id, 0)
        outcome = await self._run(event, agent.thread_id, {
            "stop_hook_active": blocks > 0, "last_assistant_message": answer or "",
            "agent_type": _agent_type(agent)}, subject=None if event == "Stop"
            else _agent_type(agent))
        if outcome.stop is not None or outcome.blocked is None or blocks >= MAX_STOP_BLOCKS:
            self.sent_back.pop(agent.thread_id, None)
            return None
        self.sent_back[agent.thread_id] = blocks + 1
        return outcome.blocked

    async def trimming(self, thread_id: str) -> None:
        """PreCompact: the agent's context is about to be trimmed to fit its window."""
        if self.runner.has("PreCompact"):
            await self._run("PreCompact", thread_id, {
                "trigger": "auto", "custom_instructions": ""}, subject="auto")

    # the person's prompts and sessions

    async def prompt_submitted(self, thread_id: str, prompt: str) -> str:
        """UserPromptSubmit: the prompt with what hooks add, or a LaceError when one refuses
        it (nothing is written)."""
        if not self.runner.has("UserPromptSubmit"):
            return prompt
        outcome = await self._run("UserPromptSubmit", thread_id, {"prompt": prompt})
        return submitted(prompt, outcome)

    async def session_started(self, root_id: str, source: str) -> tuple[str, ...]:
        """SessionStart (`startup` or `resume`): the context hooks add to the session."""
        self.sessions.add(root_id)
        if not self.runner.has("SessionStart"):
            return ()
        outcome = await self._run("SessionStart", root_id, {"source": source}, subject=source)
        return outcome.context

    async def finish(self) -> None:
        """SessionEnd for every session started or resumed here, then every hook still
        running: lace exits only once they are done."""
        sessions, self.sessions = sorted(self.sessions), set()
        for root_id in sessions:
            if self.runner.has("SessionEnd"):
                self.runner.later(self._run("SessionEnd", root_id, {"reason": "exit"},
                                            subject="exit"))
        await self.runner.drain()

    # what the runtime publishes

    def published(self, event: RuntimeEvent) -> None:
        """Notification for an approval waiting; task events for tasks created or done."""
        if isinstance(event, ApprovalRequested) and self.runner.has("Notification"):
            self.runner.later(self._run("Notification", event.thread_id, {
                "message": f"lace needs your permission to use {event.tool} "
                           f"(approval #{event.approval_id})",
                "notification_type": "permission_prompt", "tool_name": event.tool,
                "tool_input": event.arguments}, subject="permission_prompt"))
        if isinstance(event, TasksChanged) and (self.runner.has("TaskCreated")
                                                or self.runner.has("TaskCompleted")):
            self.runner.later(self._tasks_changed(event.task_ids))

    async def _tasks_changed(self, task_ids: tuple[str, ...]) -> None:
        tasks = await self.db.read(lambda tx: [tx.tasks.get(task_id) for task_id in task_ids])
        for task in tasks:
            if task.created_at >= self.since and self._first("TaskCreated", task.id):
                await self._task_event("TaskCreated", task, task.created_by)
            if task.status == DONE and self._first("TaskCompleted", task.id):
                await self._task_event("TaskCompleted", task, task.assigned_to)

    def _first(self, event: HookEvent, task_id: str) -> bool:
        if (event, task_id) in self.announced:
            return False
        self.announced.add((event, task_id))
        return True

    async def _task_event(self, event: HookEvent, task: Task, agent_id: str | None) -> None:
        if not self.runner.has(event):
            return
        agent = agent_id if agent_id and is_thread_id(agent_id) else task.thread_id
        shown = {name: value for name, value in dataclasses.asdict(task).items()
                 if name != "notes"}
        await self._run(event, agent, {"task": shown})


def submitted(prompt: str, outcome: HookOutcome) -> str:
    """The prompt with what UserPromptSubmit hooks added, or a LaceError when one refused
    it."""
    refused = outcome.blocked or outcome.stop
    if refused is not None:
        raise LaceError(f"A UserPromptSubmit hook refused the prompt: {refused}")
    return "\n\n".join([prompt, *outcome.context])


def submitted_alone(settings: Settings, workspace: Path, root_id: str, prompt: str,
                    warn: Callable[[str], None]) -> str:
    """`submitted` for a prompt written by a process that runs no runtime (`lace run
    --detach`): the UserPromptSubmit hooks run here, in `workspace`."""
    if not settings.hooks.get("UserPromptSubmit"):
        return prompt
    runner = HookRunner(settings.hooks, workspace, settings.tools.bash.pass_env, warn)
    return submitted(prompt, asyncio.run(runner.run("UserPromptSubmit", root_id,
                                                    {"prompt": prompt})))


def _agent_type(agent: Agent) -> str:
    """What a helper is, for a matcher: its profile's name, else `helper`."""
    return agent.profile or "helper"
