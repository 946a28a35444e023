"""Row verbs of model usage: `llm_calls` rows, and the totals each agent row keeps of them."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.core.secrets import mask
from lace.core.usage import (
    ANSWER_TOO_LARGE,
    TURN_CUT_OFF,
    CallGroup,
    Usage,
    held_tokens,
    plausible_cost,
    plausible_tokens,
)
from lace.paths import credential_values
from lace.store import schema
from lace.store import statements as sql
from lace.store.agent_rows import AgentCache
from lace.store.rows import Rows


def _whole_sum(column: sa.ColumnElement[int]) -> sa.ColumnElement[int]:
    """SUM of a BIGINT column as a whole number: PostgreSQL's SUM of one is NUMERIC."""
    return sa.cast(sa.func.sum(column), sa.BigInteger)


def _part(tokens: int | None, whole: int) -> int | None:
    """A count that is part of `whole` (cached input, reasoning), or None when it is unknown
    or cannot be a part of it."""
    checked = plausible_tokens(tokens)
    return checked if checked is not None and checked <= whole else None


class UsageRows(Rows):
    """Model calls and the totals they add to agent rows (which the transaction's agent cache
    then reads again)."""

    def __init__(self, connection: sa.Connection, raw: Any, cache: AgentCache) -> None:
        super().__init__(connection, raw)
        self.cache = cache

    def record_call(self, thread_id: str, *, model: str, prompt_tokens: int,
                    completion_tokens: int, cost_usd: float | None, latency_ms: float,
                    error: str | None = None, cache_read_tokens: int | None = None,
                    cache_write_tokens: int | None = None,
                    reasoning_tokens: int | None = None) -> None:
        """One `llm_calls` row (its error's credential values masked), added to the agent's
        totals. Counts and cost are held to what a call can be (`MAX_CALL_TOKENS`, ...), so a
        figure no client checked is still recorded and cannot lower a total; a cost that is
        unknown (None) or absurd is NULL, and adds nothing to the agent's known cost."""
        prompt_tokens = held_tokens(prompt_tokens)
        completion_tokens = held_tokens(completion_tokens)
        cost = plausible_cost(cost_usd)
        now = now_iso()
        error = None if error is None else mask(error, credential_values())
        sql.INSERT_LLM_CALL.send(self.raw, {
            "thread_id": thread_id, "model": model, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "cost_usd": cost,
            "latency_ms": latency_ms, "error": error, "created_at": now,
            "cache_read_tokens": _part(cache_read_tokens, prompt_tokens),
            "cache_write_tokens": _part(cache_write_tokens, prompt_tokens),
            "reasoning_tokens": _part(reasoning_tokens, completion_tokens)})
        self.cache.forget(thread_id)
        sql.ADD_USAGE.send(self.raw, {"agent": thread_id, "add_in": prompt_tokens,
                                  "add_out": completion_tokens, "add_cost": cost or 0.0,
                                  "now": now})
        self.cache.used(thread_id, Usage(tokens=prompt_tokens + completion_tokens,
                                         cost_usd=cost or 0.0, turns=0))

    def subtree(self, thread_id: str) -> Usage:
        """Tokens, cost and turns of a subtree, summed from the agent rows (each keeps its
        totals of `llm_calls`, updated in the transaction that records a call): one row per
        agent to read, not one per call), once per transaction: what it wrote since is added
        (`AgentCache.used`), so the checks of many agents of a session in one batch read it once."""
        kept = self.cache.usage(thread_id)
        if kept is not None:
            return kept
        row = sql.SUBTREE_USAGE.first(self.raw, {"me": thread_id, "after": f"{thread_id}.",
                                              "before": f"{thread_id}/"})
        assert row is not None  # an aggregate always has its one row
        return self.cache.keep_usage(thread_id, Usage(
            tokens=int(row["tokens"]), cost_usd=float(row["cost_usd"]), turns=int(row["turns"])))

    def call_groups(self, root_id: str) -> list[CallGroup]:
        """A session's `llm_calls` summed per thread, model and day (failed calls, calls lace
        cut off, and calls of unknown cost, counted apart), for `lace cost`."""
        calls, threads = schema.llm_calls.c, schema.threads.c
        day = sa.func.substr(calls.created_at, 1, 10)
        cut = sa.func.count(sa.case((sa.or_(calls.error == TURN_CUT_OFF, calls.error.startswith(
            f"{ANSWER_TOO_LARGE}:", autoescape=True)), 1)))
        rows = self._execute(
            sa.select(calls.thread_id, calls.model, day.label("day"),
                      sa.func.count().label("calls"),
                      (sa.func.count(calls.error) - cut).label("failed"), cut.label("cut"),
                      _whole_sum(calls.prompt_tokens).label("tokens_in"),
                      _whole_sum(calls.completion_tokens).label("tokens_out"),
                      sa.func.coalesce(sa.func.sum(calls.cost_usd), 0.0).label("cost_usd"),
                      *(sa.func.coalesce(_whole_sum(column), 0).label(column.name)
                        for column in (calls.cache_read_tokens, calls.cache_write_tokens,
                                       calls.reasoning_tokens)),
                      (sa.func.count() - sa.func.count(calls.cost_usd)).label("unpriced"))
            .join(schema.threads, threads.id == calls.thread_id)
            .where(threads.root_id == root_id)
            .group_by(calls.thread_id, calls.model, day)
            .order_by(calls.thread_id, calls.model, day))
        return [CallGroup(**row._mapping) for row in rows]
