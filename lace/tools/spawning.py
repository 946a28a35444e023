"""Planning a new agent: its profile, model and tools (which only ever shrink), under the
spawn limits. Every path that creates an agent goes through `plan_spawn`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from lace.config import Budget
from lace.core.assignee import parse_model
from lace.core.errors import InvalidAssigneeError
from lace.core.ids import depth_of, is_thread_id
from lace.core.records import AgentPlan
from lace.store import Tx
from lace.store.budgets import remaining
from lace.tools.base import ToolContext, ToolError

SPAWNING_TOOLS = ("delegate", "spawn", "spawn_await")


def spawner_thread(context: ToolContext) -> str:
    """The thread a new agent becomes a child of: the caller, or the root for the person."""
    return context.thread_id if is_thread_id(context.thread_id) else context.session_id


def caller_tools(context: ToolContext, every_tool: Sequence[str]) -> tuple[str, ...]:
    """The tools the caller may hand on: its own (all of them for the person)."""
    return tuple(every_tool) if context.tools is None else context.tools


def check_spawn_limits(tx: Tx, context: ToolContext) -> None:
    """Refuse a spawn past `max_depth`, `max_children` or `spawns_per_minute`."""
    limits, parent = context.limits, spawner_thread(context)
    depth = depth_of(parent) + 1
    if depth > limits.max_depth:
        raise ToolError(f"Spawn refused: a new agent here would be at depth {depth}, past "
                        f"max_depth = {limits.max_depth} ([limits] max_depth). Do the work "
                        "yourself or hand it back to your creator.")
    live = tx.live_children(parent)
    if live >= limits.max_children:
        raise ToolError(f"Spawn refused: you have {live} live children, the limit is "
                        f"max_children = {limits.max_children} ([limits] max_children). Wait "
                        "for some to finish, or reuse one by assigning it a task.")
    since = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    recent = tx.children_created_since(parent, since)
    if recent >= limits.spawns_per_minute:
        raise ToolError(f"Spawn refused: {recent} spawns in the last minute, the limit is "
                        f"spawns_per_minute = {limits.spawns_per_minute} ([limits] "
                        "spawns_per_minute). Wait a little, or reuse an agent.")


def _creator_model(tx: Tx, context: ToolContext) -> str:
    agent = tx.get_agent(spawner_thread(context))
    return agent.model_name


def plan_spawn(tx: Tx, context: ToolContext, every_tool: Sequence[str], *,
               profile: str | None = None, model: str | None = None,
               tools: Sequence[str] | None = None, type: str = "persistent",
               instructions: str | None = None, budget: Budget | None = None,
               topics: Sequence[str] = ()) -> AgentPlan:
    """Check the limits, then choose the model (`model` > the profile's > the caller's) and
    the tools (explicit > the profile's, intersected > the caller's); each only shrinks."""
    check_spawn_limits(tx, context)
    chosen_profile = None
    if profile is not None:
        chosen_profile = context.profiles.get(profile)
        if chosen_profile is None:
            known = ", ".join(sorted(context.profiles)) or "none are configured"
            raise ToolError(f"Unknown profile {profile!r}; known profiles: {known}.")
    model_name = model or (chosen_profile.model if chosen_profile else None) \
        or _creator_model(tx, context)
    try:
        provider, name = parse_model(model_name)
    except InvalidAssigneeError as error:
        raise ToolError(str(error)) from None
    problem = context.check_model(provider, name)
    if problem:
        raise ToolError(f"{problem}.")
    own = caller_tools(context, every_tool)
    if tools is not None:
        missing = [tool for tool in tools if tool not in own]
        if missing:
            raise ToolError(f"You cannot give {', '.join(map(repr, missing))}: a helper only "
                            f"gets tools you have yourself ({', '.join(own)}).")
        granted = tuple(dict.fromkeys(tools))
    elif chosen_profile is not None and chosen_profile.tools:
        granted = tuple(tool for tool in chosen_profile.tools if tool in own)
    else:
        granted = own
    prompts = [text for text in (chosen_profile.system_prompt if chosen_profile else None,
                                 instructions) if text]
    return AgentPlan(provider=provider, model=name, profile=profile, tools=granted, type=type,
                     instructions="\n\n".join(prompts) or None,
                     budget=clamped_budget(tx, context, budget), topics=tuple(topics))


def clamped_budget(tx: Tx, context: ToolContext, budget: Budget | None) -> dict[str, float] | None:
    """A child's caps, never looser than what its creator has left."""
    if budget is None:
        return None
    left = remaining(tx, spawner_thread(context), context.budgets)
    caps = {dimension: min(value, max(0, left[dimension])) if dimension in left else value
            for dimension, value in budget.model_dump(exclude_none=True).items()}
    return caps or None
