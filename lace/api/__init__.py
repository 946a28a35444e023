"""lace as a Python library: `run` and `run_async` start a session and return its `Result`;
`open_board` reads and changes the board as the command line does."""

from lace.api.board import Board, open_board
from lace.api.output import OutputValidationError
from lace.api.result import Result, Usage
from lace.api.running import RunError, run, run_async

__all__ = ["Board", "OutputValidationError", "Result", "RunError", "Usage", "open_board", "run",
           "run_async"]
