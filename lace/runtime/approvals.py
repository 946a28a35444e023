"""The approval policy in force: allow, ask (a request the person answers) or deny, per tool."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lace.config import Policy, ToolSettings
from lace.core.assignee import HUMAN
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import APPROVED_STATUSES, Approval, Lease
from lace.runtime.database import AsyncStore
from lace.runtime.events import ApprovalRequested, EventBus
from lace.store import Tx
from lace.store.leases import fenced

POLL_S = 0.25


def denied_by_policy(tool: str) -> str:
    """Why a call of a tool whose policy is deny does not run."""
    return (f"Denied: the policy for {tool} is deny ([tools.policy] {tool}). Do without it, or "
            "ask the person.")


def _deny(tx: Tx, *, approval_id: int, decided_by: str) -> Approval:
    """Deny a pending request (LaceError if it was decided meanwhile)."""
    return tx.approvals.decide(approval_id, "denied", decided_by)


@dataclass
class Approvals:
    """Decides whether an agent may run a tool, asking the person when the policy says so."""

    db: AsyncStore
    bus: EventBus
    settings: ToolSettings
    timeout_s: float
    changed: Callable[[], asyncio.Event]

    def policy_for(self, tool: str, *, read_only_hint: bool = False) -> Policy:
        """The tool's policy (an MCP server says whether its tool only reads)."""
        return self.settings.policy_for(tool, read_only_hint=read_only_hint)

    async def check(self, thread_id: str, tool: str, arguments: dict[str, Any],
                    lease: Lease | None = None, *, read_only_hint: bool = False) -> str | None:
        """None when the call may run, else why not (a tool result the agent can act on). The
        agent's status changes only while its turn's `lease` holds."""
        return await self.decide(thread_id, tool, lambda: arguments,
                                 self.policy_for(tool, read_only_hint=read_only_hint), lease)

    async def decide(self, thread_id: str, tool: str, arguments: Callable[[], dict[str, Any]],
                     policy: Policy, lease: Lease | None = None) -> str | None:
        """`check` with the policy already known; `arguments` are read only to ask the person
        (an allowed call costs nothing)."""
        if policy == "allow":
            return None
        if policy == "deny":
            return denied_by_policy(tool)
        arguments_shown = arguments()
        session_id = root_of(thread_id)
        if await self.db.read(lambda tx: tx.approvals.allowed_for_session(session_id, tool)):
            return None

        def request(tx: Tx) -> int:
            tx.agents.set_status(thread_id, "waiting")
            return int(tx.approvals.request(thread_id, tool, arguments_shown))

        approval_id = await self.db.write(fenced(lease, request))
        self.bus.publish(ApprovalRequested(approval_id, thread_id, tool, arguments_shown))
        approval = await self._decision(approval_id)
        await self.db.write(fenced(lease, lambda tx: tx.agents.set_status(thread_id, "running")))
        if approval.status in APPROVED_STATUSES:
            return None
        who = "the person" if approval.decided_by == HUMAN else approval.decided_by
        return (f"Denied by {who} (approval #{approval_id}): you may not run {tool} with these "
                "arguments. Do without it, or explain why you need it.")

    async def _decision(self, approval_id: int) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while True:
            approval = await self.db.read(lambda tx: tx.approvals.get(approval_id))
            if approval.status != "pending":
                return approval
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                try:
                    return await self.db.write(functools.partial(
                        _deny, approval_id=approval_id,
                        decided_by=f"timeout after {self.timeout_s:g} s ([limits] "
                                   "approval_timeout_s)"))
                except LaceError:  # decided at the last moment by someone else
                    continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(POLL_S, remaining)):
                    await self.changed().wait()
