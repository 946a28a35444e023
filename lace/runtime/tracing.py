"""The tracing seam: the runtime opens a span around each agent turn (`invoke_agent`), model call
(`chat`) and tool call (`execute_tool`) through a `Tracing`. The default, `NO_TRACING`, does
nothing and imports nothing; OpenTelemetry (`lace.runtime.otel`, the `lace[otel]` extra) is
loaded only when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set, so a
person who never asked for traces pays one no-op call per span (docs/tracing.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from lace.core.records import Agent
from lace.llm.types import ModelReply
from lace.runtime.database import AsyncStore
from lace.tools.base import ToolContext, ToolResult

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
MISSING = ("traces are off: {variable} is set, but the OpenTelemetry packages are not "
           "installed (pip install 'lace[otel]')")


class Span:
    """What the runtime tells an open span; this one, of no tracing, ignores it."""

    @property
    def traceparent(self) -> str | None:
        """The span's W3C `traceparent` (None untraced)."""
        return None

    def replied(self, reply: ModelReply) -> None:
        """A model call's answer arrived (its usage)."""

    def returned(self, result: ToolResult) -> None:
        """A tool call ended with `result`."""

    def within(self, context: ToolContext) -> ToolContext:
        """The tool context of the call this span traces: a helper it plans is traced under
        it."""
        return context


UNTRACED = Span()
_UNTRACED_SPAN: contextlib.nullcontext[Span] = contextlib.nullcontext(UNTRACED)


class Tracing:
    """No tracing: every span is `UNTRACED` (a shared null context, entered sync or async)."""

    enabled = False

    def agent_turn(self, agent: Agent) -> contextlib.AbstractAsyncContextManager[Span]:
        """The `invoke_agent` span of one turn of `agent`, under the span its thread names."""
        return _UNTRACED_SPAN

    def model_call(self, agent: Agent, messages: list[dict[str, Any]],
                   ) -> contextlib.AbstractContextManager[Span]:
        """The `chat` span of one call of `agent`'s model with `messages`, in its turn's
        span."""
        return _UNTRACED_SPAN

    def tool_call(self, context: ToolContext, name: str, call_id: str | None,
                  arguments: Any) -> contextlib.AbstractAsyncContextManager[Span]:
        """The `execute_tool` span of one call, in its agent's turn (the person's calls: in
        their session's trace)."""
        return _UNTRACED_SPAN

    def close(self) -> None:
        """Send what is left, within a bounded wait (before the process exits)."""


NO_TRACING = Tracing()


def tracing_from(environ: Mapping[str, str], db: AsyncStore,
                 warn: Callable[[str], None]) -> Tracing:
    """Tracing as the standard OpenTelemetry variables in `environ` ask: none unless an OTLP
    endpoint is set (and OTEL_SDK_DISABLED is not true); `warn` is told why traces are off when
    they were asked for but cannot be sent."""
    variable = next((name for name in ENDPOINTS if environ.get(name, "").strip()), None)
    if variable is None or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return NO_TRACING
    try:
        from lace.runtime import otel
    except ImportError:
        warn(MISSING.format(variable=variable))
        return NO_TRACING
    problem = otel.unsupported(environ)
    if problem is not None:
        warn(f"traces are off: {problem}")
        return NO_TRACING
    return otel.OtelTracing.from_environment(environ, db)
