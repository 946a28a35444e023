"""lace: a task board for LLM agents, in one database (SQLite or PostgreSQL).

`lace.run(prompt, model=...)` runs a session from Python; `lace.open_board()` reads and changes
the board. They are imported on first use, so `import lace` (and `lace --help`) stays instant."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lace.core.version import __version__

if TYPE_CHECKING:
    from lace.api import (
        Board,
        OutputValidationError,
        Result,
        RunError,
        Usage,
        open_board,
        run,
        run_async,
    )
    from lace.core.errors import LaceError

__all__ = ["Board", "LaceError", "OutputValidationError", "Result", "RunError", "Usage",
           "__version__", "open_board", "run", "run_async"]


def __getattr__(name: str) -> Any:
    """The public API, imported when first asked for."""
    if name == "LaceError":
        from lace.core.errors import LaceError

        return LaceError
    if name in __all__:
        import lace.api

        return getattr(lace.api, name)
    raise AttributeError(f"module 'lace' has no attribute {name!r}")
