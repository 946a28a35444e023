"""Where a system prompt's shared part ends and the agent's own part begins: the shared part
(the board's rules, the profiles) is the same for every agent of a session with the same model
and tools, so a provider caches it once for all of them; the identity after it is not."""

from __future__ import annotations

from typing import Final

IDENTITY_HEADING: Final = "This agent:"
"""The line that starts a system prompt's per-agent part."""
_BOUNDARY: Final = f"\n\n{IDENTITY_HEADING}\n"


def shared_and_own(system_prompt: str) -> tuple[str, str]:
    """The system prompt split before its identity part: (shared, own); ("", whole) when it
    has none (a prompt lace did not write)."""
    shared, boundary, own = system_prompt.partition(_BOUNDARY)
    if not boundary:
        return "", system_prompt
    return shared, boundary.lstrip("\n") + own
