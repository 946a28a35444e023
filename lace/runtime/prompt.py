"""The system prompt: how the board works and which helpers an agent can spawn (the part a
session's agents share), then who the agent is, who created it and its task."""

from __future__ import annotations

from collections.abc import Mapping

from lace.config import Profile
from lace.core.prompt_parts import IDENTITY_HEADING
from lace.core.records import Agent, Task

BOARD_GUIDE = """\
How lace works:
- Work is organised as tasks on a board shared by every agent of this session (task_create,
  task_list, task_view, task_update, task_add_note, task_complete).
- To delegate, create a task with assigned_to "new:<provider>/<model>" (for example
  "new:{model}", your own model): lace spawns a helper agent in a child thread of yours
  (<your thread id>.N) and the tool result names it. You can also assign a task to an existing
  agent's thread id, or to "human" for the person.
- A plan with an order is one task_create: a task with blocked_by (task ids, or "#N" for the
  N-th task of the same call) waits until those are completed, then its assignee starts with
  their results (a new: agent is spawned only then). task_update add_blocked_by and
  remove_blocked_by change what it waits for.
- When a helper completes a task you created, you receive a [LACE TASK SYSTEM] message with its
  result in a later turn. So after delegating, end your turn (answer without calling tools) and
  wait: you are woken when results arrive.
- When you are assigned a task: record progress with task_add_note and finish with task_complete,
  whose message is the result your creator receives. If you cannot finish, set the task to
  blocked with task_update and say why in a note.
- Messages that start with [LACE TASK SYSTEM] come from lace, not from a person."""

DELEGATION_GUIDE = """\
- delegate hands out several tasks at once and waits for all the answers within this turn;
  spawn starts a helper and returns a job id at once, spawn_await collects the results."""


def profiles_block(profiles: Mapping[str, Profile]) -> str:
    """`<available_profiles>`: one line per profile, with its tools."""
    lines = ["<available_profiles>"]
    for name, profile in sorted(profiles.items()):
        summary = (profile.description or profile.system_prompt or "").strip().splitlines()
        tools = ", ".join(profile.tools) if profile.tools else "all of yours"
        lines.append(f"- {name}: {summary[0][:100] if summary else ''} (tools: {tools})")
    lines.append("</available_profiles>")
    return "\n".join(lines)


def system_prompt(agent: Agent, task: Task | None, tools: list[str],
                  profiles: Mapping[str, Profile]) -> str:
    """The first message of every agent's conversation: first the part every agent of a
    session with the same model, tools and profiles shares (so a provider's prompt cache
    serves it to all of them), then, after `IDENTITY_HEADING`, who this agent is."""
    guide = BOARD_GUIDE.format(model=agent.model_name)
    if "delegate" in tools or "spawn" in tools:
        guide += "\n" + DELEGATION_GUIDE
    lines = ["You are an agent in lace, a task board for teams of LLM agents.", "", guide]
    if profiles and ("spawn" in tools or "task_create" in tools):
        lines += ["", "Profiles for new helpers (new:<profile>, or spawn with profile):",
                  profiles_block(profiles)]
    creator = agent.parent_thread_id or "human (the person using lace)"
    lines += ["", IDENTITY_HEADING,
              f"Your thread id: {agent.thread_id}. Your model: {agent.model_name}.",
              f"You were created by: {creator}."]
    if task is not None:
        lines.append(f"You were created to work on task {task.id}: \"{task.title}\". Its details "
                     "arrive as your first message.")
    if agent.type == "ephemeral":
        lines.append("When you are done, answer with your result: your final answer is returned "
                     "to your creator.")
    if agent.instructions:
        lines += ["", agent.instructions]
    return "\n".join(lines)
