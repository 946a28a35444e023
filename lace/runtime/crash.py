"""Deterministic crash points for recovery tests: with `LACE_CRASH_AT=<point>` the process
exits hard (no cleanup, like SIGKILL) the first time it passes that point."""

from __future__ import annotations

import os

POINTS = ("after_inbox_consume", "after_model_reply", "after_tool_effect", "after_turn_end")
CRASH_EXIT_CODE = 137


def crash_point(name: str) -> None:
    """Exit at once if `LACE_CRASH_AT` names this point."""
    if os.environ.get("LACE_CRASH_AT") == name:
        os._exit(CRASH_EXIT_CODE)
