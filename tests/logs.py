"""The log records of one of lace's loggers during a block, whatever earlier tests in the same
process did to the root logger's level or handlers (pytest's `caplog` listens at the root)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def records_of(name: str, level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    """The records logger `name` emits at `level` and above inside the block."""
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield logged
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)
