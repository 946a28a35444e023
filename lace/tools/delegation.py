"""Delegation tools: `delegate` (wait for answers), `spawn` (start now) and `spawn_await`
(collect later). Each delegated piece of work is a task and each helper a child thread."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from lace.config import Budget
from lace.core.errors import NotFoundError
from lace.core.records import Task
from lace.core.tasks import STALLED_STATUSES
from lace.core.worktrees import Isolation
from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError, WaitingTool, refuse_deadlock
from lace.tools.messaging import Topic
from lace.tools.schema import parameters_schema
from lace.tools.spawning import (
    assignment,
    assignments_checked,
    checked_before_the_write,
    new_agent_models,
    parse_assignment,
    plan_spawn,
    spawn_spec,
)
from lace.tools.task_tools import Assignee

TITLE_LENGTH = 80
ISOLATION = ('"worktree": a new helper works in its own git worktree, on branch lace/<its '
             'thread id>, merged back with worktree_merge (default: the profile\'s, else '
             '[workspace] isolation).')


def last_note(tx: Tx, task: Task) -> str:
    """The newest note on a task: its result when completed, its reason when blocked."""
    notes = tx.notes.of_task(task.id)
    return notes[-1].content if notes else "(no note)"


def job_block(tx: Tx, task_id: str, session_id: str, *, blocked_label: str) -> str:
    """`[<id>: OK]` plus the result, or why not."""
    try:
        task = tx.tasks.get(task_id, session_id=session_id)
    except NotFoundError:
        return f"[{task_id}: NOT FOUND]"
    if task.status == "completed":
        return f"[{task.id}: OK]\n{last_note(tx, task)}"
    if task.status in STALLED_STATUSES:
        return f"[{task.id}: {blocked_label}]\n{last_note(tx, task)}"
    return (f"[{task.id}: RUNNING]\nStill {task.status} (assigned to {task.assigned_to}); the "
            "wait timed out. Call spawn_await later, or check the board.")


def settled(tx: Tx, task_ids: list[str]) -> bool:
    """Whether no task is still pending or in progress (unknown ids count as settled)."""
    return tx.tasks.count_active(task_ids) == 0


class DelegatedTask(BaseModel):
    """One piece of work to hand out."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1, description="The full instructions.")
    expected_response: str = Field(min_length=1, description="The shape the answer must have.")
    assigned_to: Assignee
    isolation: Isolation | None = Field(default=None, description=ISOLATION)


class Delegate(WaitingTool):
    """Hand 1 to 10 tasks to helpers (new:provider/model, new:<profile>, or an existing
    agent's thread id), run them all at once, and wait for every answer. Returns one block per
    task: [<id>: OK] with the result, or [<id>: BLOCKED] with the reason."""

    name: ClassVar[str] = "delegate"
    tasks: list[DelegatedTask] = Field(min_length=1, max_length=10)
    budget: Budget | None = Field(default=None, description="Caps on each helper's subtree.")

    async def prepared(self, context: ToolContext) -> Delegate:
        await assignments_checked([item.assigned_to for item in self.tasks], context)
        return self

    def start(self, tx: Tx, context: ToolContext) -> list[str]:
        assignees = [parse_assignment(item.assigned_to, context) for item in self.tasks]
        created = [tx.board.create_task(
            session_id=context.session_id, actor=context.thread_id, title=item.title,
            prompt=f"{item.prompt}\n\nExpected response: {item.expected_response}",
            priority="high",
            assignee=assignment(tx, context, assignee, self.budget, item.isolation))
            for item, assignee in zip(self.tasks, assignees, strict=True)]
        refuse_deadlock(tx, context, {task.assigned_to for task in created if task.assigned_to})
        return [task.id for task in created]

    def finish(self, tx: Tx, context: ToolContext, task_ids: list[str]) -> str:
        return "\n\n".join(job_block(tx, task_id, context.session_id, blocked_label="BLOCKED")
                           for task_id in task_ids)


class Spawn(Tool):
    """Start a helper agent on `task` now and return its job id at once, without waiting.
    Collect its result later with spawn_await. Its final answer is its result. `context`
    goes before the task; `system_prompt` is added to its instructions; `tools` (default:
    the profile's, else all of yours) and `model` (default: the profile's, else yours)."""

    name: ClassVar[str] = "spawn"
    task: str = Field(min_length=1, max_length=50_000, description="What the helper must do.")
    profile: str | None = Field(default=None, description="A configured profile.")
    context: str | None = Field(default=None, max_length=50_000,
                                description="Background the helper needs, shown before the task.")
    system_prompt: str | None = Field(default=None, max_length=20_000)
    tools: list[str] | None = Field(default=None, description="Tools the helper may use.")
    model: str | None = Field(default=None, description="provider/model for the helper.")
    auto_subscribe: list[Topic] = Field(default_factory=list,
                                        description="Topics the helper is subscribed to.")
    budget: Budget | None = Field(default=None, description="Caps on the helper's subtree.")
    isolation: Isolation | None = Field(default=None, description=ISOLATION)

    @classmethod
    def schema_for(cls, own_tools: tuple[str, ...], profiles: list[str]) -> dict[str, Any]:
        """The schema with the caller's tools and the profile names as enums."""
        schema = parameters_schema(cls)
        properties = schema["properties"]
        properties["tools"]["items"] = {"type": "string", "enum": list(own_tools)}
        if profiles:
            properties["profile"]["enum"] = profiles
        else:
            del properties["profile"]
        return schema

    async def prepared(self, context: ToolContext) -> Spawn:
        spec = f"new:{self.model or self.profile or ''}"
        await checked_before_the_write(new_agent_models([spec], context.profiles,
                                                        context.creator_model),
                                       lambda: spawn_spec(context, self.profile, self.model),
                                       context)
        return self

    def run(self, tx: Tx, context: ToolContext) -> str:
        plan = plan_spawn(tx, context, spawn_spec(context, self.profile, self.model),
                          tools=self.tools, type="ephemeral", instructions=self.system_prompt,
                          budget=self.budget, topics=list(dict.fromkeys(self.auto_subscribe)),
                          isolation=self.isolation)
        title = (self.task.strip().splitlines() or ["task"])[0][:TITLE_LENGTH]
        prompt = f"{self.context}\n\n{self.task}" if self.context else self.task
        task = tx.board.create_task(session_id=context.session_id, actor=context.thread_id,
                                    title=title, prompt=prompt, assignee=plan)
        where = "" if plan.worktree is None else \
            f", in its own git worktree on branch lace/{task.assigned_to}"
        return (f"Spawned job {task.id} in thread {task.assigned_to} "
                f"({plan.model_name}{where}). Collect its result with spawn_await.")


JobIds = Annotated[str, Field(min_length=1, description='"id1,id2" or "*" for all not yet awaited')]


class SpawnAwait(WaitingTool):
    """Wait for jobs started with spawn and return one block each: [<id>: OK] and the result,
    [<id>: ERROR] and why, or [<id>: NOT FOUND]. "*" means all your jobs not yet awaited.
    Awaiting a finished job again returns the same block."""

    name: ClassVar[str] = "spawn_await"
    job_ids: JobIds

    def start(self, tx: Tx, context: ToolContext) -> list[str]:
        if self.job_ids.strip() == "*":
            wanted = tx.events.unawaited_jobs(context.thread_id)
        else:
            wanted = [part.strip() for part in self.job_ids.split(",") if part.strip()]
            if not wanted:
                raise ToolError('job_ids: give job ids separated by commas, or "*".')
        assignees = {task.assigned_to for task in tx.tasks.by_ids(wanted)
                     if task.assigned_to and task.thread_id == context.session_id}
        refuse_deadlock(tx, context, assignees)
        return list(dict.fromkeys(wanted))

    def finish(self, tx: Tx, context: ToolContext, task_ids: list[str]) -> str:
        if not task_ids:
            return "No jobs found."
        return "\n\n".join(job_block(tx, task_id, context.session_id, blocked_label="ERROR")
                           for task_id in task_ids)


DELEGATION_TOOLS: tuple[type[Tool], ...] = (Delegate, Spawn, SpawnAwait)
