"""The workspace and the settings a command runs with, from its command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from lace.config import Settings, load_settings
from lace.core.errors import LaceError


def workspace_of(args: argparse.Namespace) -> Path:
    """`--workspace DIR` (which must exist), else the folder lace was started in."""
    chosen = Path(getattr(args, "workspace", None) or Path.cwd()).expanduser().resolve()
    if not chosen.is_dir():
        raise LaceError(f"--workspace {chosen} is not a folder.")
    return chosen


def with_tool_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """The settings with `--yes` / `--read-only` applied to the tool policy."""
    tools = settings.tools.overridden(allow_all=getattr(args, "yes", False),
                                      read_only=getattr(args, "read_only", False))
    return settings.model_copy(update={"tools": tools})


def runtime_settings(args: argparse.Namespace) -> Settings:
    """The settings of a process that runs agents: every fallback model checked as a spawn's
    would be, and `--yes` / `--read-only` applied."""
    from lace.llm.checks import check_model

    return with_tool_flags(load_settings(check_model=check_model, workspace=workspace_of(args)),
                           args)
