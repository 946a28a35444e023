"""Which models litellm's price table lists and prices, without importing litellm.

litellm keeps its prices in a JSON file inside its package (lace sets
LITELLM_LOCAL_MODEL_COST_MAP=True, so litellm itself reads that file too). This module finds the
file with `importlib.util.find_spec` and loads it once, to answer "is this model known?" before
a call; what a call costs is litellm's own computation (`lace.llm.pricing`)."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

PRICE_FILE = "model_prices_and_context_window_backup.json"
_DATED_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_FINE_TUNED_SUFFIX = re.compile(r"(:[^:]*){3}$")  # ft:gpt-4o:org:suffix:id -> ft:gpt-4o


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


@functools.cache
def models_of(provider: str) -> frozenset[str]:
    """The names the table lists for `provider`'s models (without the `provider/` part)."""
    return frozenset(key.removeprefix(f"{provider}/") for key, entry in price_table().items()
                     if entry.get("litellm_provider") == provider)


def listed_model(provider: str, name: str) -> bool | None:
    """Whether the table lists `provider/name` (an `openai` one looked up as `model_entry`
    does); None when it lists no model of that provider, so cannot tell."""
    if provider == "openai":
        return model_entry(name) is not None
    names = models_of(provider)
    return (name in names or name.lower() in {known.lower() for known in names}) \
        if names else None
