"""The board from Python: `lace.open_board()` gives the `Board` the command line reads."""

from lace.runtime.board import Board, TaskPage, ThreadView, open_board

__all__ = ["Board", "TaskPage", "ThreadView", "open_board"]
