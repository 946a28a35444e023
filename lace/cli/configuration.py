"""`lace config`: the settings in force for a workspace, merged, each value with where it came
from (a file, an environment variable, or lace's default), and the files lace looked at."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from lace.cli.invocation import workspace_of
from lace.cli.output import print_json, say
from lace.config import Settings, leaves, load_settings
from lace.config.sources import person_files, project_folder
from lace.core.secrets import MASK, mask_data
from lace.paths import credential_values, is_credential
from lace.trust import PROJECT_SETTINGS, key_text, project_of


def config_command(args: argparse.Namespace) -> int:
    """Print every setting (`key = value  # where from`), or JSON with `--json`."""
    workspace = workspace_of(args)
    settings = load_settings(workspace=workspace)
    files = considered_files(workspace)
    shown = {_dotted(key): {"value": value, "from": settings.origin_of(key)}
             for key, value in _values(settings)}
    if args.json:
        print_json({"files": files, "settings": shown})
        return 0
    say("# settings files, lowest first; each one's keys over the ones before, LACE_* "
        "variables and flags over all:")
    for file in files:
        say(f"#   {file['kind']:<8} {file['path']} ({file['state']})", one_line=True)
    for key, entry in shown.items():
        value = json.dumps(entry["value"], ensure_ascii=False)
        say(f"{key} = {value}  # {entry['from']}", one_line=True)
    return 0


def considered_files(workspace: Path) -> list[dict[str, str]]:
    """Each file lace reads settings from, whether it was read, and why not."""
    named = os.environ.get("LACE_CONFIG")
    if named:
        return [{"kind": "LACE_CONFIG", "path": named, "state": "read"}]
    files = [{"kind": kind, "path": str(path), "state": "read" if path.is_file() else "none"}
             for kind, path in person_files()]
    folder = project_folder(workspace)
    project = project_of(folder)
    state = "none"
    if PROJECT_SETTINGS in project.files:
        state = "read" if project.trusted() else f"not trusted: lace trust {folder}"
    files.append({"kind": "project", "path": str(folder / PROJECT_SETTINGS), "state": state})
    return files


def _values(settings: Settings) -> list[tuple[tuple[str, ...], Any]]:
    """Every value as the settings hold it: a profile's prompt read from a file is shown by
    the file's name; credentials configured for MCP servers are masked."""
    dumped = settings.model_dump(mode="json")
    found = []
    for key, value in leaves(dumped):
        if key[0] == "profiles" and key[-1] == "system_prompt" and \
                settings.profiles[key[1]].system_prompt_file:
            continue
        secret = key[0] == "mcp_servers" and len(key) > 3 and key[2] in ("env", "headers") \
            and (key[2] == "headers" or is_credential(key[3]))
        found.append((key, MASK if secret else mask_data(value, credential_values())))
    return found


def _dotted(key: tuple[str, ...]) -> str:
    return ".".join(key_text(part) for part in key)
