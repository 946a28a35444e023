"""The workspace: every path an agent names is resolved inside it without races, or refused;
lace's own files and git's are never written; tools that act on it run outside the database,
after the approval policy allowed them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, Protocol, TypeVar

from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError
from lace.tools.protection import SECRET, Protection
from lace.tools.workspace_paths import Location, located

T = TypeVar("T")
P = ParamSpec("P")


class EditorFiles(Protocol):
    """An editor that holds the workspace's files (ACP's `fs/*`): file tools read and write
    its buffers, unsaved changes included, instead of the disk, once the path passed the
    workspace's checks. Its methods raise ToolError with what went wrong."""

    @property
    def reads(self) -> bool:
        """The editor reads files for lace (`fs.readTextFile`)."""
        ...

    @property
    def writes(self) -> bool:
        """The editor writes files for lace (`fs.writeTextFile`)."""
        ...

    async def read(self, path: str) -> str:
        """The text of the file at the absolute `path`."""
        ...

    async def write(self, path: str, content: str) -> None:
        """Replace the file at the absolute `path` with `content`."""
        ...


@dataclass(frozen=True)
class Workspace:
    """The folder the tools act in, what in it the file tools must never write, and the editor
    whose buffers they use, if any."""

    folder: Path
    protection: Protection = field(default_factory=Protection)
    editor: EditorFiles | None = None

    @classmethod
    def for_lace(cls, folder: Path, *, database_url: str | None,
                 protected_paths: Sequence[str] = (),
                 editor: EditorFiles | None = None) -> Workspace:
        """A workspace that also protects lace's database, home and configuration files, and
        the `[tools] protected_paths`."""
        return cls(folder, Protection.for_lace(folder, database_url=database_url,
                                               protected_paths=protected_paths), editor)

    def absolute(self, place: Location) -> str:
        """The absolute path of a place the checks led to (for the editor)."""
        return str(self.folder.resolve().joinpath(*place.parts))

    def __fspath__(self) -> str:
        return str(self.folder)

    @contextlib.contextmanager
    def reading(self, path: str) -> Iterator[Location]:
        """Where `path` leads inside the workspace; a ToolError when it leaves it or a folder
        on the way is missing."""
        with located(self.folder, path) as place:
            if self.protection.secret(self.folder.resolve().joinpath(*place.parts)):
                raise ToolError(f"{path!r} is protected: {SECRET}. File tools never read it.")
            yield place

    def is_secret(self, relative: str) -> bool:
        """Whether the entry at `relative` (as a walk names it) is one of lace's secrets."""
        return self.protection.secret(self.folder.resolve() / relative)

    @contextlib.contextmanager
    def writing(self, path: str, *, make_folders: bool = True) -> Iterator[Location]:
        """Where a file tool may write `path` (missing folders created), or a ToolError that
        says why not, before anything is created."""

        root = self.folder.resolve()

        def refuse_protected(parts: tuple[str, ...]) -> None:
            why = self.protection.why(parts, root.joinpath(*parts))
            if why is not None:
                shown = "/".join(parts)
                alias = f" (that is {shown!r})" if shown != path.strip("/") else ""
                raise ToolError(f"{path!r}{alias} is protected: {why}. File tools never write "
                                "it; ask a person to change it.")

        with located(self.folder, path, refuse_protected if make_folders else None) as place:
            refuse_protected(place.parts)
            yield place


@dataclass(frozen=True)
class WorkspaceResult:
    """What a workspace tool returns, and which files it changed (relative paths)."""

    text: str
    files_changed: tuple[str, ...] = field(default=())
    is_error: bool = False


class DaemonThreads(ThreadPoolExecutor):
    """An executor that runs each call on a daemon thread of its own and never waits for them
    at shutdown: a call that never returns (a hung file system) cannot keep the process from
    ending, as it would in a ThreadPoolExecutor, which Python joins at exit."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:  # handed to whoever awaits the future
                future.set_exception(error)

        threading.Thread(target=run, name="lace-daemon", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: every thread is a daemon."""


FILE_THREADS = DaemonThreads()


def within(work: Callable[[], T], seconds: float | None) -> T | None:
    """`work()` on a daemon thread, or None when it takes longer than `seconds` (None: however
    long): a read a silent server or a locked file holds is left behind, never waited for."""
    try:
        return FILE_THREADS.submit(work).result(timeout=seconds)
    except FutureTimeout:
        return None


async def off_loop(work: Callable[[], T]) -> T:
    """Run blocking file work off the event loop, on a daemon thread."""
    return await asyncio.get_running_loop().run_in_executor(FILE_THREADS, work)


class WorkspaceTool(Tool):
    """A tool that acts on the workspace: `perform` runs off the event loop and the store's
    thread, then the runtime records its result."""

    async def perform(self, workspace: Workspace) -> WorkspaceResult:
        """Do the work; raise ToolError for input the model can fix."""
        raise NotImplementedError

    def run(self, tx: Tx, context: ToolContext) -> str:
        raise ToolError(f"{self.name} acts on a workspace and runs only inside an agent's turn.")
