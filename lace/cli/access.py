"""The listening sockets and tokens of lace's network front ends (`lace web`, `lace mcp serve
--http`). A token is the person's own from the environment, else one made once with
`secrets.token_urlsafe` and kept in lace's home (`tokens/web`, `tokens/mcp`: 0600 in a 0700
folder) for the next start. Another local user can reach a loopback port; without the token
they get 401."""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from lace.core.errors import LaceError
from lace.paths import add_credential_values, private_folder, tokens_folder

TOKEN_SHAPE = re.compile(r"[A-Za-z0-9._~-]{16,256}")
"""What a token may be: safe as it stands in a URL, a header and a cookie, and not guessable
by being short."""
MADE_BYTES = 32
"""Random bytes in a token lace makes (43 characters)."""


@dataclass(frozen=True)
class AccessToken:
    """A front end's token, and where it came from: the environment variable, or the file."""

    value: str
    variable: str
    kept_in: Path | None

    def admits(self, given: str | None) -> bool:
        """Whether `given` is the token, compared in constant time."""
        if given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.value.encode())


def access_token(front_end: str, variable: str) -> AccessToken:
    """`$variable` if set (checked for shape, one line if bad); else the token kept for
    `front_end`, made and kept now if there is none (or the kept one is not private)."""
    own = os.environ.get(variable)
    if own:
        if not TOKEN_SHAPE.fullmatch(own):
            raise LaceError(f"{variable} must be 16 to 256 letters, digits, '.', '_', '~' or "
                            f"'-'; unset it and lace makes one")
        return AccessToken(own, variable, None)
    path = tokens_folder() / front_end
    try:
        value = _kept_token(path)
    except OSError as error:
        raise LaceError(f"cannot keep the token in {path}: "
                        f"{error.strerror or error}") from None
    add_credential_values([value])  # masked in every log line, as the variable's would be
    return AccessToken(value, variable, path)


def _private_folder(folder: Path) -> int:
    """The folder (and lace's home above it) made 0700 if missing, opened without following
    a link; refused unless it is this user's. Its descriptor."""
    private_folder(folder)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    info = os.fstat(descriptor)
    if info.st_uid != os.getuid():
        os.close(descriptor)
        raise LaceError(f"{folder} belongs to another user; lace keeps its tokens only in a "
                        "folder of yours")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.fchmod(descriptor, 0o700)
    return descriptor


def _kept_token(path: Path) -> str:
    """The token in `path`, or a new one written there (0600, never through a link). Two
    processes starting at once keep one token."""
    folder = _private_folder(path.parent)
    try:
        kept = _read_private(path.name, folder)
        if kept:
            return kept
        made = secrets.token_urlsafe(MADE_BYTES)
        draft = f".{path.name}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(draft, dir_fd=folder)
        written = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                          dir_fd=folder)
        with os.fdopen(written, "w") as stream:
            stream.write(made + "\n")
        try:
            os.link(draft, path.name, src_dir_fd=folder, dst_dir_fd=folder,
                    follow_symlinks=False)
        except FileExistsError:
            kept = _read_private(path.name, folder)  # another process's, or one to replace
            if kept:
                os.unlink(draft, dir_fd=folder)
                return kept
            os.replace(draft, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            return made
        os.unlink(draft, dir_fd=folder)
        return made
    finally:
        os.close(folder)


def _read_private(name: str, folder: int) -> str | None:
    """The token in `name` if it is a regular file of this user's that no one else may read
    and holds a token; else None (a link, a shared file or junk is replaced)."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError:  # a link (ELOOP) or worse: not a token of ours
        return None
    with os.fdopen(descriptor, "rb") as stream:
        info = os.fstat(stream.fileno())
        private = (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
                   and not info.st_mode & 0o077)
        text = stream.read(1024).decode("ascii", "replace").strip()
    return text if private and TOKEN_SHAPE.fullmatch(text) else None


def listening_socket(host: str, port: int, netloc: str) -> socket.socket:
    """A socket listening on `host`:`port` (`netloc` as a person writes it), opened before
    anything is served or announced, so that a port in use or an address this machine lacks
    is one line on stderr."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family)
    except OSError as error:
        why = (os.strerror(error.errno) if error.errno and error.errno > 0  # not its long text
               else "no address of that name")
        raise LaceError(f"cannot listen on {netloc}: {why}") from None
