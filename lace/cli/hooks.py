"""`lace hooks`: the hooks in effect for a workspace, each with the file it comes from (every
file's hooks run, the person's own first), and the files lace looked at."""

from __future__ import annotations

import argparse
from typing import Any

from lace.cli.configuration import considered_files
from lace.cli.invocation import workspace_of
from lace.cli.output import print_json, say
from lace.config import load_settings
from lace.config.hooks import HookMatcher


def hooks_command(args: argparse.Namespace) -> int:
    """Print one line per hook command (`EVENT MATCHER COMMAND (timeout) # file`), or JSON."""
    workspace = workspace_of(args)
    settings = load_settings(workspace=workspace)
    rows: list[dict[str, Any]] = []
    for found in settings.files.files:
        tables = found.data.get("hooks", {})
        for event, matchers in (tables.items() if isinstance(tables, dict) else []):
            for table in matchers:
                matcher = HookMatcher.model_validate(table)  # valid: the settings loaded
                rows += [{"event": event, "matcher": matcher.matcher or "*",
                          "command": command.command, "timeout": command.timeout,
                          "from": str(found.path), "kind": found.kind}
                         for command in matcher.hooks]
    if args.json:
        print_json({"hooks": rows, "files": considered_files(workspace)})
        return 0
    if not rows:
        say("No hooks are configured (see docs/hooks.md).")
    for row in rows:
        say(f"{row['event']:<16} {row['matcher']:<20} {row['command']}  (timeout "
            f"{row['timeout']:g} s)  # {row['from']}", one_line=True)
    for file in considered_files(workspace):
        if file["state"].startswith("not trusted"):
            say(f"# {file['path']} is {file['state']}: its hooks do not run.", one_line=True)
    return 0
