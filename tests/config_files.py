"""Helpers of the settings-file tests: a repository with a lace.toml, and `lace config --json`
read back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


def repository(tmp_path: Path, lace_toml: str) -> tuple[Path, Path]:
    """A git repository with `lace_toml` at its root, and a folder two levels down in it."""
    repo = tmp_path / "repo"
    deep = repo / "src" / "app"
    deep.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "lace.toml").write_text(lace_toml)
    return repo, deep


def shown(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """`lace config --json`'s settings: `{key: {"value": ..., "from": ...}}`."""
    assert done.returncode == 0, done.stderr
    settings: dict[str, Any] = json.loads(done.stdout)["settings"]
    return settings
