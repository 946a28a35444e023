"""`lace trust [PATH] [--yes]`: show the whole configuration a workspace brings, ask, and trust
that folder with exactly these files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from lace.cli.output import print_json, say
from lace.config import checked_project
from lace.config.sources import project_folder
from lace.core.errors import LaceError
from lace.trust import PROJECT_FILES, Project, described
from lace.trust import trust as record_trust

EXIT_NOT_TRUSTED = 1


def trust_command(args: argparse.Namespace) -> int:
    """Exit 0 once trusted (or nothing to trust), 1 when the person did not say yes; a file
    that cannot be read or bad settings are one line, exit 2, nothing recorded. With `--json`
    the configuration is shown on stderr and the answer is JSON on stdout."""
    folder = Path(args.path or Path.cwd()).expanduser()
    if not folder.is_dir():
        raise LaceError(f"{folder} is not a folder.")
    project = checked_project(folder)
    if not project.files:  # a subfolder of a project: the lace.toml lace reads from here
        project = checked_project(project_folder(folder))
    if not project.files:
        return _answer(args, project, False, f"Nothing to trust in {project.folder}: it has "
                                             f"no {' or '.join(PROJECT_FILES)}.", to=sys.stdout)
    lines = described(project)  # may refuse a file that cannot be read
    shown_on = sys.stderr if args.json else sys.stdout
    say(f"The configuration in {project.folder}, which lace ignores until you trust it:",
        one_line=True, file=shown_on)
    for line in lines:
        print(line, file=shown_on)
    if project.trusted():
        return _answer(args, project, True, f"Already trusted as shown: {project.folder}")
    if not args.yes and not _asked(project):
        say("Not trusted: nothing recorded.", file=sys.stderr)
        if args.json:
            print_json({"folder": str(project.folder), "files": list(project.files),
                        "trusted": False})
        return EXIT_NOT_TRUSTED
    record_trust(project)
    return _answer(args, project, True, f"Trusted {project.folder} as shown; a change to its "
                                        "files asks again.")


def _answer(args: argparse.Namespace, project: Project, trusted: bool, text: str, *,
            to: TextIO | None = None) -> int:
    """The outcome: `text` for a person (on `to`), or JSON alone on stdout."""
    if args.json:
        print_json({"folder": str(project.folder), "files": list(project.files),
                    "trusted": trusted})
    else:
        say(text, one_line=True, file=to or sys.stderr)
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
