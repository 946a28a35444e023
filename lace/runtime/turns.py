"""One agent turn: take the inbox, call the model, run its tool calls, repeat until it answers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lace.config import AcpAgent, Budgets, Limits
from lace.core.assignee import ACP_PROVIDER
from lace.core.ids import depth_of, root_of
from lace.core.records import Agent, Lease, Place
from lace.core.usage import TURN_CUT_OFF, estimate_tokens, held_tokens, schema_characters
from lace.llm.types import ModelClient, ModelError, ModelReply, session_tree
from lace.runtime.acp_worker import AcpTurn
from lace.runtime.conversation import Appended, TurnStart, begin_turn, without_arguments
from lace.runtime.crash import crash_point
from lace.runtime.database import AsyncStore
from lace.runtime.escrow import Escrow, HaltedError, Spent, Taken
from lace.runtime.events import (
    EventBus,
    ModelAnswered,
    ModelCalled,
    TextStreamed,
    TurnEnded,
    TurnStarted,
)
from lace.runtime.fallbacks import next_fallback, switch_model, worth_a_fallback
from lace.runtime.isolation import with_committed_work
from lace.runtime.tool_runner import ToolRunner
from lace.runtime.turn_end import end_turn
from lace.store import Tx
from lace.store.budgets import budget_line
from lace.store.leases import LeaseLostError, fenced
from lace.tools.base import ToolResult

T = TypeVar("T")
log = logging.getLogger("lace.runtime")
EMPTY_ANSWER_RETRIES = 2
"""An empty answer is asked again at most this often (and no more than `model_retries`): a
model that said nothing three times will not speak on the fifth, and each wait is longer."""
TRIMMED = "[trimmed to fit the context window; the full result is kept in the database]"


def trim_tool_results(messages: list[dict[str, Any]]) -> bool:
    """Shorten the older half of the untrimmed tool results, keeping every call paired with
    its result (the full text stays in `events`). False when nothing is left to trim."""
    untrimmed = [message for message in messages
                 if message.get("role") == "tool" and message.get("content") != TRIMMED]
    if not untrimmed:
        return False
    for message in untrimmed[: max(1, len(untrimmed) // 2)]:
        message["content"] = TRIMMED
    return True


def tool_message(call_id: str, result: ToolResult) -> dict[str, Any]:
    """A tool call's answer as the model reads it."""
    return {"role": "tool", "tool_call_id": call_id, "content": result.text}


def record_call(tx: Tx, *, thread_id: str, holder: str, spent: Spent, **call: Any) -> None:
    """One `llm_calls` row, and what the call used taken off its process's grants."""
    tx.usage.record_call(thread_id, **call)
    tx.grants.spend(holder, spent)


class AlreadyRunningError(Exception):
    """Another process is running this agent's turn."""


@dataclass
class Slots:
    """Limits on model calls in flight: one for the process, one per configured provider."""

    limits: Limits
    overall: asyncio.Semaphore = field(init=False)
    per_provider: dict[str, asyncio.Semaphore] = field(init=False)

    def __post_init__(self) -> None:
        self.overall = asyncio.Semaphore(self.limits.max_running)
        self.per_provider = {name: asyncio.Semaphore(count)
                             for name, count in self.limits.per_provider.items()}

    async def hold(self, stack: AsyncExitStack, provider: str) -> None:
        """Enter the provider's slot, then the overall one, until `stack` closes."""
        if provider in self.per_provider:
            await stack.enter_async_context(self.per_provider[provider])
        await stack.enter_async_context(self.overall)


@dataclass
class TurnRunner:
    """Everything a turn needs; one per runtime, shared by every agent."""

    db: AsyncStore
    client: ModelClient
    limits: Limits
    bus: EventBus
    tools: ToolRunner
    budgets: Budgets = field(default_factory=Budgets)
    watched: set[str] = field(default_factory=set)
    holder: str = ""
    place: Place | None = None
    """Where this process runs agents (`Runtime.place`): it claims no agent of another."""
    leases: dict[str, Lease] = field(default_factory=dict)
    """The lease of each thread's latest turn, until its drive ends."""
    fallbacks_for: Callable[[str | None], tuple[str, ...]] = lambda _profile: ()
    """The fallback models of an agent with this profile (`Settings.fallbacks_for`)."""
    acp_agents: Mapping[str, AcpAgent] = field(default_factory=dict)
    """The `[acp_agents]` an `acp:NAME` agent's turn starts."""
    escrow: Escrow = field(default_factory=Escrow)
    """The tokens this process holds for its model calls under token caps."""
    slots: Slots = field(init=False)

    def __post_init__(self) -> None:
        self.slots = Slots(self.limits)

    async def run(self, thread_id: str) -> str | None:
        """One whole turn; returns the final answer. ModelError escapes after retries, and
        LeaseLostError once another process took the agent over (nothing more is written)."""
        profiles, started = self.tools.profiles, time.monotonic()
        self.tools.waited[thread_id] = 0.0
        start = await self.db.write(lambda tx: begin_turn(
            tx, thread_id, profiles, lambda tx, agent: budget_line(tx, agent, self.budgets),
            self.holder, self.place))
        if start is None:
            raise AlreadyRunningError(thread_id)
        self.leases[thread_id] = start.lease  # the scheduler drops it when the drive ends
        async with self.tools.tracing.agent_turn(start.agent):  # its `invoke_agent` span
            if start.agent.provider == ACP_PROVIDER:  # an external ACP agent works
                return await AcpTurn(self, start, self.acp_agents.get(start.agent.model)).run()
            return await self._run(start, started)

    async def _run(self, start: TurnStart, started: float) -> str | None:
        agent, lease, messages = start.agent, start.lease, start.messages
        thread_id = agent.thread_id
        crash_point("after_inbox_consume")
        self.bus.publish(TurnStarted(thread_id))
        self._publish(start.appended)
        context = self.tools.context(agent, lease, start.worktree)
        for wait in start.waits:
            result = await self.tools.resume(context, wait)
            messages.append(tool_message(wait.call_id, result))
        tools = await self.tools.definitions(
            agent, can_spawn=depth_of(thread_id) < self.limits.max_depth)
        hooks = self.tools.hooks
        if hooks is not None:
            await hooks.turn_started(agent)
        while True:
            self._check_turn_time(thread_id, started)
            agent, reply, usage = await self._call_on_some_model(agent, lease, messages, tools)
            message = reply.message()
            messages.append(message)
            self._publish(await self._write_billed(lease, usage, functools.partial(
                self._record_reply, thread_id=thread_id, message=message, usage=usage)))
            crash_point("after_model_reply")
            if not reply.tool_calls:
                if await self._sent_back(agent, lease, messages, reply.content):
                    continue
                break
            of_reply = dataclasses.replace(context, batch=uuid.uuid4().hex)  # one wake back
            outcomes = await asyncio.gather(*(  # every call ends before the turn may
                self.tools.call(of_reply, call.name, call.arguments, call_id=call.id)
                for call in reply.tool_calls), return_exceptions=True)
            results = []
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
                results.append(outcome)
            messages.extend(tool_message(call.id, result)
                            for call, result in zip(reply.tool_calls, results, strict=True))
            if hooks is not None and hooks.take_stop(thread_id):
                break  # a hook said `continue: false`
            if self._work_done(results):
                if await self._sent_back(agent, lease, messages, reply.content):
                    continue
                break
        final = await self._final_answer(agent, reply.content)
        await self.db.write(fenced(lease, lambda tx: end_turn(tx, thread_id, final)))
        crash_point("after_turn_end")
        self.tools.changed(())  # the tasks it changed were told when the write committed
        self.bus.publish(TurnEnded(thread_id, reply.content))
        return reply.content

    async def _sent_back(self, agent: Agent, lease: Lease, messages: list[dict[str, Any]],
                         answer: str | None) -> bool:
        """Whether a Stop (or SubagentStop) hook sends the agent back to work as it would end
        its turn: what the hook says is then recorded as its next input."""
        hooks = self.tools.hooks
        text = None if hooks is None else await hooks.turn_ending(agent, answer)
        if text is None:
            return False
        message = {"role": "user", "content": text}
        data = {"message": message, "sender": "hook", "kind": "stop_hook"}
        self._publish(await self.db.write(fenced(lease, lambda tx: Appended.of(
            tx, agent.thread_id, [("notification", data)]))))
        messages.append(message)
        return True

    async def _final_answer(self, agent: Agent, text: str | None) -> str | None:
        """The answer that completes a spawned helper's task, with its committed worktree
        (an agent's type never changes: only a spawned helper's row is read again)."""
        if agent.type != "ephemeral":
            return text
        thread_id = agent.thread_id
        agent = await self.db.read(lambda tx: tx.agents.get(thread_id))
        if agent.current_task is None:
            return text
        task_id = agent.current_task
        return await with_committed_work(self.db, thread_id, task_id,
                                         (text or "").strip() or "(no answer)")

    @staticmethod
    def _work_done(results: list[ToolResult]) -> bool:
        """Whether every call of the reply succeeded and left the agent (a `new:` helper) with
        nothing to do: no result is left for the model to read, so the turn ends here instead
        of paying a model call to hear "done"."""
        return bool(results) and all(result.ends_work and not result.is_error
                                     for result in results)

    @staticmethod
    def _record_reply(tx: Tx, *, thread_id: str, message: dict[str, Any],
                      usage: Callable[[Tx], None]) -> Appended:
        """The reply's rows (its message, then each tool call); to publish once committed."""
        usage(tx)
        rows: list[tuple[str, dict[str, Any]]] = [
            ("agent_message", {"message": without_arguments(message)})]
        rows.extend(("tool_call", {"call_id": call["id"], "tool_name": call["function"]["name"],
                                   "arguments": call["function"]["arguments"]})
                    for call in message.get("tool_calls") or [])
        return Appended.of(tx, thread_id, rows)

    def _publish(self, appended: Appended) -> None:
        """The rows a transaction appended, once it committed."""
        for event in appended.events():
            self.bus.publish(event)

    def _check_turn_time(self, thread_id: str, started: float) -> None:
        active = time.monotonic() - started - self.tools.waited.get(thread_id, 0.0)
        if active > self.limits.turn_timeout_s:
            raise HaltedError(thread_id, f"watchdog: the turn ran {active:.0f} s, past "
                                         f"turn_timeout_s = {self.limits.turn_timeout_s:g} "
                                         "([limits] turn_timeout_s)")

    async def _call_on_some_model(
            self, agent: Agent, lease: Lease, messages: list[dict[str, Any]],
            tools: list[dict[str, Any]]) -> tuple[Agent, ModelReply, Callable[[Tx], None]]:
        """The agent's model's reply, or, once its calls keep failing in a way another model
        may not (`worth_a_fallback`), the next fallback's. Each switch is written to the
        agent's row before the next call, so the agent stays on it."""
        while True:
            try:
                reply, usage = await self._call_model(agent, lease, messages, tools)
                return agent, reply, usage
            except ModelError as error:
                chain = self.fallbacks_for(agent.profile)
                fallback = next_fallback(agent.model_name, chain, self.tools.check_model) if (
                    chain and worth_a_fallback(error)) else None
                if fallback is None:
                    raise
                provider, model = fallback
                self._publish(await self.db.write(fenced(lease, functools.partial(
                    switch_model, agent=agent, provider=provider, model=model, error=error))))
                agent = dataclasses.replace(agent, provider=provider, model=model)

    async def _call_model(self, agent: Agent, lease: Lease, messages: list[dict[str, Any]],
                          tools: list[dict[str, Any]],
                          ) -> tuple[ModelReply, Callable[[Tx], None]]:
        """The reply, and its `llm_calls` row (which gives back what the call took of its
        process's tokens) to write with it, one transaction fewer."""
        attempt, stall = 0, self.limits.stall_timeout_s
        def estimate() -> int:  # only when a cap needs it
            return estimate_tokens(messages, schema_characters(tools)) + self.limits.reserve_tokens

        while True:
            taken = await self.escrow.room_for_call(
                self.db, agent, lease, self.budgets, estimate, stall)
            started = time.monotonic()
            recorded = functools.partial(self._recorded, agent, lease, taken, started)
            try:
                async with AsyncExitStack() as stack:
                    await self.slots.hold(stack, agent.provider)
                    tree = session_tree.set(root_of(agent.thread_id))  # one prompt cache
                    self.bus.publish(ModelCalled(agent.thread_id, agent.model_name))
                    stack.callback(self.bus.publish, ModelAnswered(agent.thread_id))
                    try:  # not wait_for: on Python 3.11 it can swallow a cancellation
                        async with asyncio.timeout(stall):
                            with self.tools.tracing.model_call(agent, messages) as span:
                                reply = await self.client.complete(
                                    agent.model_name, messages, tools,
                                    on_delta=self._streamer(agent))
                                span.replied(reply)
                    except (TimeoutError, asyncio.CancelledError) as cut:
                        stalled = isinstance(cut, TimeoutError)
                        await self._record_cut_call(fenced(lease, recorded(
                            prompt_tokens=0, completion_tokens=0, cost_usd=0.0,
                            error="stalled (watchdog)" if stalled else TURN_CUT_OFF)))
                        if not stalled:
                            raise
                        raise HaltedError(agent.thread_id, f"watchdog: a model call made no "
                                          f"progress for stall_timeout_s = {stall:g} ([limits] "
                                          "stall_timeout_s)") from None
                    finally:
                        session_tree.reset(tree)
            except ModelError as error:
                if agent.thread_id in self.watched:  # the half answer shown is void
                    self.bus.publish(TextStreamed(agent.thread_id, "", restart=True))
                await self.db.write(fenced(lease, recorded(
                    prompt_tokens=0, completion_tokens=0, cost_usd=0.0, error=str(error))))
                if error.context_overflow and self.tools.hooks is not None:
                    await self.tools.hooks.trimming(agent.thread_id)
                if error.context_overflow and trim_tool_results(messages):
                    continue
                if not error.transient or attempt >= self.limits.model_retries:
                    raise
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
                continue
            else:
                empty = not reply.content and not reply.tool_calls
                usage = recorded(  # a provider's counts held as the row holds them
                    used=held_tokens(reply.prompt_tokens) + held_tokens(reply.completion_tokens),
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens, cost_usd=reply.cost_usd,
                    cache_read_tokens=reply.cache_read_tokens,
                    cache_write_tokens=reply.cache_write_tokens,
                    reasoning_tokens=reply.reasoning_tokens,
                    error="empty answer" if empty else None)
            finally:
                if not taken.settled:  # ended otherwise: what it took is free again here
                    self.escrow.settle(taken, 0)
            if empty and attempt < min(self.limits.model_retries, EMPTY_ANSWER_RETRIES):
                await self._write_billed(lease, usage, usage)
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
                continue
            return reply, usage

    def _recorded(self, agent: Agent, lease: Lease, taken: Taken, started: float,
                  used: int = 0, **call: Any) -> Callable[[Tx], None]:
        """The `llm_calls` row of a call that is over, settling what it took (`Escrow`)."""
        return functools.partial(
            record_call, thread_id=agent.thread_id, holder=lease.holder,
            spent=self.escrow.settle(taken, used), model=agent.model_name,
            latency_ms=(time.monotonic() - started) * 1000, **call)

    async def _write_billed(self, lease: Lease, usage: Callable[[Tx], None],
                            work: Callable[[Tx], T]) -> T:
        """`work` (which records a call's `usage`) under `lease`; once the lease is lost, the
        usage alone: the provider billed the call whoever holds the agent now, so its tokens
        and cost still count (the session's bill and its caps), though nothing else of the
        call is written."""
        try:
            return await self.db.write(fenced(lease, work))
        except LeaseLostError:
            try:
                await self.db.write(usage)
            except Exception as error:  # the lost lease is what ends the turn, still
                log.warning("could not record the usage of a call of %s after its lease was "
                            "lost (%s)", lease.thread_id, type(error).__name__)
            raise

    async def _record_cut_call(self, record: Callable[[Tx], None]) -> None:
        """A model call cut off (stalled, or its agent stopped) still gets its usage row,
        asked for at once: a grant this process asks for next must commit after the
        give-back in it (`Escrow.settle`)."""
        with contextlib.suppress(LeaseLostError):
            await asyncio.shield(self.db.submit(record))

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.limits.retry_max_s, self.limits.retry_base_s * 2 ** attempt)
        return random.uniform(ceiling / 2, ceiling)

    def _streamer(self, agent: Agent) -> Callable[[str], None] | None:
        if agent.thread_id not in self.watched:
            return None
        return lambda delta: self.bus.publish(TextStreamed(agent.thread_id, delta))
