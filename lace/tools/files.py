"""File tools: read (numbered, paged), list, search (a regular expression, capped), write, edit."""

from __future__ import annotations

import asyncio
import fnmatch
import re
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from lace.tools.base import ToolError
from lace.tools.workspace import WorkspaceResult, WorkspaceTool, inside, is_binary, relative

READ_LIMIT = 200
LIST_CAP = 500
SEARCH_CAP = 100
LINE_WIDTH = 400


def _text_file(workspace: Path, path: str) -> tuple[Path, str]:
    target = inside(workspace, path)
    if not target.exists():
        raise ToolError(f"{path!r} does not exist; file_list shows what is there.")
    if not target.is_file():
        raise ToolError(f"{path!r} is a directory; use file_list.")
    if is_binary(target):
        raise ToolError(f"{path!r} is a binary file of {target.stat().st_size:,} bytes; "
                        "it is not shown as text.")
    return target, target.read_text(encoding="utf-8", errors="replace")


class FileRead(WorkspaceTool):
    """Read a text file of the workspace with line numbers, `limit` lines from line `offset`."""

    name: ClassVar[str] = "file_read"
    path: str = Field(min_length=1)
    offset: int = Field(default=1, ge=1, description="First line to show (1-based).")
    limit: int = Field(default=READ_LIMIT, ge=1, le=2000)

    async def perform(self, workspace: Path) -> WorkspaceResult:
        _, text = await asyncio.to_thread(_text_file, workspace, self.path)
        lines = text.splitlines()
        shown = lines[self.offset - 1 : self.offset - 1 + self.limit]
        body = "\n".join(f"{number:6}\t{line[:LINE_WIDTH]}"
                         for number, line in enumerate(shown, start=self.offset))
        rest = len(lines) - (self.offset - 1 + len(shown))
        tail = f"\n… {rest} more lines (read on with offset={self.offset + len(shown)})" \
            if rest > 0 else ""
        return WorkspaceResult(body + tail if body else f"{self.path}: no lines from "
                               f"{self.offset} (it has {len(lines)}).")


class FileList(WorkspaceTool):
    """List files under a folder of the workspace, optionally matching a glob pattern."""

    name: ClassVar[str] = "file_list"
    path: str = "."
    pattern: str = Field(default="*", description="A glob such as *.py, matched on file names.")

    async def perform(self, workspace: Path) -> WorkspaceResult:
        def listing() -> str:
            folder = inside(workspace, self.path)
            if not folder.is_dir():
                raise ToolError(f"{self.path!r} is not a folder of the workspace.")
            found = sorted(relative(workspace, entry) + ("/" if entry.is_dir() else "")
                           for entry in folder.rglob("*")
                           if fnmatch.fnmatch(entry.name, self.pattern)
                           and inside_quietly(workspace, entry))
            more = f"\n… {len(found) - LIST_CAP} more" if len(found) > LIST_CAP else ""
            return "\n".join(found[:LIST_CAP]) + more if found else "(nothing matches)"

        return WorkspaceResult(await asyncio.to_thread(listing))


def inside_quietly(workspace: Path, entry: Path) -> bool:
    """Whether an entry (a symlink, perhaps) stays inside the workspace."""
    return entry.resolve().is_relative_to(workspace.resolve())


class FileSearch(WorkspaceTool):
    """Search file contents with a regular expression (like ripgrep); at most 100 matches."""

    name: ClassVar[str] = "file_search"
    pattern: str = Field(min_length=1, description="A Python regular expression.")
    path: str = "."
    glob: str = Field(default="*", description="Only files whose name matches this glob.")

    async def perform(self, workspace: Path) -> WorkspaceResult:
        try:
            expression = re.compile(self.pattern)
        except re.error as error:
            raise ToolError(f"Bad regular expression {self.pattern!r}: {error}.") from None

        def search() -> str:
            root = inside(workspace, self.path)
            matches: list[str] = []
            for file in sorted(p for p in root.rglob("*") if p.is_file()):
                if not fnmatch.fnmatch(file.name, self.glob) or \
                        not inside_quietly(workspace, file) or is_binary(file):
                    continue
                for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                    if expression.search(line):
                        matches.append(f"{relative(workspace, file)}:{number}: "
                                       f"{line.strip()[:LINE_WIDTH]}")
                        if len(matches) > SEARCH_CAP:
                            return "\n".join(matches[:SEARCH_CAP]) + \
                                f"\n… more than {SEARCH_CAP} matches; narrow the search"
            return "\n".join(matches) or "No matches."

        return WorkspaceResult(await asyncio.to_thread(search))


class FileWrite(WorkspaceTool):
    """Write a text file in the workspace (folders are created); replaces what was there."""

    name: ClassVar[str] = "file_write"
    path: str = Field(min_length=1)
    content: str = Field(max_length=2_000_000)

    async def perform(self, workspace: Path) -> WorkspaceResult:
        def write() -> str:
            target = inside(workspace, self.path)
            if target.is_dir():
                raise ToolError(f"{self.path!r} is a folder.")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.content, encoding="utf-8")
            return relative(workspace, target)

        written = await asyncio.to_thread(write)
        lines = self.content.count("\n") + (not self.content.endswith("\n") and bool(self.content))
        return WorkspaceResult(f"Wrote {written} ({lines} lines, {len(self.content)} chars).",
                               files_changed=(written,))


class FileEdit(WorkspaceTool):
    """Replace `old_text` with `new_text` in a file; `old_text` must appear exactly once unless
    `replace_all` is true."""

    name: ClassVar[str] = "file_edit"
    path: str = Field(min_length=1)
    old_text: str = Field(min_length=1)
    new_text: str
    replace_all: bool = False

    async def perform(self, workspace: Path) -> WorkspaceResult:
        def edit() -> tuple[str, int]:
            target, text = _text_file(workspace, self.path)
            count = text.count(self.old_text)
            if count == 0:
                raise ToolError(f"old_text was not found in {self.path!r}; read the file and "
                                "copy the exact text, whitespace included.")
            if count > 1 and not self.replace_all:
                raise ToolError(f"old_text appears {count} times in {self.path!r}; include more "
                                "surrounding text to make it unique, or set replace_all.")
            target.write_text(text.replace(self.old_text, self.new_text), encoding="utf-8")
            return relative(workspace, target), count

        changed, count = await asyncio.to_thread(edit)
        return WorkspaceResult(f"Edited {changed}: {count} replacement(s).",
                               files_changed=(changed,))


FILE_TOOLS: tuple[type[WorkspaceTool], ...] = (FileRead, FileList, FileSearch, FileWrite,
                                               FileEdit)
