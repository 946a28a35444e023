"""File and shell tools on a real temporary workspace: good input, bad input, escapes,
timeouts and huge output."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from lace.tools.base import ToolError
from lace.tools.registry import ToolRegistry
from lace.tools.workspace import Workspace, WorkspaceResult, WorkspaceTool


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 'hello'\n\nmain()\n")
    (root / "notes.md").write_text("\n".join(f"line {n}" for n in range(1, 301)) + "\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0binary")
    (tmp_path / "secret.txt").write_text("outside")
    return root


async def run(workspace: Path, tool: str, **arguments: Any) -> WorkspaceResult:
    parsed = ToolRegistry().parse(tool, arguments)
    assert isinstance(parsed, WorkspaceTool)
    return await parsed.perform(Workspace(workspace))


async def fails(workspace: Path, tool: str, fragment: str, **arguments: Any) -> None:
    with pytest.raises(ToolError) as caught:
        await run(workspace, tool, **arguments)
    assert fragment in str(caught.value), str(caught.value)


async def test_file_read_numbers_and_pages(workspace: Path) -> None:
    first = await run(workspace, "file_read", path="notes.md", limit=2)
    assert first.text == "     1\tline 1\n     2\tline 2\n… 298 more lines (read on with offset=3)"
    page = await run(workspace, "file_read", path="notes.md", offset=299)
    assert page.text == "   299\tline 299\n   300\tline 300"
    await fails(workspace, "file_read", "does not exist", path="missing.md")
    await fails(workspace, "file_read", "is a binary file of 17 bytes", path="logo.png")
    await fails(workspace, "file_read", "is a directory", path="src")


@pytest.mark.parametrize("path", ["../secret.txt", "src/../../secret.txt", "/etc/passwd",
                                  "~/.bashrc"])
async def test_paths_outside_the_workspace_are_refused(workspace: Path, path: str) -> None:
    for tool, extra in (("file_read", {}), ("file_write", {"content": "x"}),
                        ("file_list", {}), ("file_search", {"pattern": "x"})):
        with pytest.raises(ToolError, match=r"leaves the workspace|is absolute"):
            await run(workspace, tool, path=path, **extra)
    assert (workspace.parent / "secret.txt").read_text() == "outside"


async def test_a_symlink_out_of_the_workspace_is_refused(workspace: Path) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "link.txt")
    os.symlink(workspace.parent, workspace / "up")
    await fails(workspace, "file_read", "leaves the workspace", path="link.txt")
    await fails(workspace, "file_write", "leaves the workspace", path="up/secret.txt",
                content="overwritten")
    assert (workspace.parent / "secret.txt").read_text() == "outside"
    listed = (await run(workspace, "file_list")).text.splitlines()
    assert "link.txt" not in listed and "up/" not in listed


async def test_file_list_and_search(workspace: Path) -> None:
    assert (await run(workspace, "file_list", pattern="*.py")).text == "src/app.py"
    assert "src/" in (await run(workspace, "file_list")).text.splitlines()
    found = await run(workspace, "file_search", pattern=r"return '\w+'")
    assert found.text == "src/app.py:2: return 'hello'"
    assert (await run(workspace, "file_search", pattern="zzz")).text == "No matches."
    capped = (await run(workspace, "file_search", pattern="line", glob="*.md")).text
    assert capped.count("\n") == 100 and capped.endswith("narrow the search")
    await fails(workspace, "file_search", "Bad regular expression", pattern="(unclosed")


async def test_file_write_and_edit(workspace: Path) -> None:
    written = await run(workspace, "file_write", path="docs/new/readme.md", content="a\nb\n")
    assert written.files_changed == ("docs/new/readme.md",)
    assert (workspace / "docs/new/readme.md").read_text() == "a\nb\n"
    (workspace / "twice.txt").write_text("x = 1\nx = 1\n")
    await fails(workspace, "file_edit", "appears 2 times", path="twice.txt", old_text="x = 1",
                new_text="x = 2")
    await fails(workspace, "file_edit", "was not found", path="twice.txt", old_text="y = 1",
                new_text="y = 2")
    assert (workspace / "twice.txt").read_text() == "x = 1\nx = 1\n"
    edited = await run(workspace, "file_edit", path="twice.txt", old_text="x = 1",
                       new_text="x = 2", replace_all=True)
    assert edited.text == "Edited twice.txt: 2 replacement(s)."
    assert (workspace / "twice.txt").read_text() == "x = 2\nx = 2\n"
    await run(workspace, "file_edit", path="src/app.py", old_text="'hello'", new_text="'hi'")
    assert "'hi'" in (workspace / "src/app.py").read_text()


async def test_bash_reports_exit_codes_caps_output_and_kills_at_the_timeout(
        workspace: Path) -> None:
    ok = await run(workspace, "bash", command="ls src && echo done")
    assert ok.text == "app.py\ndone\n[exit code 0]" and not ok.is_error
    failed = await run(workspace, "bash", command="echo oops >&2; exit 3")
    assert failed.text == "oops\n[exit code 3]" and failed.is_error
    huge = await run(workspace, "bash", command="yes 0123456789 | head -c 200000")
    assert len(huge.text) < 31_000 and "characters cut" in huge.text
    marker = workspace / "survivor"
    started = time.monotonic()
    hung = await run(workspace, "bash", timeout_s=0.5,
                     command=f"(sleep 2; touch {marker}) & echo started; sleep 30")
    assert time.monotonic() - started < 5
    assert hung.is_error and "[killed after 0.5 s: timeout]" in hung.text
    assert "started" in hung.text
    time.sleep(2.5)
    assert not marker.exists()  # the whole process group was killed
