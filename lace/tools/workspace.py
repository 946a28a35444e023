"""The workspace: every path an agent names is resolved inside it, or refused; tools that act
on it run outside the database, after the approval policy allowed them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lace.store import Tx
from lace.tools.base import Tool, ToolContext, ToolError

BINARY_PROBE = 8192


@dataclass(frozen=True)
class WorkspaceResult:
    """What a workspace tool returns, and which files it changed (relative paths)."""

    text: str
    files_changed: tuple[str, ...] = field(default=())
    is_error: bool = False


def inside(workspace: Path, path: str) -> Path:
    """`path` resolved inside the workspace (symlinks followed), or a ToolError."""
    if not path.strip():
        raise ToolError("Give a path relative to the workspace, e.g. notes/plan.md.")
    if "\0" in path:
        raise ToolError(f"{path!r} holds a NUL character, which no file name can contain.")
    if Path(path).is_absolute() or path.startswith("~"):
        raise ToolError(f"{path!r} is absolute; paths are relative to the workspace.")
    root = workspace.resolve()
    resolved = (root / path).resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolError(f"{path!r} leaves the workspace (through '..' or a symlink); "
                        "stay inside it.")
    return resolved


def relative(workspace: Path, path: Path) -> str:
    """A path as the agent should see it: relative to the workspace."""
    return str(path.relative_to(workspace.resolve())) or "."


def is_binary(path: Path) -> bool:
    """A file whose first bytes hold a NUL or are not UTF-8 text."""
    with path.open("rb") as stream:
        head = stream.read(BINARY_PROBE)
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start < len(head) - 4  # a multi-byte character cut by the probe is fine
    return False


class WorkspaceTool(Tool):
    """A tool that acts on the workspace: `perform` runs off the event loop and the store's
    thread, then the runtime records its result."""

    async def perform(self, workspace: Path) -> WorkspaceResult:
        """Do the work; raise ToolError for input the model can fix."""
        raise NotImplementedError

    def run(self, tx: Tx, context: ToolContext) -> str:
        raise ToolError(f"{self.name} acts on a workspace and runs only inside an agent's turn.")
