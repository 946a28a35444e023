"""Model fallbacks: the model an agent continues on when its own keeps failing (rate limits,
outages, a context it cannot fit), written to its agent row so the switch sticks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lace.config import ModelCheck
from lace.core.assignee import parse_model
from lace.core.records import Agent
from lace.llm.types import ModelError
from lace.runtime.conversation import Appended
from lace.store import Tx

log = logging.getLogger("lace.runtime")


def worth_a_fallback(error: ModelError) -> bool:
    """Whether another model may succeed where this one failed after its retries: a rate limit
    or an outage (transient kinds), or a context this model cannot hold. A missing key or a
    bad request would fail the same way anywhere the agent's conversation goes."""
    return error.transient or error.context_overflow


def next_fallback(current: str, chain: Sequence[str], check_model: ModelCheck,
                  ) -> tuple[str, str] | None:
    """`provider, model` after `current` in `chain` (its first entry when the agent is on none
    of them, as before its first switch), skipping entries that cannot be called now (the
    checks a spawn passes: provider known, key present)."""
    rest = chain[chain.index(current) + 1:] if current in chain else chain
    for candidate in rest:
        if candidate == current:
            continue
        provider, model = parse_model(candidate)  # checked when the settings loaded
        problem = check_model(provider, model)
        if problem is None:
            return provider, model
        log.warning("skipping fallback %s: %s", candidate, problem)
    return None


def switch_model(tx: Tx, agent: Agent, provider: str, model: str, error: ModelError,
                 ) -> Appended:
    """Put the agent on `provider/model` from now on (its row's model, which a resumed turn
    reads) and say so in its conversation; returns that row, to publish once committed."""
    new_model = f"{provider}/{model}"
    tx.agents.update(agent.thread_id, provider=provider, model=model)
    data = {"error": f"{agent.model_name} failed ({error}); continuing on {new_model}",
            "fallback_from": agent.model_name, "fallback_to": new_model}
    return Appended.of(tx, agent.thread_id, [("error", data)])
