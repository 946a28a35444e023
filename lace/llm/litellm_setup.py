"""Imports litellm once, offline-safe: the local price table, no debug banner, quiet logs,
every answer read with a limit (`litellm_transport`)."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any


@functools.cache
def litellm() -> Any:
    """The litellm module, configured for lace (imported on first use: it takes ~2 s)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    import litellm as module

    from lace.llm.litellm_transport import read_with_limit

    read_with_limit()
    module.suppress_debug_info = True
    logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    return module


def litellm_imported() -> bool:
    """Whether `litellm()` has returned (the module is imported and configured)."""
    return litellm.cache_info().currsize > 0
