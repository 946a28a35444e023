"""`lace export` and `lace import`: a session as one JSON document (or a Markdown transcript),
and that document restored into a database. A bad file is one line, exit 2, nothing written."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lace.cli.board import board_of
from lace.cli.output import report, say
from lace.cli.transcript import transcript
from lace.core.errors import LaceError
from lace.core.text import MAX_NESTING, printable, printable_json, value_nesting
from lace.paths import write_private
from lace.runtime.public import SessionDocument, parse_document

MAX_IMPORT_BYTES = 32 * 1024 * 1024
"""The largest file `lace import` reads. A session is checked whole in memory before anything
is written, and decoded and checked JSON takes up to 20 times its size (measured: a 126 MB file
of small events peaked at 2.4 GB); past this size the file is refused before it is read."""
IMPORT_PEAK_MB = 1024
"""What an import of a file of MAX_IMPORT_BYTES may take at most (measured: about 0.6 GB for
the worst shape, small events; tests/hostile/test_import.py holds it under this)."""
MAX_IMPORT_NESTING = MAX_NESTING + 8
"""Tool arguments (at most MAX_NESTING deep) inside an approval inside the document."""


def export_command(args: argparse.Namespace) -> int:
    """`lace export SESSION [--format json|markdown] [-o FILE]`."""
    with board_of(args) as board:
        document = board.export(args.session)
    if args.format == "json":
        text = printable_json(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    else:
        text = printable(transcript(document))
    if args.output is None:
        sys.stdout.write(text + "\n")
    else:
        _write_private(Path(args.output), text + "\n")
        say(f"Exported {args.session} to {args.output}", one_line=True, file=sys.stderr)
    return 0


def _write_private(path: Path, text: str) -> None:
    """Write the export readable by its owner only: it holds every conversation of the
    session."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise LaceError(f"cannot write {path}: {folder} is not a folder")
    write_private(path, text)


def read_document(path: Path) -> SessionDocument:
    """The export in `path`, checked whole; LaceError (one line) for anything else: not a
    regular file, too big, not UTF-8, not JSON, nested too deep, another format or version,
    a bad field, a reference to nothing."""
    try:
        if not path.is_file():
            raise LaceError(f"{path} is not a file")
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > MAX_IMPORT_BYTES:
                raise LaceError(f"{path} is {size / 2**20:.1f} MB; lace import reads files of "
                                f"at most {MAX_IMPORT_BYTES // 2**20} MB (docs/export.md)")
            raw = file.read(MAX_IMPORT_BYTES + 1)
    except OSError as error:
        raise LaceError(f"cannot read {path}: {error.strerror}") from None
    if len(raw) > MAX_IMPORT_BYTES:  # it grew while read
        raise LaceError(f"{path} is larger than the {MAX_IMPORT_BYTES // 2**20} MB lace import "
                        "reads (docs/export.md)")
    try:
        text = raw.decode("utf-8")
        del raw  # a copy fewer while the JSON is decoded
        value: Any = json.loads(text)
        del text
    except UnicodeDecodeError as error:
        raise LaceError(f"{path} is not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise LaceError(f"{path} is not JSON: {error.msg} at line {error.lineno} column "
                        f"{error.colno}") from None
    except RecursionError:  # nested past what the decoder follows
        raise LaceError(_too_deep(path)) from None
    if value_nesting(value) > MAX_IMPORT_NESTING:
        raise LaceError(_too_deep(path))
    try:
        return parse_document(value)
    except LaceError as error:
        raise LaceError(f"{path}: {error}") from None


def _too_deep(path: Path) -> str:
    return f"{path} is nested deeper than {MAX_IMPORT_NESTING} levels; not a lace export"


def import_command(args: argparse.Namespace) -> int:
    """`lace import FILE`: checks the whole file, then writes it in one transaction."""
    document = read_document(Path(args.file))
    with board_of(args, create=True) as board:
        imported = board.import_session(document)
    session_id = imported.session
    renamed = f" as {session_id} (its ids were taken here)" if (
        session_id != document.session) else ""
    dropped, reset = imported.approvals_dropped, imported.plans_reset
    report(args, {"session": session_id, "exported_as": document.session,
                  "threads": len(document.threads), "tasks": len(document.tasks),
                  "events": len(document.events), "approvals_dropped": dropped,
                  "plans_reset": reset},
           printable(f"Imported session {document.session}{renamed}: "
                     f"{len(document.threads)} threads, {len(document.tasks)} tasks, "
                     f"{len(document.events)} events", one_line=True))
    left_out = (f"; left out its {dropped} approval{'s' if dropped != 1 else ''} (permissions "
                "never travel in an import)") if dropped else ""
    if reset:
        left_out += (f"; {reset} waiting helper plan{'s' if reset != 1 else ''} reset to lace's "
                     "default spawn limits, without the file's worktree")
    say(f"Nothing of it runs until you resume it: lace run --continue {session_id}{left_out}",
        one_line=True, file=sys.stderr)
    return 0
