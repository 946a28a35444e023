"""The settings files in force and what each one set: the person's own (their user config
folder's `lace/config.toml`, then `$LACE_HOME/config.toml`), then the project's `lace.toml`, the
nearest one from the workspace up to its repository's root, once the person trusts it
(`lace.trust`); merged key by key, each later file over the earlier ones. `$LACE_CONFIG` names
the one file read instead of all of them, as a person pinning their settings for a run means."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lace.core.errors import LaceError
from lace.paths import lace_home, user_config_file
from lace.trust import PROJECT_SETTINGS, trusted_bytes

Key = tuple[str, ...]


@dataclass(frozen=True)
class SettingsFile:
    """One settings file: where it is, whose it is, and what it says."""

    path: Path
    kind: str
    """`user`, `home`, `project` or `LACE_CONFIG`."""
    data: dict[str, Any]


@dataclass
class Merged:
    """The files' settings merged key by key, and which file set each value."""

    files: list[SettingsFile] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    origin: dict[Key, Path] = field(default_factory=dict)

    @classmethod
    def of(cls, files: list[SettingsFile]) -> Merged:
        merged = cls(files)
        for found in files:
            _merge(merged.data, found.data, (), found.path, merged.origin)
        return merged

    def file_of(self, key: Key) -> Path | None:
        """The file that set `key` (or the table holding it); None when no file did. For a
        table set by several files, the last of them."""
        for length in range(len(key), 0, -1):
            if key[:length] in self.origin:
                return self.origin[key[:length]]
        inside = [path for set_key, path in self.origin.items() if set_key[:len(key)] == key]
        return inside[-1] if inside and key else None


def _merge(into: dict[str, Any], data: dict[str, Any], prefix: Key, path: Path,
           origin: dict[Key, Path]) -> None:
    """`data` over `into`: tables merged key by key, any other value (a list too) replaced,
    but for the hooks of an event: every file's run (`[[hooks.EVENT]]`), as in Claude Code."""
    for name, value in data.items():
        key = (*prefix, name)
        if isinstance(value, dict) and isinstance(into.get(name), dict):
            _merge(into[name], value, key, path, origin)
            continue
        if prefix == ("hooks",) and isinstance(value, list) and \
                isinstance(into.get(name), list):
            into[name] = into[name] + _copy(value)
            origin[key] = path
            continue
        for stale in [set_key for set_key in origin if set_key[:len(key)] == key]:
            del origin[stale]
        into[name] = _copy(value)
        if isinstance(value, dict) and value:
            for leaf in _leaf_keys(value, key):
                origin[leaf] = path
        else:
            origin[key] = path


def _copy(value: Any) -> Any:
    return {name: _copy(child) for name, child in value.items()} \
        if isinstance(value, dict) else value


def _leaf_keys(value: dict[str, Any], prefix: Key) -> Iterator[Key]:
    for name, child in value.items():
        if isinstance(child, dict) and child:
            yield from _leaf_keys(child, (*prefix, name))
        else:
            yield (*prefix, name)


def repository_root(folder: Path) -> Path | None:
    """The root of the git repository `folder` is in (the nearest folder holding `.git`, a
    worktree's file included), or None outside one."""
    return next((candidate for candidate in (folder, *folder.parents)
                 if (candidate / ".git").exists()), None)


def project_folder(workspace: Path) -> Path:
    """The folder whose `lace.toml` is the project's: the nearest holding one from `workspace`
    up to its repository's root (never above it, nor above `workspace` outside a repository:
    a `lace.toml` in `/tmp` is nobody's project); `workspace` itself when none does."""
    workspace = workspace.resolve()
    root = repository_root(workspace)
    climb = [workspace] if root is None else \
        [workspace, *workspace.parents[:len(workspace.parts) - len(root.parts)]]
    return next((folder for folder in climb if (folder / PROJECT_SETTINGS).is_file()),
                workspace)


def _parsed(path: Path, data: bytes) -> dict[str, Any]:
    try:
        return tomllib.loads(data.decode())
    except ValueError as error:  # malformed TOML, or not UTF-8
        raise LaceError(f"Cannot read {path}: {error}") from None
    except RecursionError:  # arrays nested past what the parser follows
        raise LaceError(f"Cannot read {path}: nested too deep") from None


def _person_file(path: Path, kind: str) -> SettingsFile | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LaceError(f"Cannot read {path}: {error.strerror}") from None
    return SettingsFile(path, kind, _parsed(path, data))


def person_files() -> list[tuple[str, Path]]:
    """The person's own settings files, lowest first (whether or not they exist)."""
    return [("user", user_config_file()), ("home", lace_home() / "config.toml")]


def settings_files(workspace: Path | None = None) -> list[SettingsFile]:
    """The files in force for a workspace (default: this folder), lowest first: the one
    `$LACE_CONFIG` names (an error when it is not a file); else the person's own and the
    project's, when they trust it (the bytes trusted are the bytes parsed)."""
    named = os.environ.get("LACE_CONFIG")
    if named:
        if not Path(named).is_file():
            raise LaceError(f"LACE_CONFIG names {named}, which is not a file.")
        found = _person_file(Path(named), "LACE_CONFIG")
        return [found] if found else []
    files = [found for kind, path in person_files() if (found := _person_file(path, kind))]
    folder = project_folder(workspace or Path.cwd())
    project = trusted_bytes(folder, PROJECT_SETTINGS)
    if project is not None:
        path = folder / PROJECT_SETTINGS
        files.append(SettingsFile(path, "project", _parsed(path, project)))
    return files
