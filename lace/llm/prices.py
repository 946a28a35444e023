"""What an `openai/...` call costs, from the price table litellm ships, without importing litellm.

litellm keeps its prices in a JSON file inside its package (lace sets
LITELLM_LOCAL_MODEL_COST_MAP=True, so litellm itself reads that file too). This module finds the
file with `importlib.util.find_spec`, loads it once, and prices plain chat calls the way
`litellm.completion_cost` does: prompt tokens (cached ones at the cache-read rate) and completion
tokens, at the rates above a prompt-size threshold when the model has them. A model the table
does not list has no price (None)."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from lace.core.providers import LOCAL_PROVIDERS

PRICE_FILE = "model_prices_and_context_window_backup.json"
_DATED_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_FINE_TUNED_SUFFIX = re.compile(r"(:[^:]*){3}$")  # ft:gpt-4o:org:suffix:id -> ft:gpt-4o
_THRESHOLD = re.compile(r"^input_cost_per_token_above_(\d+)(k?)_tokens$")


@functools.cache
def price_table() -> dict[str, dict[str, Any]]:
    """litellm's price table (found, not imported); empty if litellm is not installed."""
    spec = importlib.util.find_spec("litellm")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / PRICE_FILE
        if path.is_file():
            table: dict[str, dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
            return table
    return {}


@functools.cache
def _lowercase_keys() -> dict[str, str]:
    return {key.lower(): key for key in price_table()}


def model_entry(name: str) -> dict[str, Any] | None:
    """The table's entry for the OpenAI model `name`, looked up as litellm does: `openai/name`,
    then `name`, then without a fine-tune's org and id or a dated snapshot suffix; a key
    matches case-insensitively, and an entry of another provider does not count."""
    stripped = (_FINE_TUNED_SUFFIX.sub("", name) if "ft:" in name
                else _DATED_SUFFIX.sub("", name))
    table = price_table()
    for candidate in (f"openai/{name}", name, f"openai/{stripped}", stripped):
        key = candidate if candidate in table else _lowercase_keys().get(candidate.lower())
        entry = table.get(key) if key else None
        if entry is not None and entry.get("litellm_provider") in (None, "openai"):
            return entry
    return None


def _rate(entry: dict[str, Any], key: str, default: float) -> float:
    value = entry.get(key)
    return float(value) if value is not None else default


def call_cost(name: str, prompt_tokens: int, completion_tokens: int,
              cached_tokens: int = 0) -> float | None:
    """The price of one chat call to `openai/<name>` in USD, or None if the model is unknown."""
    entry = model_entry(name)
    if entry is None or entry.get("input_cost_per_token") is None:
        return None
    suffix = ""
    for key in sorted(entry, key=_threshold_of):  # the highest threshold the prompt exceeds
        threshold = _threshold_of(key)
        if threshold and prompt_tokens > threshold:
            suffix = key.removeprefix("input_cost_per_token")
    base_input = _rate(entry, "input_cost_per_token", 0.0)
    base_output = _rate(entry, "output_cost_per_token", 0.0)
    input_rate = _rate(entry, f"input_cost_per_token{suffix}", base_input)
    output_rate = _rate(entry, f"output_cost_per_token{suffix}", base_output)
    cache_rate = _rate(entry, f"cache_read_input_token_cost{suffix}",
                       _rate(entry, "cache_read_input_token_cost", input_rate))
    cached = min(max(cached_tokens, 0), prompt_tokens)
    return ((prompt_tokens - cached) * input_rate + cached * cache_rate
            + completion_tokens * output_rate)


def _threshold_of(key: str) -> int:
    match = _THRESHOLD.match(key)
    if match is None:
        return 0
    return int(match.group(1)) * (1000 if match.group(2) else 1)


@functools.cache
def models_of(provider: str) -> frozenset[str]:
    """The names the table lists for `provider`'s models (without the `provider/` part)."""
    return frozenset(key.removeprefix(f"{provider}/") for key, entry in price_table().items()
                     if entry.get("litellm_provider") == provider)


def listed_model(provider: str, name: str) -> bool | None:
    """Whether the table lists `provider/name` (an `openai` one looked up as `call_cost`
    does); None when it lists no model of that provider, so cannot tell."""
    if provider == "openai":
        return model_entry(name) is not None
    names = models_of(provider)
    return (name in names or name.lower() in {known.lower() for known in names}) \
        if names else None


def known_price(model_name: str) -> bool:
    """Whether `provider/model` has a price: lace's own local providers cost nothing; an
    `openai/...` model is looked up as `call_cost` does; any other as litellm keys its table
    (`provider/model`, or the bare model under that provider)."""
    provider, _, name = model_name.partition("/")
    if provider in LOCAL_PROVIDERS:
        return True
    if provider == "openai":
        return call_cost(name, 1, 1) is not None
    table = price_table()
    entry = table.get(model_name)
    if entry is None:
        entry = table.get(name)
        if entry is not None and not str(entry.get("litellm_provider", "")).startswith(provider):
            entry = None
    return entry is not None and entry.get("input_cost_per_token") is not None
