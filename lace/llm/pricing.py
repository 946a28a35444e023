"""What a model call costs, priced by litellm's own `cost_per_token` from the token counts lace
checked (a provider's raw usage is not trusted to price itself): input at its rate, cache
reads and writes at theirs, output at its rate. A model litellm has no price for costs None."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from lace.core.usage import CallTokens, plausible_cost
from lace.llm.litellm_setup import litellm, litellm_imported
from lace.llm.prices import listed_model, price_table


def call_cost(model: str, tokens: CallTokens) -> float | None:
    """The price of one call to `provider/model` in USD, or None if it is unknown (imports
    litellm: call it where litellm is already loaded, or use `call_cost_off_loop`)."""
    module = litellm()
    read, write = tokens.cache_read or 0, tokens.cache_write or 0
    usage = module.Usage(prompt_tokens=tokens.prompt, completion_tokens=tokens.completion,
                         total_tokens=tokens.prompt + tokens.completion,
                         cache_read_input_tokens=read, cache_creation_input_tokens=write)
    try:
        prompt_cost, completion_cost = module.cost_per_token(
            model=model, prompt_tokens=tokens.prompt, completion_tokens=tokens.completion,
            usage_object=usage)
    except Exception:  # litellm raises for a model it has no price for
        return None
    return plausible_cost(_sum(prompt_cost, completion_cost))


def may_be_priced(model: str) -> bool:
    """Whether litellm could price `provider/name`: its price table lists it (looked up as
    `lace.llm.prices` does, without importing litellm: a model it cannot price never costs
    that import), or lace cannot tell (no table, or litellm told to fetch its table from the
    network)."""
    if os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True").lower() != "true" \
            or not price_table():
        return True
    provider, _, name = model.partition("/")
    return listed_model(provider, name) is not False


_importing: asyncio.Future[Any] | None = None


def import_in_background() -> None:
    """Start importing litellm on a thread (seconds of CPU), once: a client that does not call
    through litellm starts it with its first request, so the import overlaps the model's
    answer instead of delaying the request."""
    global _importing
    loop = asyncio.get_running_loop()
    if not litellm_imported() and (_importing is None or _importing.get_loop() is not loop):
        _importing = loop.run_in_executor(None, litellm)


async def call_cost_off_loop(model: str, tokens: CallTokens) -> float | None:
    """`call_cost`, waiting for the import `import_in_background` started (or starting it)."""
    if not litellm_imported():
        import_in_background()
        importing = _importing
        if importing is not None:
            await asyncio.shield(importing)
    return call_cost(model, tokens)


def _sum(*parts: Any) -> Any:
    try:
        return sum(parts)
    except TypeError:
        return None
