"""Deterministic crash points for recovery tests: with `LACE_CRASH_AT=<point>` the process
exits hard (no cleanup, like SIGKILL) the first time it passes that point, with
`LACE_CRASH_AT=<point>@<N>` the N-th time (a later stage of a run)."""

from __future__ import annotations

import os

POINTS = ("after_inbox_consume", "after_model_reply", "after_tool_effect", "after_turn_end")
CRASH_EXIT_CODE = 137
_passed: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Exit at once if `LACE_CRASH_AT` names this point (and this is its N-th pass)."""
    wanted = os.environ.get("LACE_CRASH_AT")
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] >= int(nth or 1):
        os._exit(CRASH_EXIT_CODE)
