"""The most lace reads of one answer from a provider (`MAX_ANSWER_BYTES`), the error past it,
and finding that error inside what an HTTP client wrapped it in. Both ways lace calls models
read with it: the openai SDK's transport (`openai_transport`) and litellm's
(`litellm_transport`)."""

from __future__ import annotations

from lace.llm.types import ModelError

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The most lace reads of one answer, or of one line of a streamed answer on the openai path:
room for the longest reply lace keeps (`MAX_REPLY_CHARACTERS`) however its JSON escapes it; a
reply of 100 MB, read whole, took 544 MB of lace's memory."""
MAX_STREAMED_CHUNKS = 131_072
"""The most chunks lace takes of one answer streamed through litellm: litellm keeps every chunk
(4 to 6 KB of memory each, and CPU), so 16 MB of small chunks took 740 MB and 80 s of a core,
and this many 530 MB and 40 s. Room for the longest replies (about 128,000 tokens) at one
token per chunk."""


class AnswerTooLargeError(ModelError):
    """An answer past a limit (`MAX_ANSWER_BYTES` by default): no model replies so much, and
    asking again would bring the same."""

    def __init__(self, limit: str = f"{MAX_ANSWER_BYTES // (1024 * 1024)} MB") -> None:
        super().__init__(f"AnswerTooLarge: the answer is more than {limit}; lace reads at "
                         f"most {limit} of one answer", transient=False)


def too_large(error: BaseException) -> AnswerTooLargeError | None:
    """The `AnswerTooLargeError` somewhere in an error's chain of causes (an HTTP client wraps
    what reading an answer raised in its own connection error)."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, AnswerTooLargeError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
