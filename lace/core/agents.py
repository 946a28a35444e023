"""Agent statuses and types, and which statuses may start a turn, hold a lease or be resumed."""

from __future__ import annotations

from typing import Final, Literal, get_args

AgentStatus = Literal["idle", "running", "waiting", "interrupted", "error", "stopped"]
AgentType = Literal["persistent", "ephemeral"]
AGENT_STATUSES: Final[tuple[str, ...]] = get_args(AgentStatus)
AGENT_TYPES: Final[tuple[str, ...]] = get_args(AgentType)

HELD_STATUSES: Final = ("running", "waiting")
"""A process is in the middle of this agent's turn (and holds its lease)."""
NOT_RUNNABLE: Final = ("stopped", "error", *HELD_STATUSES)
"""No new turn may start: stopped or failed (until resumed), or a turn is under way."""
RESUMABLE_STATUSES: Final = ("stopped", "error", "interrupted")
"""A person (or `resume_agent`) can set the agent going again."""
