"""How a write undone by a concurrent writer is run again: how often at most, after how many
conflicts it runs alone, and the short random pause between attempts."""

from __future__ import annotations

import random
import time

MOST_ATTEMPTS = 50
"""Attempts of one write undone by conflicts before the last conflict is given to its caller:
each lost to a transaction that committed, so the board moves on, but a bug must not loop."""
ALONE_AFTER = 2
"""Conflicts after which a write runs alone (waiting for a busy database is no conflict)."""
FIRST_PAUSE_S = 0.001


def pause_before(conflicts: int) -> None:
    """A short random wait after a write's `conflicts`-th conflict, doubling up to about
    0.1 s, so the writers that met do not meet again."""
    time.sleep(random.uniform(0, FIRST_PAUSE_S * 2 ** min(conflicts, 7)))
