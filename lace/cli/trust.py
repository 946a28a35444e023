"""`lace trust [PATH] [--yes]`: show the whole configuration a workspace brings, ask, and trust
that folder with exactly these files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lace.cli.output import say
from lace.config import checked_project
from lace.config.sources import project_folder
from lace.core.errors import LaceError
from lace.trust import PROJECT_FILES, Project, described
from lace.trust import trust as record_trust

EXIT_NOT_TRUSTED = 1


def trust_command(args: argparse.Namespace) -> int:
    """Exit 0 once trusted (or nothing to trust), 1 when the person did not say yes; a file
    that cannot be read or bad settings are one line, exit 2, nothing recorded."""
    folder = Path(args.path or Path.cwd()).expanduser()
    if not folder.is_dir():
        raise LaceError(f"{folder} is not a folder.")
    project = checked_project(folder)
    if not project.files:  # a subfolder of a project: the lace.toml lace reads from here
        project = checked_project(project_folder(folder))
    if not project.files:
        say(f"Nothing to trust in {project.folder}: it has no {' or '.join(PROJECT_FILES)}.",
            one_line=True)
        return 0
    lines = described(project)  # may refuse a file that cannot be read
    say(f"The configuration in {project.folder}, which lace ignores until you trust it:",
        one_line=True)
    for line in lines:
        print(line)
    if project.trusted():
        say(f"Already trusted as shown: {project.folder}", one_line=True, file=sys.stderr)
        return 0
    if not args.yes and not _asked(project):
        say("Not trusted: nothing recorded.", file=sys.stderr)
        return EXIT_NOT_TRUSTED
    record_trust(project)
    say(f"Trusted {project.folder} as shown; a change to its files asks again.",
        one_line=True, file=sys.stderr)
    return 0


def _asked(project: Project) -> bool:
    """The person's answer on stdin (no answer is no)."""
    say(f"Trust {project.folder} with this configuration? [y/N] ", one_line=True,
        file=sys.stderr, end="")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):
        print(file=sys.stderr)
    return answer.strip().lower() in ("y", "yes")
