"""The most lace reads of one answer from a provider (`MAX_ANSWER_BYTES`), the error past it,
and finding that error inside what an HTTP client wrapped it in. Both ways lace calls models
read with it: the openai SDK's transport (`openai_transport`) and litellm's
(`litellm_transport`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import TypeVar

from lace.core.usage import ANSWER_TOO_LARGE
from lace.llm.types import ModelError

T = TypeVar("T")

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The most lace reads of one answer, or of one line of a streamed answer on the openai path:
room for the longest reply lace keeps (`MAX_REPLY_CHARACTERS`) however its JSON escapes it; a
reply of 100 MB, read whole, took 544 MB of lace's memory."""
MAX_STREAMED_CHUNKS = 131_072
"""The most chunks lace takes of one streamed answer (on the openai path too, where a stream
that did not end went on for good). Through litellm the stream is also held to
`MAX_ANSWER_BYTES` in all: litellm keeps every chunk (4 to 6 KB of memory each) and adds
each chunk's text to all the text before it (CPU that grows with the square of the text), so
16 MB of small chunks took 740 MB and 80 s of a core, this many chunks 530 MB and 40 s, 16 MB
of 1 KB deltas 200 MB and 50 s. Room for a reply of 128,000 tokens at one token a chunk (the
16 MB hold some 80,000 chunks of OpenAI's format, 130,000 of Anthropic's)."""


class AnswerTooLargeError(ModelError):
    """An answer past a limit (`MAX_ANSWER_BYTES` by default): no model replies so much, and
    asking again would bring the same."""

    def __init__(self, limit: str = f"{MAX_ANSWER_BYTES // (1024 * 1024)} MB") -> None:
        super().__init__(f"{ANSWER_TOO_LARGE}: the answer is more than {limit}; lace reads at "
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


async def capped_chunks(stream: AsyncIterable[T]) -> AsyncIterator[T]:
    """The chunks of a streamed answer, refused past `MAX_STREAMED_CHUNKS`, with the event loop
    let run after each (a stream read ahead would hold it: other agents and the app wait)."""
    taken = 0
    async for chunk in stream:
        if taken == MAX_STREAMED_CHUNKS:
            raise AnswerTooLargeError(f"{MAX_STREAMED_CHUNKS:,} chunks")
        taken += 1
        yield chunk
        await asyncio.sleep(0)
