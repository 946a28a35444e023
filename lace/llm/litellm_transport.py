"""Every answer litellm reads for lace is read with a limit (`limited_http`), the whole answer,
streamed or not: litellm keeps every chunk of a stream, so a stream's lines are no bound
(`MAX_STREAMED_CHUNKS` bounds its chunks). litellm takes no transport of the caller's for all its
providers (`client=` is of a different type per provider), but builds every async transport,
for its own HTTP handler and for the openai SDK it wraps, in one factory:
`AsyncHTTPHandler.create_async_transport`. `read_with_limit` wraps that factory; the transport
keeps its class beneath (litellm checks it when it closes a session of another event loop).
litellm is imported only when `read_with_limit` runs (`litellm_setup` calls it)."""

from __future__ import annotations

import functools
from typing import Any

import httpx

from lace.llm.limited_http import limited


class _ReadWithLimit(httpx.AsyncBaseTransport):
    """Put before a transport class: its answers are read with the limit."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        return limited(response, request, by_line=False)


class LimitedHttpxTransport(_ReadWithLimit, httpx.AsyncHTTPTransport):
    """httpx's transport (litellm's with `DISABLE_AIOHTTP_TRANSPORT`, HTTP/2 or IPv4 only),
    answers read with the limit."""


@functools.cache
def _limited_kinds() -> tuple[tuple[type, type], ...]:
    """Each transport class litellm makes, with its subclass that reads with the limit."""
    from litellm.llms.custom_httpx.aiohttp_transport import LiteLLMAiohttpTransport

    class LimitedAiohttpTransport(_ReadWithLimit, LiteLLMAiohttpTransport):  # type: ignore[misc]
        """litellm's aiohttp transport (its default), answers read with the limit."""

    return ((LiteLLMAiohttpTransport, LimitedAiohttpTransport),
            (httpx.AsyncHTTPTransport, LimitedHttpxTransport))


def read_with_limit() -> None:
    """Make litellm's factory of async transports (and of the transports through a proxy of
    the environment, beside httpx's) give transports that read with the limit (once;
    litellm's clients are made on first use, after this)."""
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    factory = AsyncHTTPHandler.create_async_transport
    if getattr(factory, "reads_with_limit", False):
        return

    def limited_transport(*args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        return with_limit(factory(*args, **kwargs))

    def limited_proxies(transport: Any, *args: Any, **kwargs: Any) -> Any:
        mounts = proxies(transport, *args, **kwargs)
        return None if mounts is None else {
            pattern: None if mount is None else with_limit(mount)
            for pattern, mount in mounts.items()}

    proxies = AsyncHTTPHandler.create_httpx_proxy_mounts
    limited_transport.reads_with_limit = True  # type: ignore[attr-defined]
    AsyncHTTPHandler.create_async_transport = staticmethod(limited_transport)
    AsyncHTTPHandler.create_httpx_proxy_mounts = staticmethod(limited_proxies)


def with_limit(transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncBaseTransport:
    """`transport` (litellm's; None is httpx's own, with litellm's certificates) made to read
    with the limit."""
    if transport is None:
        from litellm.llms.custom_httpx.http_handler import get_ssl_configuration, http2_enabled

        return LimitedHttpxTransport(verify=get_ssl_configuration(), http2=http2_enabled())
    if isinstance(transport, _ReadWithLimit):
        return transport
    for plain, read_limited in _limited_kinds():
        if type(transport) is plain:
            transport.__class__ = read_limited
            return transport
    raise TypeError(f"litellm made a transport lace cannot limit: {type(transport).__name__}")
