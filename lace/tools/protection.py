"""What the file tools never write: files that would give an agent powers it was not given
(lace's settings, its database, git's hooks and config), and the `[tools] protected_paths`;
and what they never read: lace's own secrets (stored keys, the front ends' tokens)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lace.paths import lace_home, secret_paths, user_config_file
from lace.store.engines import engine_for

LACE_SETTINGS = "it holds settings lace reads (tool policies, limits, tool servers)"
BUILT_IN_NAMES: tuple[tuple[str, str], ...] = (
    ("lace.toml", LACE_SETTINGS),
    (".mcp.json", LACE_SETTINGS),
    (".lace*", "it is one of lace's own folders or files"),
    (".git", "it belongs to git, whose config and hooks run commands"),
)
"""Names protected wherever they appear in a path, with why (matched case-insensitively)."""
DATABASE_SUFFIXES = ("", "-wal", "-shm", "-journal")
SETTING = "it is in [tools] protected_paths"
HOME = "it is lace's home folder (settings and database)"
SECRET = "it holds lace's own secrets (stored keys, tokens)"


def _matches(text: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(text.casefold(), pattern.casefold())


@dataclass(frozen=True)
class Protection:
    """Names protected in any folder, paths (or globs) relative to the workspace protected with
    everything under them, and absolute paths of lace's own files."""

    names: tuple[tuple[str, str], ...] = BUILT_IN_NAMES
    relative: tuple[str, ...] = ()
    absolute: tuple[tuple[Path, str], ...] = ()
    secrets: tuple[Path, ...] = ()
    """Never read either: lace's own credentials."""

    def secret(self, real_path: Path) -> bool:
        """Whether a file tool must not even read the entry at `real_path`."""
        return any(real_path == path or path in real_path.parents for path in self.secrets)

    def why(self, parts: Sequence[str], real_path: Path) -> str | None:
        """Why the entry at `parts` (its real path relative to the workspace) is protected,
        or None when a file tool may write it."""
        for part in parts:
            for pattern, reason in self.names:
                if _matches(part, pattern):
                    return reason
        prefixes = ["/".join(parts[: end + 1]) for end in range(len(parts))]
        if any(_matches(prefix, pattern) for prefix in prefixes for pattern in self.relative):
            return SETTING
        for protected, reason in self.absolute:
            if real_path == protected or protected in real_path.parents:
                return reason
        return None

    def inside(self, folder: Path) -> Protection:
        """The protection of a workspace at `folder` inside a protected folder (a helper's
        worktree under lace's home): the same, but for the folders that enclose it."""
        real = _real(folder)
        return replace(self, absolute=tuple(
            (path, reason) for path, reason in self.absolute
            if path != real and path not in real.parents))

    @classmethod
    def for_lace(cls, workspace: Path, *, database_url: str | None,
                 protected_paths: Sequence[str]) -> Protection:
        """lace's own files (its home folder, the configuration files it reads, the person's
        own config file among them, the database with its -wal and -shm), and each
        `protected_paths` entry: a name or glob without `/` protects it in every folder, one
        with `/` is relative to the workspace, an absolute or `~` path is that path. A
        workspace inside lace's home (not the home itself) is the person's project: lace's
        files beside it are out of its reach, so the home is not protected whole."""
        home = _real(lace_home())
        absolute = [] if home in _real(workspace).parents else [(home, HOME)]
        if os.environ.get("LACE_CONFIG"):
            absolute.append((_real(Path(os.environ["LACE_CONFIG"])), LACE_SETTINGS))
        absolute.append((_real(user_config_file()), LACE_SETTINGS))
        database = engine_for(database_url).path if database_url else None
        if database is not None:
            absolute += [(_real(database.with_name(database.name + suffix)),
                          "it is lace's database") for suffix in DATABASE_SUFFIXES]
        names, relative = list(BUILT_IN_NAMES), []
        for entry in protected_paths:
            cleaned = entry.strip().removeprefix("./").rstrip("/")
            if cleaned.startswith(("/", "~")):
                absolute.append((_real(Path(cleaned)), SETTING))
            elif "/" in cleaned:
                relative.append(cleaned)
            elif cleaned:
                names.append((cleaned, SETTING))
        return cls(names=tuple(names), relative=tuple(relative), absolute=tuple(absolute),
                   secrets=tuple(_real(path) for path in secret_paths()))


def _real(path: Path) -> Path:
    """The path with every symlink in it resolved, whether or not it exists."""
    return Path(os.path.realpath(path.expanduser()))
