"""Headless progress: one stderr line per spawn, tool call, tool error, completion or failure,
with credential values masked."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, TextIO

from lace.cli.approvals import SEE_ALL
from lace.core.ids import root_of
from lace.core.lines import settled_line
from lace.core.secrets import mask
from lace.core.shown import shown
from lace.core.text import MAX_NESTING, json_nesting, printable
from lace.paths import credential_values
from lace.runtime.events import (
    ApprovalRequested,
    EventAppended,
    RuntimeEvent,
    Subscriber,
    ThreadSpawned,
    TurnFailed,
    Warned,
)


def approval_line(event: ApprovalRequested, timeout_s: float | None = None,
                  db_flag: str = "") -> str:
    """The one line that says which agent waits for the person's answer to run what, how long
    this process waits, and the exact commands that answer (with the command's `--db`)."""
    arguments = shown(mask(json.dumps(event.arguments, ensure_ascii=False),
                           credential_values()), 200, SEE_ALL)  # masked whole, then cut
    number = event.approval_id
    until = f" (denied after {timeout_s:g} s)" if timeout_s is not None else ""
    return (f"? approval #{number}: {event.thread_id} wants {event.tool}({arguments}); it waits "
            f"for your answer{until}: lace approve {number}{db_flag} (once), lace approve "
            f"{number} --session{db_flag} (for the session) or lace deny {number}{db_flag}")


def progress_printer(stream: TextIO | None = None, *, root_reported: bool = False,
                     approval_timeout_s: float | None = None, db_flag: str = "") -> Subscriber:
    """A bus subscriber that narrates the run; `root_reported` leaves a root's failure to the
    last line the command prints (`lace run`); an approval request names how long this process
    waits for it and the commands that answer it (`db_flag`: the database they name)."""

    def show(event: RuntimeEvent) -> None:
        line = None
        if isinstance(event, ApprovalRequested):
            line = approval_line(event, approval_timeout_s, db_flag)
        elif isinstance(event, ThreadSpawned):
            line = f"+ {event.thread_id} spawned ({event.model}) for {event.task_id}"
        elif isinstance(event, Warned):
            line = f"! {event.text}"
        elif isinstance(event, TurnFailed) and not (root_reported and is_root(event.thread_id)):
            line = f"! {event.thread_id} failed: {event.error}"
        elif isinstance(event, EventAppended):
            data = event.data
            if event.type == "tool_call":
                line = f"  {event.thread_id} → {describe_call(data)}"
            elif event.type == "tool_result" and data.get("is_error"):
                first = (str(data["message"]["content"]).splitlines() or [""])[0]
                line = f"  {event.thread_id} ✗ {data.get('tool_name')}: {first}"
            elif event.type == "error" and data.get("fallback_to"):
                line = f"~ {event.thread_id} {data.get('error')}"
            elif event.type == "notification" and data.get("kind") == "completion":
                settled = data.get("settled") or {str(data.get("task_id")): "completed"}
                line = f"  {event.thread_id} ← {settled_line(settled)}"
        if line:  # one write per line: events may come from two threads at once
            out = stream or sys.stderr
            line = mask(line, credential_values())
            out.write(printable(line, one_line=True) + "\n")  # model text never drives the terminal
            out.flush()

    return show


def is_root(thread_id: str) -> bool:
    return root_of(thread_id) == thread_id


def describe_call(call: dict[str, Any]) -> str:
    """A tool call in one short line, for progress output; arguments that are not JSON, or
    nested too deep to decode, are shown as sent."""

    arguments = str(call.get("arguments") or "{}")
    if json_nesting(arguments) <= MAX_NESTING:
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.dumps(json.loads(arguments), ensure_ascii=False)
    return f"{call.get('tool_name')}({arguments[:100]}{'…' if len(arguments) > 100 else ''})"
