"""File tools: read (numbered, paged), list, search (RE2, capped), write, edit. Each reads only
what it returns or a bounded amount, and writes by replacing the file."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from typing import BinaryIO, ClassVar

from pydantic import Field

from lace.tools.base import ToolError
from lace.tools.patterns import Pattern, compile_pattern
from lace.tools.reading import (
    BINARY_PROBE,
    is_binary,
    lines_left,
    listed,
    next_line,
    shown_line,
    text_file,
    walk,
)
from lace.tools.workspace import Workspace, WorkspaceResult, WorkspaceTool, off_loop
from lace.tools.workspace_paths import open_regular, replace_file

READ_LIMIT = 200
LIST_CAP = 500
SEARCH_CAP = 100
SEARCH_LINE_BYTES = 2**16
SEARCH_BYTES_PER_FILE = 8 * 2**20
SEARCH_BYTES_TOTAL = 64 * 2**20
EDIT_BYTES = 16 * 2**20
NAMED_CUT_FILES = 5


class FileRead(WorkspaceTool):
    """Read a text file of the workspace with line numbers, `limit` lines from line `offset`."""

    name: ClassVar[str] = "file_read"
    path: str = Field(min_length=1)
    offset: int = Field(default=1, ge=1, description="First line to show (1-based).")
    limit: int = Field(default=READ_LIMIT, ge=1, le=2000)

    async def perform(self, workspace: Workspace) -> WorkspaceResult:
        editor = workspace.editor
        if editor is not None and editor.reads:
            path = await off_loop(lambda: _checked_for_reading(workspace, self.path))
            return WorkspaceResult(self._page_of(await editor.read(path)))
        return WorkspaceResult(await off_loop(lambda: self._page(workspace)))

    def _page_of(self, text: str) -> str:
        """A page of a file's text (as an editor holds it)."""
        lines = text.splitlines()
        shown = [f"{number:6}\t{line}" for number, line in enumerate(
            lines[self.offset - 1:self.offset - 1 + self.limit], start=self.offset)]
        if not shown:
            return f"{self.path}: no lines from {self.offset} (it has {len(lines)})."
        left = len(lines) - (self.offset - 1 + len(shown))
        after = self.offset + len(shown)
        return "\n".join(shown) + (f"\n… {left} more lines (read on with offset={after})"
                                   if left else "")

    def _page(self, workspace: Workspace) -> str:
        with text_file(workspace, self.path) as (stream, info):
            number, shown = 0, list[str]()
            while len(shown) < self.limit and (raw := next_line(stream)) is not None:
                number += 1
                if number >= self.offset:
                    shown.append(f"{number:6}\t{shown_line(raw)}")
            if not shown:
                return f"{self.path}: no lines from {self.offset} (it has {number})."
            left = lines_left(stream, info.st_size)
            after = self.offset + len(shown)
            if left is None:
                return "\n".join(shown) + (f"\n… more lines, {info.st_size - stream.tell():,} "
                                           f"bytes not read (read on with offset={after})")
            return "\n".join(shown) + (f"\n… {left} more lines (read on with offset={after})"
                                       if left else "")


class FileList(WorkspaceTool):
    """List files under a folder of the workspace, optionally matching a glob pattern."""

    name: ClassVar[str] = "file_list"
    path: str = "."
    pattern: str = Field(default="*", description="A glob such as *.py, matched on file names.")

    async def perform(self, workspace: Workspace) -> WorkspaceResult:
        return WorkspaceResult(await off_loop(lambda: self._listing(workspace)))

    def _listing(self, workspace: Workspace) -> str:
        found: list[str] = []
        with contextlib.closing(walk(workspace, self.path, files_only=False)) as entries:
            for relative, name, fd in entries:
                if len(found) > LIST_CAP:
                    break
                shown = listed(workspace, relative, name, fd) \
                    if fnmatch.fnmatch(name, self.pattern) else None
                if shown is not None:
                    found.append(shown)
        found.sort()
        more = "\n… more entries; narrow the path or the pattern" if len(found) > LIST_CAP \
            else ""
        return "\n".join(found[:LIST_CAP]) + more if found else "(nothing matches)"


class FileSearch(WorkspaceTool):
    """Search file contents with a regular expression (RE2 syntax, like ripgrep's: no
    look-around or backreferences); at most 100 matches."""

    name: ClassVar[str] = "file_search"
    pattern: str = Field(min_length=1, max_length=2000, description="An RE2 regular expression.")
    path: str = "."
    glob: str = Field(default="*", description="Only files whose name matches this glob.")

    async def perform(self, workspace: Workspace) -> WorkspaceResult:
        expression = compile_pattern(self.pattern)
        return WorkspaceResult(await off_loop(lambda: Search(expression).run(workspace, self)))


class Search:
    """One file_search: matches, and the bytes it may still read."""

    def __init__(self, expression: Pattern) -> None:
        self.expression = expression
        self.matches: list[str] = []
        self.budget = SEARCH_BYTES_TOTAL
        self.cut_files: list[str] = []

    def run(self, workspace: Workspace, tool: FileSearch) -> str:
        with contextlib.closing(walk(workspace, tool.path, files_only=True)) as entries:
            for relative, name, folder_fd in entries:
                if len(self.matches) > SEARCH_CAP or self.budget <= 0:
                    break
                if fnmatch.fnmatch(name, tool.glob):
                    self.search_file(relative, name, folder_fd)
        return self.report()

    def search_file(self, relative: str, name: str, folder_fd: int) -> None:
        """Search one regular text file line by line, within its share of bytes; anything else
        (a symlink, a FIFO, a file with several links, a binary file) is skipped unopened or
        unread."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=folder_fd)
        except OSError:
            return
        with os.fdopen(fd, "rb") as stream:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                return
            allowed = min(SEARCH_BYTES_PER_FILE, self.budget)
            head = stream.read(min(BINARY_PROBE, allowed))
            if is_binary(head):
                self.budget -= len(head)
                return
            stream.seek(0)
            self.budget -= self.scan(relative, stream, allowed)
            if stream.tell() < info.st_size and len(self.matches) <= SEARCH_CAP:
                self.cut_files.append(relative)

    def scan(self, relative: str, stream: BinaryIO, allowed: int) -> int:
        """Search up to `allowed` bytes of `stream`; returns the bytes read."""
        number, read = 1, 0
        while read < allowed and len(self.matches) <= SEARCH_CAP:
            raw = stream.readline(min(SEARCH_LINE_BYTES, allowed - read))
            if not raw:
                break
            read += len(raw)
            if self.expression.search(raw.rstrip(b"\r\n")):
                self.matches.append(f"{relative}:{number}: {shown_line(raw).strip()}")
            number += raw.endswith(b"\n")  # a longer line is searched in pieces
        return read

    def report(self) -> str:
        lines = self.matches[:SEARCH_CAP] or ["No matches."]
        if len(self.matches) > SEARCH_CAP:
            lines.append(f"… more than {SEARCH_CAP} matches; narrow the search")
        if self.cut_files:
            named = ", ".join(self.cut_files[:NAMED_CUT_FILES])
            others = len(self.cut_files) - NAMED_CUT_FILES
            lines.append(f"… searched only the first {SEARCH_BYTES_PER_FILE // 2**20} MB of "
                         f"{named}" + (f" and {others} other files" if others > 0 else ""))
        if self.budget <= 0:
            lines.append(f"… stopped after reading {SEARCH_BYTES_TOTAL // 2**20} MB in all; "
                         "narrow the path or the glob")
        return "\n".join(lines)


class FileWrite(WorkspaceTool):
    """Write a text file in the workspace (folders are created); replaces what was there."""

    name: ClassVar[str] = "file_write"
    path: str = Field(min_length=1)
    content: str = Field(max_length=2_000_000)

    async def perform(self, workspace: Workspace) -> WorkspaceResult:
        editor = workspace.editor

        def write() -> tuple[str, str]:
            with workspace.writing(self.path) as place:
                if editor is None or not editor.writes:
                    replace_file(place, self.content.encode("utf-8", errors="replace"),
                                 self.path)
                return place.relative, workspace.absolute(place)

        written, absolute = await off_loop(write)
        if editor is not None and editor.writes:
            await editor.write(absolute, self.content)
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

    async def perform(self, workspace: Workspace) -> WorkspaceResult:
        editor = workspace.editor
        if editor is not None and editor.reads and editor.writes:
            def check() -> tuple[str, str]:
                with workspace.writing(self.path, make_folders=False) as place:
                    return place.relative, workspace.absolute(place)

            changed, absolute = await off_loop(check)
            text, count = self._replaced(await editor.read(absolute))
            await editor.write(absolute, text)
        else:
            changed, count = await off_loop(lambda: self._edit(workspace))
        return WorkspaceResult(f"Edited {changed}: {count} replacement(s).",
                               files_changed=(changed,))

    def _replaced(self, text: str) -> tuple[str, int]:
        """The text with `old_text` replaced, and how often; ToolError when it is not there
        exactly once (unless `replace_all`)."""
        count = text.count(self.old_text)
        if count == 0:
            raise ToolError(f"old_text was not found in {self.path!r}; read the file and "
                            "copy the exact text, whitespace included.")
        if count > 1 and not self.replace_all:
            raise ToolError(f"old_text appears {count} times in {self.path!r}; include more "
                            "surrounding text to make it unique, or set replace_all.")
        return text.replace(self.old_text, self.new_text), count

    def _edit(self, workspace: Workspace) -> tuple[str, int]:
        with workspace.writing(self.path, make_folders=False) as place:
            fd, info = open_regular(place, self.path)
            with os.fdopen(fd, "rb") as stream:
                if info.st_size > EDIT_BYTES:
                    raise ToolError(f"{self.path!r} is too big to edit ({info.st_size:,} bytes; "
                                    f"at most {EDIT_BYTES:,}); use bash for it.")
                data = stream.read(EDIT_BYTES + 1)
            if is_binary(data[:BINARY_PROBE]):
                raise ToolError(f"{self.path!r} is a binary file of {len(data):,} bytes; it "
                                "is not edited as text.")
            text, count = self._replaced(data.decode("utf-8", errors="surrogateescape"))
            try:
                edited = text.encode("utf-8", errors="surrogateescape")
            except UnicodeEncodeError as error:
                raise ToolError(f"new_text cannot be written as UTF-8 ({error.reason}).") from None
            replace_file(place, edited, self.path)
            return place.relative, count


def _checked_for_reading(workspace: Workspace, path: str) -> str:
    """The absolute path of `path` once it passed the workspace's checks for reading."""
    with workspace.reading(path) as place:
        return workspace.absolute(place)


FILE_TOOLS: tuple[type[WorkspaceTool], ...] = (FileRead, FileList, FileSearch, FileWrite,
                                               FileEdit)
