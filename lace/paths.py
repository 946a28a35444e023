"""Where lace keeps its files; standard library only, so the settings and the store can both
ask without importing each other."""

from __future__ import annotations

import os
from pathlib import Path


def lace_home() -> Path:
    """The folder for lace's files: `$LACE_HOME`, else `~/.lace`."""
    return Path(os.environ.get("LACE_HOME") or Path.home() / ".lace").expanduser()
