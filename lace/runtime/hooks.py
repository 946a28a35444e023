"""Runs the configured hooks of an event, in Claude Code's contract: every matching command at
once (the same command once), the event as one JSON object on stdin, then each one's answer
read as Claude Code reads it (exit 0 goes on, exit 2 blocks with its stderr, any other code is
an error shown to the person; JSON on stdout says more) and the answers combined into one
`HookOutcome`. A hook can only narrow what an agent may do: its `allow` never lifts lace's
approval policy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lace.config import Policy
from lace.config.hooks import HookCommand, HookEvent, Hooks
from lace.core.ids import root_of
from lace.runtime.hook_process import HookRun, run_hook
from lace.tools.shell import tool_environment

STRICTNESS: dict[Policy, int] = {"allow": 0, "ask": 1, "deny": 2}
MESSAGE_CAP = 2000
"""Characters of a hook's text shown to the person in one warning."""


def parent_of(thread_id: str) -> str | None:
    """The thread that created `thread_id` (None for a root)."""
    head, dot, _ = thread_id.rpartition(".")
    return head if dot else None


def stricter(first: Policy | None, second: Policy | None) -> Policy | None:
    """The stricter of two decisions (deny over ask over allow)."""
    if first is None or second is None:
        return first or second
    return first if STRICTNESS[first] >= STRICTNESS[second] else second


@dataclass(frozen=True)
class HookOutcome:
    """What the hooks of one event said, together."""

    blocked: str | None = None
    """Why they block (exit 2's stderr, or `decision: block`'s reason)."""
    permission: Policy | None = None
    """The strictest `permissionDecision` (PreToolUse)."""
    permission_reason: str | None = None
    updated_input: dict[str, Any] | None = None
    context: tuple[str, ...] = ()
    """`additionalContext` (and, for a prompt or a session's start, plain stdout)."""
    stop: str | None = None
    """`continue: false`: the agent stops, with this `stopReason`."""

    def __or__(self, other: HookOutcome) -> HookOutcome:
        permission = stricter(self.permission, other.permission)
        reason = other.permission_reason if permission == other.permission and \
            other.permission_reason else self.permission_reason
        return HookOutcome(
            blocked=_joined(self.blocked, other.blocked), permission=permission,
            permission_reason=reason, updated_input=other.updated_input or self.updated_input,
            context=self.context + other.context, stop=self.stop or other.stop)


NOTHING = HookOutcome()


def _joined(first: str | None, second: str | None) -> str | None:
    return "\n".join(text for text in (first, second) if text) or None


@dataclass
class HookRunner:
    """The hooks in effect for one process, and the runs still going (`drain` at exit)."""

    hooks: Hooks
    workspace: Path | None = None
    pass_env: list[str] = field(default_factory=list)
    warn: Callable[[str], None] = lambda _text: None
    """Shows a hook's error or `systemMessage` to the person."""
    pending: set[asyncio.Task[Any]] = field(default_factory=set)

    def has(self, event: HookEvent) -> bool:
        """Whether any hook is configured for `event` (else nothing is built or run)."""
        return bool(self.hooks.get(event))

    @property
    def cwd(self) -> Path:
        """Where hooks run, and the `cwd` they are told: the workspace, else lace's folder."""
        return (self.workspace or Path.cwd()).resolve()

    def commands(self, event: HookEvent, subject: str | None) -> list[HookCommand]:
        """The commands whose matcher matches `subject`, each command once."""
        found: dict[str, HookCommand] = {}
        for matcher in self.hooks.get(event, []):
            if matcher.matches(subject):
                for command in matcher.hooks:
                    found.setdefault(command.command, command)
        return list(found.values())

    async def run(self, event: HookEvent, agent_id: str | None, fields: Mapping[str, Any],
                  subject: str | None = None, folder: Path | None = None) -> HookOutcome:
        """Run the event's matching hooks for agent `agent_id` (None: no session yet) in
        `folder` (the agent's worktree; else `cwd`) and combine their answers."""
        commands = self.commands(event, subject)
        if not commands:
            return NOTHING
        cwd = folder or self.cwd
        data = {"session_id": None if agent_id is None else root_of(agent_id),
                "agent_id": agent_id, "parent_agent_id": parent_of(agent_id or ""),
                "hook_event_name": event, "cwd": str(cwd), **fields}
        stdin = json.dumps(data, default=str).encode()
        environment = {**tool_environment(self.pass_env), "LACE_PROJECT_DIR": str(cwd),
                       "CLAUDE_PROJECT_DIR": str(cwd)}
        runs = await asyncio.gather(*(
            run_hook(command.command, stdin, cwd=cwd, environment=environment,
                     timeout_s=command.timeout) for command in commands))
        outcome = NOTHING
        for command, run in zip(commands, runs, strict=True):
            outcome = outcome | self._read(event, command, run)
        return outcome

    def later(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` (hooks whose answer nothing waits for) in the background; `drain` waits
        for it."""
        task = asyncio.get_running_loop().create_task(work)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def drain(self) -> None:
        """Wait for every background run: hooks finish before lace exits (each is bounded by
        its own timeout)."""
        while self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)

    def _read(self, event: HookEvent, command: HookCommand, run: HookRun) -> HookOutcome:
        """One command's answer, in Claude Code's terms."""
        name = f"{event} hook {command.command[:80]!r}"
        if run.timed_out:
            self.warn(f"{name} was killed after {command.timeout:g} s (timeout); it does not "
                      "block.")
            return NOTHING
        if run.exit_code == 2:
            return HookOutcome(blocked=run.stderr.strip() or f"Blocked by {name}.")
        if run.exit_code != 0:
            detail = run.stderr.strip()[:MESSAGE_CAP] or "no message"
            self.warn(f"{name} failed (exit code {run.exit_code}): {detail}")
            return NOTHING
        text = run.stdout.strip()
        if not text.startswith("{"):
            plain = event in ("UserPromptSubmit", "SessionStart") and text
            return HookOutcome(context=(text,)) if plain else NOTHING
        try:
            answer = json.loads(text)
        except ValueError:
            self.warn(f"{name} printed output that is not valid JSON"
                      f"{' (cut at its size limit)' if run.truncated else ''}; ignored.")
            return NOTHING
        return self._answer(event, name, answer) if isinstance(answer, dict) else NOTHING

    def _answer(self, event: HookEvent, name: str, answer: dict[str, Any]) -> HookOutcome:
        """The JSON fields Claude Code defines; fields of the wrong type are ignored."""
        outcome = NOTHING
        message = answer.get("systemMessage")
        if isinstance(message, str) and message:
            self.warn(f"{name}: {message[:MESSAGE_CAP]}")
        if answer.get("continue") is False:
            reason = answer.get("stopReason")
            outcome = replace(outcome, stop=reason if isinstance(reason, str) and reason
                              else f"Stopped by {name}.")
        reason = answer.get("reason")
        reason = reason if isinstance(reason, str) and reason else None
        if answer.get("decision") == "block":
            outcome = replace(outcome, blocked=reason or f"Blocked by {name}.")
        specific = answer.get("hookSpecificOutput")
        specific = specific if isinstance(specific, dict) else {}
        decision = specific.get("permissionDecision")
        if answer.get("decision") == "approve":  # Claude Code's older PreToolUse spelling
            decision = decision or "allow"
        if event == "PreToolUse" and decision in STRICTNESS:
            why = specific.get("permissionDecisionReason")
            outcome = replace(outcome, permission=decision,
                              permission_reason=why if isinstance(why, str) and why else reason)
        updated = specific.get("updatedInput")
        if event == "PreToolUse" and isinstance(updated, dict):
            outcome = replace(outcome, updated_input=updated)
        extra = specific.get("additionalContext")
        if isinstance(extra, str) and extra:
            outcome = replace(outcome, context=(extra,))
        return outcome
