"""Agent statuses and types, and which statuses may start a turn, hold a lease or be resumed."""

from __future__ import annotations

from typing import Final, Literal, get_args

AgentStatus = Literal["idle", "running", "waiting", "interrupted", "error", "stopped"]
AgentType = Literal["persistent", "ephemeral"]
AGENT_STATUSES: Final[tuple[str, ...]] = get_args(AgentStatus)
AGENT_TYPES: Final[tuple[str, ...]] = get_args(AgentType)

HELD_STATUSES: Final = ("running", "waiting")
"""A process is in the middle of this agent's turn (and holds its lease)."""
CUT_OFF_STATUSES: Final = ("interrupted",)
"""A turn was cut off (lace stopped mid-turn); the agent resumes on the next run."""
BUSY_STATUSES: Final = (*HELD_STATUSES, *CUT_OFF_STATUSES)
"""An agent in the middle of a turn somewhere, or cut off and about to be resumed."""
HALTED_STATUSES: Final = ("stopped", "error")
"""Stopped or failed: no turn starts until a person resumes the agent."""
NOT_RUNNABLE: Final = (*HALTED_STATUSES, *HELD_STATUSES)
"""No new turn may start: stopped or failed (until resumed), or a turn is under way."""
RESUMABLE_STATUSES: Final = (*HALTED_STATUSES, *CUT_OFF_STATUSES)
"""A person (or `resume_agent`) can set the agent going again."""


SESSION_STATUSES: Final = ("running", "interrupted", "queued", "failed", "stopped", "done")
"""The one word `lace sessions` shows for a session."""


def session_status(statuses: set[str], root_status: str, queued: bool) -> str:
    """A session's word from its agents' statuses: `running` while a turn is under way,
    `interrupted` when one was cut off (lace run --continue resumes it), `queued` when work waits
    for a process, then the root's `failed` or `stopped`, else `done`."""
    if statuses & set(HELD_STATUSES):
        return "running"
    if statuses & set(CUT_OFF_STATUSES):
        return "interrupted"
    if queued:
        return "queued"
    return {"error": "failed", "stopped": "stopped"}.get(root_status, "done")
