"""Where lace keeps its files (and where the person keeps theirs), how it makes them private,
and which environment variables hold credentials; no other part of lace imported, so the
settings, the store and the tools can all ask without importing each other."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

from platformdirs import user_config_path

CREDENTIAL_WORDS = frozenset({"KEY", "APIKEY", "ZENAPIKEY", "TOKEN", "SECRET", "PASSWORD",
                              "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "JWT", "PAT"})
"""A variable whose name has one of these words (`OPENAI_API_KEY`, `AWS_SESSION_TOKEN`,
`AWS_BEARER_TOKEN_BEDROCK`, `WATSONX_APIKEY`, `PGPASSWORD`...) holds a credential; the words
cover litellm's provider key variables."""
OTLP_HEADERS = re.compile(r"OTEL_EXPORTER_OTLP_(?:[A-Z]+_)?HEADERS")
"""The headers an OpenTelemetry exporter sends (`authorization=Bearer ...`), of every signal."""
DATABASE_SETTINGS = frozenset({"LACE_DB", "LACE_HOME", "DATABASE_URL"})
"""Where lace's own database is; with `PG*` and `*_DATABASE_URL`, kept from tools."""


def lace_home() -> Path:
    """The folder for lace's files: `$LACE_HOME`, else `~/.lace`."""
    return Path(os.environ.get("LACE_HOME") or Path.home() / ".lace").expanduser()


def user_config_file() -> Path:
    """The person's own settings file, `lace/config.toml` in their user config folder
    (platformdirs: `$XDG_CONFIG_HOME`, else `~/.config`, on Linux)."""
    return user_config_path("lace", appauthor=False) / "config.toml"


def tokens_folder() -> Path:
    """Where the network front ends keep the tokens they made (`web`, `mcp`), 0700."""
    return lace_home() / TOKENS_FOLDER


KEYS_FILE, TOKENS_FOLDER = "keys.json", "tokens"
SECRET_FILES = (KEYS_FILE, TOKENS_FOLDER)
"""In lace's home: what holds credentials (`lace keys`, the network front ends' tokens). File
tools never read them, whatever the workspace (one that encloses the home too)."""


def secret_paths() -> tuple[Path, ...]:
    """The files and folders of SECRET_FILES in lace's home."""
    return tuple(lace_home() / name for name in SECRET_FILES)


PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700


def private_folder(path: Path) -> Path:
    """`path`, made with each missing folder above it as 0700 whatever the umask: lace's home
    and what it keeps there (logs, worktrees) hold conversations, tool output and keys' uses.
    A folder that exists keeps its mode (the person chose it)."""
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            folder.mkdir(mode=PRIVATE_FOLDER)
    return path


def open_private(path: Path, mode: Literal["a", "w"] = "a") -> TextIO:
    """`path` opened for writing text (appending by default), created 0600 whatever the umask;
    an existing one is made 0600 too (a log an older lace made)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, PRIVATE_FILE)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a new 0600 file renamed over it), readable by its
    owner only; its folder must exist."""
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def is_credential(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (an OTLP exporter's
    headers carry the collector's key)."""
    upper = name.upper()
    return upper == "PGPASSWORD" or OTLP_HEADERS.fullmatch(upper) is not None or \
        not CREDENTIAL_WORDS.isdisjoint(upper.split("_"))


def is_database_setting(name: str) -> bool:
    """Whether a variable says where a database is (lace's own, or PostgreSQL's `PG*`)."""
    upper = name.upper()
    return upper in DATABASE_SETTINGS or upper.startswith("PG") or upper.endswith("_DATABASE_URL")


def withheld_from_tools(name: str) -> bool:
    """Whether a variable is kept from the processes tools start (`bash`)."""
    return is_credential(name) or is_database_setting(name)


def _credential_values(environment: Mapping[str, str]) -> tuple[str, ...]:
    values = {value for name, value in environment.items() if value and is_credential(name)}
    for name, value in environment.items():
        if OTLP_HEADERS.fullmatch(name.upper()):  # `key=value,...`: each value is a secret
            for header in value.split(","):
                secret = unquote(header.partition("=")[2]).strip()
                values.update((secret, *secret.split()[-1:]))  # `Bearer KEY`: KEY alone too
    values.discard("")
    for name, value in environment.items():
        if is_database_setting(name) and "://" in value:
            try:
                parts = urlsplit(value)
                found = [parts.password, *parse_qs(parts.query).get("password", [])]
            except ValueError:
                found = []
            values.update(password for password in found if password)
    return tuple(sorted(values))


_cache: tuple[dict[Any, Any], tuple[str, ...]] = ({}, ())
_configured: tuple[str, ...] = ()
"""Credentials written in lace's configuration rather than its environment (an MCP server's
`env` keys and `headers`), masked like the environment's."""


def add_credential_values(values: Iterable[str]) -> None:
    """Mask these values too from now on (configured keys, e.g. an MCP server's token)."""
    global _configured
    _configured = tuple(sorted({*_configured, *(value for value in values if value)}))


def credential_values() -> tuple[str, ...]:
    """The values of the credential variables in lace's environment (and the passwords in its
    database URLs), read again whenever the environment changed, and the configured ones."""
    global _cache
    # os.environ's own store: comparing it costs about 0.4 us, reading the names 30 us
    raw: Mapping[Any, Any] = getattr(os.environ, "_data", os.environ)
    seen, values = _cache
    if raw != seen:
        snapshot = dict(raw)
        values = _credential_values({os.fsdecode(name): os.fsdecode(value)
                                     for name, value in snapshot.items()})
        _cache = (snapshot, values)  # one assignment: a thread never sees a mixed pair
    return values + _configured if _configured else values
