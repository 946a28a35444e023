"""What lace starts (`bash` commands, stdio MCP servers) runs in a process group of its own under
a keeper (`lace.tools.keeper`) that ends the group if lace dies; each call ends its own group,
and whatever is left when lace exits is killed (`kill_running_commands`), so nothing lace
started outlives it. Kept apart from the tool, without asyncio, so that lace's exit imports it
cheaply."""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

_live_groups: dict[int, int] = {}
"""Process groups of calls still running, each with the pid of the lace process that started
it: killed at that process's exit if no call's own cleanup could run."""
KEEPER = str(Path(__file__).with_name("keeper.py"))


def kept(command: Sequence[str]) -> list[str]:
    """The command line that runs `command` under a keeper; start it in a new session (its
    own process group), from a thread that lives as long as lace: on Linux the keeper's
    parent-death signal comes when the thread that started it ends."""
    return [sys.executable, "-I", "-S", KEEPER, str(os.getpid()), *command]


def track_group(group: int) -> None:
    """Note a command's process group until its call ends it (`untrack_group`)."""
    _live_groups[group] = os.getpid()


def untrack_group(group: int) -> None:
    """The group is ended: nothing to kill at exit."""
    _live_groups.pop(group, None)


def signal_group(group: int, signal_number: int) -> bool:
    """Send a signal to a process group; False when no process of it is left."""
    try:
        os.killpg(group, signal_number)
    except ProcessLookupError:
        return False
    except PermissionError:  # only a process that changed its user is left: out of reach
        return False
    return True


@atexit.register
def kill_running_commands() -> None:
    """SIGKILL every command still running: run by `atexit`, and called by `lace`'s own exit
    (`lace.cli.leave`), which leaves with `os._exit` and so skips `atexit`."""
    for group, owner in list(_live_groups.items()):
        if owner == os.getpid():  # a forked child exiting leaves its parent's commands alone
            signal_group(group, signal.SIGKILL)
