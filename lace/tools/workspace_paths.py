"""Paths resolved inside the workspace one component at a time, each opened with O_NOFOLLOW
relative to the folder before it, so a folder swapped for a symlink mid-call cannot lead out
(symlinks are followed by hand, only while they stay inside); only regular files are opened,
without blocking, and files are replaced through a new file, never written in place."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lace.tools.base import ToolError

MAX_STEPS = 4096
"""Components, symlinks followed and second looks after a change, in all, for one path."""
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CHANGED = (errno.ELOOP, errno.ENOTDIR, errno.ENOENT)
"""What opening an entry raises when it changed (into a symlink, or away) since it was looked at."""
KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


@dataclass(frozen=True)
class Location:
    """Where a path led: an open folder of the workspace, the entry's name in it ("" for the
    folder itself), and the components of the entry's real path relative to the workspace."""

    folder_fd: int
    name: str
    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        """The real path as the agent should see it."""
        return "/".join(self.parts) or "."

    def entry(self) -> os.stat_result | None:
        """The entry's own status (a symlink is not followed), or None when there is none."""
        if not self.name:
            return os.fstat(self.folder_fd)
        try:
            return os.stat(self.name, dir_fd=self.folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None


def refuse_unusable(path: str) -> None:
    """Refuse a path that cannot name anything inside the workspace."""
    if not path.strip():
        raise ToolError("Give a path relative to the workspace, e.g. notes/plan.md.")
    if "\0" in path:
        raise ToolError(f"{path!r} holds a NUL character, which no file name can contain.")
    if path.startswith(("/", "~")):
        raise ToolError(f"{path!r} is absolute; paths are relative to the workspace.")


def leaves(path: str) -> ToolError:
    return ToolError(f"{path!r} leaves the workspace (through '..' or a symlink); stay inside it.")


@contextlib.contextmanager
def located(root: Path, path: str,
            make_folder: Callable[[tuple[str, ...]], None] | None = None) -> Iterator[Location]:
    """Resolve `path` inside `root`; missing folders on the way are an error, or created when
    `make_folder` is given (it sees each one's parts first and may refuse)."""
    refuse_unusable(path)
    root_real = os.path.realpath(root)
    folders, parts = [os.open(root_real, FOLDER_FLAGS)], list[str]()
    try:
        name = _walk(path, root_real, folders, parts, make_folder)
        yield Location(folders[-1], name, (*parts, name) if name else tuple(parts))
    finally:
        for fd in folders:
            os.close(fd)


def _walk(path: str, root_real: str, folders: list[int], parts: list[str],
          make_folder: Callable[[tuple[str, ...]], None] | None) -> str:
    """Open each folder of `path` in turn (pushed on `folders` and `parts`); return the last
    component's name, or "" when the path ends at a folder through '..'."""
    pending = _components(path)[::-1]
    for _ in range(MAX_STEPS):
        if not pending:
            return ""
        part = pending.pop()
        if part == "..":
            if not parts:
                raise leaves(path)
            os.close(folders.pop())
            parts.pop()
            continue
        try:
            info: os.stat_result | None = os.stat(part, dir_fd=folders[-1],
                                                  follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            pending += _link_components(path, part, root_real, folders, parts)[::-1]
        elif not pending:
            return part
        elif not _enter(path, part, info, folders, parts, make_folder):
            pending.append(part)
    raise ToolError(f"{path!r} could not be resolved: too many symlinks, or it kept changing "
                    "while it was being read.")


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _enter(path: str, part: str, info: os.stat_result | None, folders: list[int],
           parts: list[str], make_folder: Callable[[tuple[str, ...]], None] | None) -> bool:
    """Step into the folder `part` of the current one; False when it must be looked at again
    (just created, or changed since it was looked at)."""
    if info is None:
        if make_folder is None:
            raise _missing(path)
        make_folder((*parts, part))
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, dir_fd=folders[-1])
        return False
    if not stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{path!r} goes through {'/'.join((*parts, part))!r}, which is not a "
                        "folder.")
    try:
        folders.append(os.open(part, FOLDER_FLAGS, dir_fd=folders[-1]))
    except OSError as error:
        if error.errno not in CHANGED:
            raise
        return False
    parts.append(part)
    return True


def _link_components(path: str, part: str, root_real: str, folders: list[int],
                     parts: list[str]) -> list[str]:
    """The components a symlink stands for, from the folder it is in (an absolute target
    inside the workspace restarts from its top); a target outside is refused."""
    try:
        target = os.readlink(part, dir_fd=folders[-1])
    except OSError as error:  # no longer a symlink: look again
        if error.errno in (errno.EINVAL, errno.ENOENT):
            return [part]
        raise
    if not target.startswith("/"):
        return _components(target)
    if target != root_real and not target.startswith(root_real.rstrip("/") + "/"):
        raise leaves(path)
    while len(folders) > 1:
        os.close(folders.pop())
    parts.clear()
    return _components(target[len(root_real):])


def _missing(path: str) -> ToolError:
    return ToolError(f"{path!r} does not exist; file_list shows what is there.")


def kind_of(mode: int) -> str | None:
    """What a non-regular, non-folder entry is ("a FIFO", ...), or None."""
    return next((kind for test, kind in KINDS if test(mode)), None)


def refuse_unless_regular(info: os.stat_result | None, shown: str, *, writing: bool) -> None:
    """Refuse anything but a regular file, saying what it is."""
    if info is None:
        if not writing:
            raise _missing(shown)
        return
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown!r} is a folder; give a file's path." if writing
                        else f"{shown!r} is a directory; use file_list.")
    if not stat.S_ISREG(info.st_mode):
        kind = kind_of(info.st_mode) or "not a regular file"
        raise ToolError(f"{shown!r} is {kind}; file tools read and write only regular files.")


def open_regular(place: Location, shown: str) -> tuple[int, os.stat_result]:
    """An open regular file with one link, checked without blocking: the entry is looked at
    first, then opened with O_NONBLOCK and O_NOFOLLOW and looked at again."""
    refuse_unless_regular(place.entry(), shown, writing=False)
    try:
        fd = os.open(place.name, FILE_FLAGS, dir_fd=place.folder_fd)
    except OSError as error:
        if error.errno in CHANGED:
            raise ToolError(f"{shown!r} changed while it was being opened; try again.") from None
        raise
    try:
        info = os.fstat(fd)
        refuse_unless_regular(info, shown, writing=False)
        if info.st_nlink > 1:
            raise ToolError(f"{shown!r} has {info.st_nlink} hard links, and another may be "
                            "outside the workspace, so file tools do not read or edit it "
                            "(file_write replaces it with a file of its own).")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_folder(place: Location, shown: str) -> int:
    """A new descriptor of the folder at the location (O_NOFOLLOW: a swapped symlink fails)."""
    if not place.name:
        return os.dup(place.folder_fd)
    info = place.entry()
    if info is None:
        raise _missing(shown)
    if not stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown!r} is not a folder of the workspace.")
    try:
        return os.open(place.name, FOLDER_FLAGS, dir_fd=place.folder_fd)
    except OSError as error:
        if error.errno in CHANGED:
            raise ToolError(f"{shown!r} changed while it was being opened; try again.") from None
        raise


def replace_file(place: Location, data: bytes, shown: str) -> None:
    """Put `data` at the location through a new file renamed over the name, so an inode
    shared with another name (a hard link) is never written; an existing file keeps its mode."""
    if not place.name:
        raise ToolError(f"{shown!r} is a folder; give a file's path.")
    existing = place.entry()
    refuse_unless_regular(existing, shown, writing=True)
    temporary = f".lace-tmp-{secrets.token_hex(8)}"
    fd = os.open(temporary, NEW_FILE_FLAGS, 0o666, dir_fd=place.folder_fd)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            if existing is not None:
                os.fchmod(stream.fileno(), stat.S_IMODE(existing.st_mode))
        os.rename(temporary, place.name, src_dir_fd=place.folder_fd,
                  dst_dir_fd=place.folder_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=place.folder_fd)
        raise
