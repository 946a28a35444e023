"""An OpenAI-compatible chat endpoint over aiohttp: the request the openai SDK sends and its
wording of a failure, without its import (a second of start-up here, spent on a thousand pydantic
models of which a chat call needs none)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp

from lace.llm.types import ModelError

MAX_CONNECTIONS = 1000
"""Connections one endpoint may open (and keep): enough for hundreds of agents at once."""
MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The most lace reads of one answer, or of one event of a streamed answer: room for the longest
reply lace keeps (`MAX_REPLY_CHARACTERS`) however its JSON escapes it; a reply of 100 MB, read
whole, took 544 MB of lace's memory."""
MISSING_KEY = ("Missing credentials. Please pass an `api_key`, or set the `OPENAI_API_KEY` "
               "environment variable.")


class RequestFailed(Exception):
    """A failed request, worded as the openai SDK words it: the HTTP status (None when no answer
    came) and the `error` object of the answer, when it had one."""

    def __init__(self, text: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(text)
        self.status_code, self.body = status, body


class AnswerTooLargeError(ModelError):
    """An answer past `MAX_ANSWER_BYTES`: no model replies so much, and asking again would
    bring the same."""

    def __init__(self) -> None:
        limit = MAX_ANSWER_BYTES // (1024 * 1024)
        super().__init__(f"AnswerTooLarge: the answer is more than {limit} MB; lace reads at "
                         f"most {limit} MB of one answer", transient=False)


class Endpoint:
    """One base URL and key (none for a local server), with a pool of kept-alive connections;
    made and used inside one running event loop (its connections belong to it)."""

    def __init__(self, base_url: str, api_key: str | None, organization: str | None,
                 timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Accept": "application/json", "Content-Type": "application/json",
                        "User-Agent": "lace"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        if organization:
            self.headers["OpenAI-Organization"] = organization
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout_s,
                                          sock_read=timeout_s))

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        """The decoded JSON answer to one request."""
        response = await self._send(path, body)
        answer = bytearray()
        try:
            with _as_the_sdk_words_it():
                async for piece in response.content.iter_chunked(64 * 1024):
                    answer += piece
                    if len(answer) > MAX_ANSWER_BYTES:
                        response.close()  # the rest is never read: the connection goes
                        raise AnswerTooLargeError
        finally:
            response.release()
        return json.loads(answer)

    async def stream(self, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """The answer to a streamed request, its status checked; read it with `chunks`."""
        return await self._send(path, body)

    async def close(self) -> None:
        await self.session.close()

    async def _send(self, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
        with _as_the_sdk_words_it():
            response = await self.session.post(self.base_url + path, headers=self.headers,
                                               data=json.dumps(body))
        if response.status >= 400:
            text = (await response.text(errors="replace")).strip()
            response.release()
            raise status_failure(response.status, text)
        return response


@contextmanager
def _as_the_sdk_words_it() -> Iterator[None]:
    """A timeout or a broken connection before the answer is whole, as the SDK reports it."""
    try:
        yield
    except TimeoutError:
        raise RequestFailed("Request timed out.") from None
    except (aiohttp.ClientError, OSError) as error:
        raise RequestFailed("Connection error.") from error


def status_failure(status: int, text: str) -> RequestFailed:
    """The SDK's error for an answer with a failing status: its JSON body shown as Python shows
    it (litellm sorts errors by that text), and the body's `error` object."""
    try:
        body = json.loads(text)
    except ValueError:
        return RequestFailed(text or f"Error code: {status}", status, text)
    error = body.get("error", body) if isinstance(body, dict) else body
    return RequestFailed(f"Error code: {status} - {body}", status, error)


async def chunks(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON chunks of a server-sent event stream until `[DONE]`; an event carrying an
    `error` raises it as the SDK does. The answer is released at the end."""
    try:
        async for data in _event_data(response.content):
            if data.startswith("[DONE]"):
                return
            chunk = json.loads(data)
            if isinstance(chunk, dict) and chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise RequestFailed(message if isinstance(message, str) and message
                                    else "An error occurred during streaming", None, error)
            yield chunk
    finally:
        response.release()


async def _event_data(content: aiohttp.StreamReader) -> AsyncIterator[str]:
    """The `data` of each event: its `data:` lines joined, sent at the blank line that ends it.
    Lines are cut here, not by aiohttp's `readline`, which refuses a line past its buffer limit
    (a tool call of a few megabytes arrives as one line)."""
    data: list[str] = []
    async for line in _lines(content):
        if not line:
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[str]:
    pending = bytearray()
    async for piece in content.iter_any():
        pending += piece
        if b"\n" not in piece:
            if len(pending) > MAX_ANSWER_BYTES:
                raise AnswerTooLargeError
            continue
        *complete, rest = bytes(pending).split(b"\n")
        pending = bytearray(rest)
        for line in complete:
            yield line.decode("utf-8", errors="replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", errors="replace").rstrip("\r")
