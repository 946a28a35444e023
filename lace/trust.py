"""Trust in a folder's own configuration: the files a workspace brings (`lace.toml`, `.mcp.json`,
the prompt files its profiles name) act only once the person trusted that folder with exactly
these bytes (`lace trust`), because a cloned repository is not the person's hand. The hashes are
kept in lace's home, private to the person; every reader of project files asks here, so a new
one is gated the same way."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lace.core.errors import LaceError
from lace.core.secrets import mask
from lace.core.text import printable, printable_json
from lace.paths import credential_values, lace_home, private_folder, write_private

PROJECT_SETTINGS = "lace.toml"
MCP_JSON = ".mcp.json"
PROJECT_FILES = (PROJECT_SETTINGS, MCP_JSON)
"""The files lace reads from a workspace, in the order they are shown."""
TRUST_FILE = "trusted-folders.json"
"""In `$LACE_HOME`: `{folder: digest}` for each folder the person trusted."""
MAX_PROJECT_FILE = 1024 * 1024
_noticed: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Project:
    """One folder's project files as they are now: the bytes of each one present, by name (a
    profile's prompt file by its `system_prompt_file` as written)."""

    folder: Path
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """What trust is recorded for: the folder and each file's bytes (a missing file too)."""
        names = [*PROJECT_FILES, *sorted(set(self.files) - set(PROJECT_FILES))]
        parts = [str(self.folder)] + [
            [name, hashlib.sha256(self.files[name]).hexdigest() if name in self.files else None]
            for name in names]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def trusted(self) -> bool:
        """Whether the person trusted this folder with exactly these files."""
        return _records().get(str(self.folder)) == self.digest


def _read(path: Path) -> bytes | None:
    """A project file's bytes; None when there is none. Only a regular file of at most 1 MiB
    (a link to `/dev/zero` or a pipe must not hang or swamp lace)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise LaceError(f"Cannot read {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PROJECT_FILE:
            raise LaceError(f"Cannot read {path}: not a regular file of at most 1 MiB")
        return file.read(MAX_PROJECT_FILE + 1)


def project_of(folder: Path) -> Project:
    """The project files of `folder` (resolved) as they are now."""
    folder = folder.resolve()
    found = {name: _read(folder / name) for name in PROJECT_FILES}
    for name in prompt_files(found[PROJECT_SETTINGS]):
        try:
            found[name] = _read((folder / name).expanduser())
        except LaceError:
            found[name] = None  # what cannot be read is shown as missing, never trusted
    return Project(folder, {name: data for name, data in found.items() if data is not None})


def prompt_files(settings: bytes | None) -> list[str]:
    """The `system_prompt_file` of each profile of a `lace.toml`'s bytes (none when it cannot
    be read: then it is never trusted either)."""
    try:
        profiles = tomllib.loads((settings or b"").decode()).get("profiles", {})
    except (ValueError, RecursionError):
        return []
    return [profile["system_prompt_file"] for profile in
            (profiles.values() if isinstance(profiles, dict) else [])
            if isinstance(profile, dict) and isinstance(profile.get("system_prompt_file"), str)]


def trusted_bytes(folder: Path, name: str) -> bytes | None:
    """The bytes of `folder`'s project file `name` when the person trusts the folder as it is
    now; None when there is no such file, or when it is not trusted (then one line on stderr,
    once per process, names the folder's files and the command that trusts them)."""
    project = project_of(folder)
    if name not in project.files:
        return None
    if project.trusted():
        return project.files[name]
    if (str(project.folder), project.digest) not in _noticed:
        _noticed.add((str(project.folder), project.digest))
        print(printable(untrusted_notice(project), one_line=True), file=sys.stderr)
    return None


def untrusted_notice(project: Project) -> str:
    """The line a headless run prints for a folder whose files it ignores."""
    return (f"lace: ignoring {', '.join(project.files)} in {project.folder}: not trusted; "
            f"review and trust with: lace trust {shlex.quote(str(project.folder))}")


def _records() -> dict[str, str]:
    try:
        found = json.loads((lace_home() / TRUST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(key): str(value) for key, value in found.items()} \
        if isinstance(found, dict) else {}


def trust(project: Project) -> Path:
    """Record that the person trusts `project` as it is now (a 0600 file in a 0700 home,
    replaced whole); the record's path."""
    records = {**_records(), str(project.folder): project.digest}
    path = private_folder(lace_home()) / TRUST_FILE
    write_private(path, json.dumps(records, indent=1, sort_keys=True))
    return path


def parsed(project: Project, name: str) -> Any:
    """A project file's content as lace reads it; one clear error when it cannot be read."""
    path = project.folder / name
    try:
        text = project.files[name].decode()
        if name not in PROJECT_FILES:
            return text
        return tomllib.loads(text) if name == PROJECT_SETTINGS else json.loads(text)
    except ValueError as error:
        raise LaceError(f"Cannot read {path}: {error}") from None
    except RecursionError:  # nested past what the parser follows
        raise LaceError(f"Cannot read {path}: nested too deep") from None


def described(project: Project) -> list[str]:
    """Every value of every project file, one `key = value` line each, whole and escaped (a
    prompt file's text line by line), so that what the person trusts is what they saw; the
    values of the person's credentials masked (a prompt file may be their own `.env`)."""
    lines = []
    for name in project.files:
        lines.append(f"{printable(str(project.folder / name), one_line=True)}:")
        content = parsed(project, name)
        if isinstance(content, str):
            lines += [f"  | {printable(line, one_line=True)}" for line in content.splitlines()]
            continue
        leaves = list(_leaves(content, ""))
        lines += [f"  {key} = {value}" for key, value in leaves] or ["  (empty)"]
    secrets = credential_values()
    return [mask(line, secrets) for line in lines]


def key_text(part: str) -> str:
    """One part of a dotted key as TOML writes it: bare when it can be, else quoted."""
    bare = part and all(char.isascii() and (char.isalnum() or char in "_-") for char in part)
    return part if bare else printable_json(json.dumps(part, ensure_ascii=False))


def _leaves(value: Any, prefix: str) -> Any:
    """`(dotted key, JSON value)` for each value that is not a table."""
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaves(child, f"{prefix}.{key_text(str(key))}" if prefix else
                               key_text(str(key)))
    else:
        yield prefix or "(whole file)", printable_json(
            json.dumps(value, ensure_ascii=False, default=str))
