"""Whether a `provider/model` can be called, asked before an agent is created for it."""

from __future__ import annotations

from lace.llm.litellm_setup import litellm

LOCAL_PROVIDERS = frozenset({"demo", "scripted"})


def known_provider(provider: str) -> bool:
    """Whether litellm (or lace itself) knows this provider."""
    if provider in LOCAL_PROVIDERS:
        return True
    return provider in {str(getattr(item, "value", item)) for item in litellm().provider_list}


def check_provider(provider: str, _model: str) -> str | None:
    """Why a provider cannot be used, or None if it exists."""
    if known_provider(provider):
        return None
    return f"Unknown provider {provider!r}"
