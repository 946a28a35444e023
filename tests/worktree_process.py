"""`lace` in a child process whose `scripted/root` delegates one task to `scripted/helper`, which
writes a.txt, then b.txt, then completes (`python -m tests.worktree_process run ...`, with
`LACE_TEST_PROVIDERS=1`), so a crash point can cut the helper off between its two writes."""

from __future__ import annotations

import sys
from typing import Any

from lace.cli import main
from lace.llm.demo import completed_calls
from lace.llm.scripted import install_script
from lace.llm.types import ScriptedReply
from tests.scripted import assigned_task, reply

FILES = ("a.txt", "b.txt")


def helper(messages: list[dict[str, Any]]) -> ScriptedReply:
    """Each write made again if a crash cut it off, then the completion."""
    done = completed_calls(messages)
    written = done.count("file_write")
    if written < len(FILES):
        name = FILES[written]
        return reply(None, ("file_write", {"path": name, "content": f"{name}\n"}))
    if "task_complete" not in done:
        return reply(None, ("task_complete", {"task_id": assigned_task(messages),
                                              "message": "wrote both files"}))
    return reply("finished")


def root(messages: list[dict[str, Any]]) -> ScriptedReply:
    if "delegate" not in completed_calls(messages):
        return reply(None, ("delegate", {"tasks": [{
            "title": "Write two files", "prompt": "Write a.txt, then b.txt.",
            "expected_response": "done", "assigned_to": "new:scripted/helper"}]}))
    return reply(str(messages[-1].get("content")))


def script(model: str, messages: list[dict[str, Any]]) -> ScriptedReply:
    return root(messages) if model == "root" else helper(messages)


if __name__ == "__main__":
    install_script(script)
    sys.exit(main(sys.argv[1:]))
