"""Provider keys the person stored with `lace keys set`: one private file in lace's home
(`keys.json`, 0600 in a 0700 folder), `{provider: {"variable": NAME, "key": VALUE}}`. Each key
is put in the process's environment under its variable when the environment has none, so the
model clients read it as they read any key, and every masking of credential values covers it;
stored keys are masked even where the environment's own wins."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lace.core.errors import LaceError
from lace.paths import (
    KEYS_FILE,
    add_credential_values,
    is_credential,
    lace_home,
    private_folder,
    write_private,
)

PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
VARIABLE_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,127}")
MAX_KEY = 4096


@dataclass(frozen=True)
class StoredKey:
    """One provider's key and the environment variable it goes in."""

    provider: str
    variable: str
    key: str


def keys_file() -> Path:
    """Where stored keys are kept."""
    return lace_home() / KEYS_FILE


def check_key(key: str) -> str:
    """The key without surrounding blanks; one clear error for one that cannot be a key."""
    key = key.strip()
    if not key:
        raise LaceError("No key given: nothing stored.")
    if len(key) > MAX_KEY or not key.isprintable() or any(char.isspace() for char in key):
        raise LaceError("That is not a key (blanks, control characters or more than "
                        f"{MAX_KEY} characters): nothing stored.")
    return key


def stored_keys() -> list[StoredKey]:
    """The stored keys, by provider name; none when there is no file."""
    path = keys_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        raise LaceError(f"Cannot read {path}: {error}; fix it or delete it and store the keys "
                        "again with lace keys set PROVIDER") from None
    keys = []
    for provider, entry in (data.items() if isinstance(data, dict) else [(None, None)]):
        if not (isinstance(provider, str) and PROVIDER_NAME.fullmatch(provider)
                and isinstance(entry, dict) and isinstance(entry.get("key"), str)
                and isinstance(entry.get("variable"), str)
                and VARIABLE_NAME.fullmatch(entry["variable"])
                and is_credential(entry["variable"])):  # never PATH or LD_PRELOAD
            raise LaceError(f"Cannot read {path}: not what lace keys set writes; fix it or "
                            "delete it and store the keys again with lace keys set PROVIDER")
        keys.append(StoredKey(provider, entry["variable"], entry["key"]))
    return sorted(keys, key=lambda stored: stored.provider)


def store_key(provider: str, variable: str, key: str) -> Path:
    """Keep `key` for `provider` (replacing its old one); the file's path."""
    kept = {stored.provider: {"variable": stored.variable, "key": stored.key}
            for stored in stored_keys()}
    kept[provider] = {"variable": variable, "key": check_key(key)}
    path = private_folder(lace_home()) / KEYS_FILE
    write_private(path, json.dumps(kept, indent=1, sort_keys=True))
    return path


def use_stored_keys() -> None:
    """Put each stored key in the environment when its variable is not set there, and mask
    every stored key from now on."""
    keys = stored_keys()
    add_credential_values(stored.key for stored in keys)
    for stored in keys:
        if not os.environ.get(stored.variable):
            os.environ[stored.variable] = stored.key


def stored_key_in_use(variable: str) -> bool:
    """Whether `variable` holds the key `lace keys set` stored (not the environment's own)."""
    stored = {key.variable: key.key for key in stored_keys()}
    return variable in stored and os.environ.get(variable) == stored[variable]
