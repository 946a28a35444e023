"""Reading the workspace in bounded pieces: text files line by line (never whole), folders
walked without following symlinks or racing with a swap."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Generator, Iterator
from typing import BinaryIO

from lace.tools.base import ToolError
from lace.tools.workspace import Workspace
from lace.tools.workspace_paths import open_folder, open_regular

LINE_WIDTH = 400
LINE_BYTES = 4 * LINE_WIDTH
"""Bytes of a line kept for showing; the rest of a longer line is read past, not kept."""
SKIP_BYTES = 2**16
COUNT_AHEAD = 2**20
"""After a page, file_read counts the lines left only within this many bytes."""
BINARY_PROBE = 8192


@contextlib.contextmanager
def text_file(workspace: Workspace, path: str) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """A regular text file of the workspace, open for reading (at its start)."""
    with workspace.reading(path) as place:
        fd, info = open_regular(place, path)
    with os.fdopen(fd, "rb") as stream:
        if is_binary(stream.read(BINARY_PROBE)):
            raise ToolError(f"{path!r} is a binary file of {info.st_size:,} bytes; it is not "
                            "shown as text.")
        stream.seek(0)
        yield stream, info


def is_binary(head: bytes) -> bool:
    """Whether a file's first bytes hold a NUL or are not UTF-8 text."""
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start < len(head) - 4  # a multi-byte character cut by the probe is fine
    return False


def shown_line(raw: bytes) -> str:
    """A line as a tool shows it: decoded, without its line ending, cut at LINE_WIDTH."""
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")[:LINE_WIDTH]


def next_line(stream: BinaryIO) -> bytes | None:
    """The next line's first LINE_BYTES (the rest is skipped), or None at the end."""
    raw = stream.readline(LINE_BYTES)
    if not raw:
        return None
    if len(raw) == LINE_BYTES and not raw.endswith(b"\n"):
        while (tail := stream.readline(SKIP_BYTES)) and not tail.endswith(b"\n"):
            pass
    return raw


def lines_left(stream: BinaryIO, size: int) -> int | None:
    """How many lines follow, counted within COUNT_AHEAD bytes; None when there are more."""
    ahead = stream.read(COUNT_AHEAD)
    if stream.tell() < size:
        return None
    return ahead.count(b"\n") + (bool(ahead) and not ahead.endswith(b"\n"))


def walk(workspace: Workspace, path: str, *,
         files_only: bool) -> Generator[tuple[str, str, int], None, None]:
    """Each entry under a folder of the workspace (or the one file `path` names), as (its
    path relative to the workspace, its name, the descriptor of its folder), folders first
    and in name order; symlinks are not followed and folders are opened without races."""
    with workspace.reading(path) as place:
        info = place.entry()
        if files_only and place.name and info is not None and stat.S_ISREG(info.st_mode):
            yield place.relative, place.name, place.folder_fd
            return
        top = open_folder(place, path)
        prefix = "/".join(place.parts)
    try:
        for folder, folders, files, folder_fd in os.fwalk(".", dir_fd=top):
            folders.sort()
            inner = folder.removeprefix(".").lstrip("/")
            base = "/".join(part for part in (prefix, inner) if part)
            folders[:] = [name for name in folders
                          if not workspace.is_secret(f"{base}/{name}" if base else name)]
            for name in ([] if files_only else folders) + sorted(files):
                relative = f"{base}/{name}" if base else name
                if not workspace.is_secret(relative):
                    yield relative, name, folder_fd
    finally:
        os.close(top)


def listed(workspace: Workspace, relative: str, name: str, folder_fd: int) -> str | None:
    """How file_list shows an entry: folders end in `/`; a symlink only when it stays inside."""
    try:
        info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        try:
            with workspace.reading(relative) as place:
                target = place.entry()
        except ToolError:
            return None
        info = target or info
    return relative + "/" if stat.S_ISDIR(info.st_mode) else relative
