"""file_search's regular expressions: RE2, which matches in time linear in the text, so no
pattern can hold the process (Python's `re` backtracks: `(.*a){12}x` takes hours)."""

from __future__ import annotations

from typing import Protocol

import re2  # type: ignore[import-untyped]

from lace.tools.base import ToolError


class Pattern(Protocol):
    """A compiled RE2 expression, searched on the bytes of one line."""

    def search(self, text: bytes) -> object: ...


def compile_pattern(pattern: str) -> Pattern:
    """The compiled pattern, or a ToolError saying what RE2 refused and how to write it."""
    options = re2.Options()
    options.log_errors = False
    try:
        compiled: Pattern = re2.compile(pattern, options)
    except UnicodeEncodeError:
        raise ToolError(f"Bad regular expression {pattern!r}: it holds characters that are not "
                        "valid text (a lone surrogate).") from None
    except re2.error as error:
        problem = error.args[0].decode() if isinstance(error.args[0], bytes) \
            else str(error.args[0])
        feature = unsupported_feature(pattern, problem)
        if feature is not None:
            raise ToolError(f"Bad regular expression {pattern!r}: file_search uses RE2, "
                            f"which has no {feature} ({problem}). Search for a simpler "
                            "pattern and read the matches.") from None
        raise ToolError(f"Bad regular expression {pattern!r}: {problem}.") from None
    return compiled


def unsupported_feature(pattern: str, problem: str) -> str | None:
    """The Perl feature RE2 lacks that `problem` (RE2's complaint) is about, if any."""
    if "(?P=" in pattern or (problem.startswith("invalid escape sequence: \\")
                             and problem[-1:].isdigit()):
        return "backreferences (\\1, (?P=name))"
    if problem.startswith("invalid perl operator: (?") and \
            problem.endswith(("(?=", "(?!", "(?<=", "(?<!")):
        return "look-around ((?=...), (?!...), (?<=...), (?<!...))"
    return None
