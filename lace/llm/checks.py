"""Whether a `provider/model` can be called, asked before an agent is created for it."""

from __future__ import annotations

import contextlib
import os
from urllib.parse import urlparse

from lace.core.assignee import ACP_PROVIDER
from lace.core.errors import LaceError
from lace.core.nearest import did_you_mean, nearest
from lace.core.providers import DEMO_MODELS, DEMO_PROVIDER, LOCAL_PROVIDERS
from lace.llm.litellm_setup import litellm, litellm_imported
from lace.llm.prices import listed_model, models_of

TEST_PROVIDERS = frozenset({"scripted"})
"""Local providers that answer from a script a test installs; unknown anywhere else."""
UNBOUNDED_PROVIDERS = frozenset({"aiohttp_openai"})
"""litellm's providers that read an answer past lace's limit on its size (`read_with_limit`
covers the transports litellm builds; these read with a client of their own): refused."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
TEST_PROVIDERS_VARIABLE = "LACE_TEST_PROVIDERS"
"""Set to 1 by lace's tests (and benchmarks) to make the test providers exist."""


def are_test_providers_enabled() -> bool:
    """Whether this process is a test that enabled the test providers."""
    return os.environ.get(TEST_PROVIDERS_VARIABLE) == "1"


def local_provider(provider: str) -> bool:
    """Whether lace serves this provider itself: `demo` always, `scripted` only in tests."""
    return provider in LOCAL_PROVIDERS and (provider not in TEST_PROVIDERS
                                            or are_test_providers_enabled())


def checked_without_litellm(provider: str) -> bool:
    """Whether lace checks this provider without litellm: its own providers, `openai`, and
    `acp` (an `acp:NAME` agent is checked against the settings)."""
    return provider in LOCAL_PROVIDERS or provider in ("openai", ACP_PROVIDER)


def quick_model_check(provider: str) -> bool:
    """Whether `check_model` answers at once for this provider: lace checks it itself, or
    litellm (seconds to import) is imported already."""
    return checked_without_litellm(provider) or litellm_imported()


def known_provider(provider: str) -> bool:
    """Whether litellm (or lace itself) knows this provider; `openai` without asking litellm."""
    if provider in LOCAL_PROVIDERS:
        return local_provider(provider)
    if provider == "openai":
        return True
    return provider in providers()


def providers() -> set[str]:
    """Every provider litellm knows."""
    return {str(getattr(item, "value", item)) for item in litellm().provider_list}


CREDENTIAL_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def key_variable(provider: str) -> str:
    """The environment variable litellm reads `provider`'s key from (`OPENAI_API_KEY`,
    `TOGETHERAI_API_KEY`), asked with the credentials out of the environment so that it names
    the one it wants; one clear error for a provider that is unknown, needs no key, or needs
    more than one."""
    if provider in LOCAL_PROVIDERS:
        raise LaceError(f"{provider} needs no key: lace runs it itself.")
    if provider == "openai":
        return "OPENAI_API_KEY"
    known = providers()
    if provider not in known:
        hint = did_you_mean(nearest(provider, known))
        raise LaceError(f"Unknown provider {provider!r}" + (f": {hint}" if hint else ""))
    hidden = {name: os.environ.pop(name) for name in list(os.environ)
              if any(part in name.upper() for part in CREDENTIAL_PARTS)}
    try:
        missing = litellm().validate_environment(f"{provider}/model").get("missing_keys") or []
    finally:
        os.environ.update(hidden)
    wanted = [name for name in missing if any(part in name.upper() for part in CREDENTIAL_PARTS)]
    own = f"{provider.upper().replace('-', '_')}_API_KEY"
    if own in wanted or not wanted:
        if not wanted and missing:
            raise LaceError(f"{provider} needs no key (it needs {', '.join(missing)} in the "
                            "environment).")
        return own
    if len(wanted) > 1:
        raise LaceError(f"{provider} needs {', '.join(wanted)}: set them in the environment.")
    return str(wanted[0])


OPENAI_ENDPOINT_OF = {"custom_openai": "openai"}
"""Providers litellm sends to the endpoint of another (`custom_openai/...` to OPENAI_BASE_URL)."""


def base_url_variable(provider: str) -> tuple[str, str] | None:
    """The variable naming the provider's endpoint (e.g. `OPENAI_BASE_URL`) and its value, if
    the environment sets one."""
    prefix = OPENAI_ENDPOINT_OF.get(provider, provider).upper().replace("-", "_")
    return next(((f"{prefix}_{suffix}", url) for suffix in ("BASE_URL", "API_BASE", "API_BASE_URL")
                 if (url := os.environ.get(f"{prefix}_{suffix}"))), None)


def custom_base_url(provider: str) -> str | None:
    """The provider's endpoint from the environment (e.g. `OPENAI_BASE_URL`), if set."""
    named = base_url_variable(provider)
    return named[1] if named else None


def keyless(provider: str) -> bool:
    """Whether calls go to an endpoint the person set (a local server: llama.cpp, vLLM,
    Ollama, LM Studio) with no key in the environment: such a server needs none."""
    prefix = OPENAI_ENDPOINT_OF.get(provider, provider).upper().replace("-", "_")
    return has_custom_base_url(provider) and not os.environ.get(f"{prefix}_API_KEY")


def has_custom_base_url(provider: str) -> bool:
    """A local or self-hosted endpoint needs no real key."""
    return custom_base_url(provider) is not None


def on_this_machine(provider: str) -> bool:
    """Whether the provider's endpoint is a loopback address (a local server or a test fake)."""
    url = custom_base_url(provider)
    return url is not None and urlparse(url).hostname in LOOPBACK_HOSTS


def check_provider(provider: str, model: str) -> str | None:
    """Why a provider cannot be used (or, lace's offline demo, a model it does not have), or
    None if it exists."""
    if provider in UNBOUNDED_PROVIDERS:
        return (f"The {provider} provider is not supported: lace cannot bound the size of its "
                "answers; use openai/ (with OPENAI_BASE_URL for another endpoint) instead")
    if not known_provider(provider):
        return f"Unknown provider {provider!r}"
    if provider == DEMO_PROVIDER and model not in DEMO_MODELS:
        hint = did_you_mean([f"{DEMO_PROVIDER}/{name}" for name in nearest(model, DEMO_MODELS)])
        existing = " and ".join(f"{DEMO_PROVIDER}/{name}" for name in DEMO_MODELS)
        return (f"Unknown demo model '{DEMO_PROVIDER}/{model}' (the demo models are {existing}"
                + (f"; {hint})" if hint else ")"))
    return None


def check_model(provider: str, model: str) -> str | None:
    """Why `provider/model` cannot be called (unknown provider, missing key), or None."""
    problem = check_provider(provider, model)
    if problem or local_provider(provider) or has_custom_base_url(provider):
        return problem
    missing = missing_keys(provider, model)
    if missing:
        return (f"Cannot call {provider}/{model}: set {', '.join(missing)} in the environment"
                f"{stored_key_hint(provider, missing)} (or pick another model)")
    return None


def stored_key_hint(provider: str, missing: list[str]) -> str:
    """How `lace keys set` gives the provider what it lacks, when that is its key alone."""
    with contextlib.suppress(LaceError):
        if missing == [key_variable(provider)]:
            return f", or store the key once with lace keys set {provider}"
    return ""


def unlisted_model_note(provider: str, model: str) -> str | None:
    """A note for a model name litellm's price table does not list while it lists close ones
    (a typo, most likely), naming them; None otherwise. Never for lace's own models or a
    provider sent to an endpoint of the person's (a local server serves any name); a model
    newer than the table is not refused, only noted."""
    if local_provider(provider) or has_custom_base_url(provider) or \
            listed_model(provider, model) is not False:
        return None
    close = nearest(model, models_of(provider))
    if not close:
        return None
    hint = did_you_mean([f"{provider}/{name}" for name in close])
    return f"{provider}/{model} is not in litellm's model table; {hint}"


def missing_keys(provider: str, model: str) -> list[str]:
    """The key variables `provider/model` needs and the environment lacks; for `openai` the
    one litellm's `validate_environment` asks for, without importing litellm."""
    if provider == "openai":
        return [] if "OPENAI_API_KEY" in os.environ else ["OPENAI_API_KEY"]
    report = litellm().validate_environment(f"{provider}/{model}")
    return [key for key in report.get("missing_keys") or [] if key]
