"""Parsing an assignee once and planning a new agent: its profile, model and tools (which only
ever shrink), and the spawn limits it carries. Every path that creates an agent goes through
`plan_spawn`; the store applies the plan, checking the limits when it spawns (at once, or when
the last blocker of a waiting task is completed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from lace.config import WRITING_TOOLS, Budget, Profile
from lace.core.assignee import (
    EXPECTED_FORMS,
    Assignee,
    Assignment,
    NewAgentSpec,
    parse_assignee,
    parse_model,
)
from lace.core.errors import InvalidAssigneeError
from lace.core.ids import is_thread_id
from lace.core.records import AgentPlan, SpawnLimits
from lace.core.tool_sets import EVERY_TOOL, grants, intersect, uncovered
from lace.core.worktrees import Isolation, WorktreeOrigin
from lace.store import Tx
from lace.store.budgets import remaining
from lace.tools.base import ToolContext, ToolError
from lace.tools.worktrees import plan_origin

SPAWNING_TOOLS = ("delegate", "spawn", "spawn_await")


def spawner_thread(context: ToolContext) -> str:
    """The thread a new agent becomes a child of: the caller, or the root for the person."""
    return context.thread_id if is_thread_id(context.thread_id) else context.session_id


def caller_tools(context: ToolContext, every_tool: Sequence[str]) -> tuple[str, ...]:
    """The tools the caller may hand on: its own (for the person, all of them and the Python
    tools of this process)."""
    return (*every_tool, *context.python_tools) if context.tools is None else context.tools


def spawn_limits(context: ToolContext) -> SpawnLimits:
    """The `[limits]` a plan carries, checked by the store when it spawns the agent."""
    limits = context.limits
    return SpawnLimits(max_depth=limits.max_depth, max_children=limits.max_children,
                       spawns_per_minute=limits.spawns_per_minute)


def parse_assignment(assigned_to: str | None, context: ToolContext) -> Assignee | None:
    """Parse an `assigned_to` value once; a `new:` spec must name a known profile and, when it
    names a model, one that can be called."""
    if assigned_to is None:
        return None
    assignee = parse_assignee(assigned_to)
    if not isinstance(assignee, NewAgentSpec):
        return assignee
    if assignee.profile is not None and assignee.profile not in context.profiles:
        known = ", ".join(sorted(context.profiles)) or "none are configured"
        raise ToolError(f"Unknown profile {assignee.profile!r} in {assigned_to!r} (profiles: "
                        f"{known}). {EXPECTED_FORMS}.")
    if assignee.provider is not None and assignee.model is not None:
        problem = context.check_model(assignee.provider, assignee.model)
        if problem:  # the form is right: the assignee forms would only hide what to fix
            raise ToolError(f"{problem} in {assigned_to!r}.")
    return assignee


def new_agent_models(assigned: Iterable[str | None], profiles: Mapping[str, Profile],
                     creator_model: tuple[str, str] | None = None) -> set[tuple[str, str]]:
    """The `provider, model` pairs a model check asks about for the `new:` assignments among
    `assigned`: each one's own, else its profile's, else `creator_model` when known (a
    malformed one is refused by the check itself)."""
    models = set()
    for value in assigned:
        with contextlib.suppress(InvalidAssigneeError):
            spec = parse_assignee(value) if value else None
            if not isinstance(spec, NewAgentSpec):
                continue
            profile = profiles.get(spec.profile) if spec.profile is not None else None
            if spec.provider and spec.model:
                models.add((spec.provider, spec.model))
            elif profile is not None and profile.model:
                models.add(parse_model(profile.model))
            elif creator_model is not None and (spec.profile is None or profile is not None):
                models.add(creator_model)
    return models


async def checked_before_the_write(models: Iterable[tuple[str, str]],
                                   check: Callable[[], object], context: ToolContext) -> None:
    """Run a tool's model checks in a thread before its write transaction (inside it they run
    again, then at once) unless they answer at once: the first check of a provider that lace
    does not check itself imports litellm, seconds that would hold the transaction open (on
    PostgreSQL past the idle-in-transaction timeout, which ends it) and stop the event loop;
    a bad assignment is then refused before anything is written. Quick checks do not leave
    the loop, so the calls of one reply reach the database in the order given."""
    wanted = list(models)
    quick = context.quick_model_check
    if quick is not None and all(quick(provider) for provider, _ in wanted):
        return

    def checked() -> None:
        check()
        for provider, model in wanted:  # a profile's model, checked in the transaction too
            context.check_model(provider, model)

    await asyncio.to_thread(checked)


async def assignments_checked(assigned: Sequence[str | None], context: ToolContext) -> None:
    """`parse_assignment` of each of `assigned`, with their models' checks, before the write
    transaction (`checked_before_the_write`)."""
    await checked_before_the_write(
        new_agent_models(assigned, context.profiles, context.creator_model),
        lambda: [parse_assignment(value, context) for value in assigned], context)


def spawn_spec(context: ToolContext, profile: str | None, model: str | None) -> NewAgentSpec:
    """The spec of `spawn`'s `profile` and `model` arguments, checked like an assignee's."""
    if profile is not None and profile not in context.profiles:
        known = ", ".join(sorted(context.profiles)) or "none are configured"
        raise ToolError(f"Unknown profile {profile!r}; known profiles: {known}.")
    if model is None:
        return NewAgentSpec(text=f"new:{profile}" if profile else "new:", profile=profile,
                            provider=None, model=None)
    try:
        provider, name = parse_model(model)
    except InvalidAssigneeError as error:
        raise ToolError(str(error)) from None
    problem = context.check_model(provider, name)
    if problem:
        raise ToolError(f"{problem}.")
    return NewAgentSpec(text=f"new:{model}", profile=profile, provider=provider, model=name)


def assignment(tx: Tx, context: ToolContext, assignee: Assignee | None,
               budget: Budget | None = None,
               isolation: Isolation | None = None) -> Assignment | None:
    """What the store applies for a parsed assignee: a plan for a `new:` spec, else itself."""
    if isinstance(assignee, NewAgentSpec):
        return plan_spawn(tx, context, assignee, budget=budget, isolation=isolation)
    return assignee


def _chosen_model(tx: Tx, context: ToolContext, spec: NewAgentSpec,
                  profile: Profile | None) -> tuple[str, str]:
    """`provider, model` of a new agent: the spec's (checked when parsed), else the
    profile's, else its creator's."""
    if spec.provider is not None and spec.model is not None:
        return spec.provider, spec.model
    if profile is not None and profile.model:
        try:
            provider, model = parse_model(profile.model)
        except InvalidAssigneeError as error:
            raise ToolError(str(error)) from None
    else:
        creator = tx.agents.get(spawner_thread(context))
        provider, model = creator.provider, creator.model
    problem = context.check_model(provider, model)
    if problem:
        raise ToolError(f"{problem}.")
    return provider, model


def plan_spawn(tx: Tx, context: ToolContext, spec: NewAgentSpec, *,
               tools: Sequence[str] | None = None, type: str = "persistent",
               instructions: str | None = None, budget: Budget | None = None,
               topics: Sequence[str] = (), isolation: Isolation | None = None) -> AgentPlan:
    """The one planner of a new agent: the model (the spec's > the profile's > the
    caller's), the tools (explicit > the profile's, intersected > the caller's), each of which
    only shrinks, the limits its spawn must respect, and its own git worktree (isolation:
    explicit > the profile's > `[workspace]`) when it may write."""
    profile = context.profiles[spec.profile] if spec.profile is not None else None
    provider, model = _chosen_model(tx, context, spec, profile)
    own = caller_tools(context, EVERY_TOOL)
    if tools is not None:
        missing = uncovered(tools, own)
        if missing:
            raise ToolError(f"You cannot give {', '.join(map(repr, missing))}: a helper only "
                            f"gets tools you have yourself ({', '.join(own)}).")
        granted = tuple(dict.fromkeys(tools))
    elif profile is not None and profile.tools:
        granted = intersect(profile.tools, own)
    else:
        granted = own
    prompts = [text for text in (profile.system_prompt if profile else None, instructions)
               if text]
    return AgentPlan(parent_id=spawner_thread(context), provider=provider, model=model,
                     profile=spec.profile, tools=granted, type=type,
                     instructions="\n\n".join(prompts) or None,
                     budget=clamped_budget(tx, context, budget), topics=tuple(topics),
                     limits=spawn_limits(context),
                     worktree=_worktree(tx, context, profile, isolation, granted),
                     trace_parent=context.trace_parent)


def _worktree(tx: Tx, context: ToolContext, profile: Profile | None,
              isolation: Isolation | None, granted: Sequence[str]) -> WorktreeOrigin | None:
    """Where the helper's own worktree starts, when it gets one: isolation `worktree` and a
    tool that writes (a helper that only reads shares its creator's folder)."""
    chosen = isolation or (profile.isolation if profile else None) or \
        context.workspace_settings.isolation
    if chosen != "worktree" or not any(grants(granted, tool) for tool in WRITING_TOOLS):
        return None
    return plan_origin(tx, context)


def clamped_budget(tx: Tx, context: ToolContext, budget: Budget | None) -> dict[str, float] | None:
    """A child's caps, never looser than what its creator has left."""
    if budget is None:
        return None
    left = remaining(tx, spawner_thread(context), context.budgets)
    caps = {dimension: min(value, max(0, left[dimension])) if dimension in left else value
            for dimension, value in budget.model_dump(exclude_none=True).items()}
    return caps or None
