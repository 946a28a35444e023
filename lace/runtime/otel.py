"""Traces and metrics of every agent over OTLP/HTTP, named as OpenTelemetry's GenAI semantic
conventions name them: `invoke_agent {agent}` per turn, `chat {model}` per model call,
`execute_tool {tool}` per tool call, `gen_ai.client.token.usage` and
`gen_ai.client.operation.duration`. Imported only when tracing is on (`lace.runtime.tracing`).

A turn's span hangs under the `traceparent` its thread row holds (the spawning call's span,
written in the transaction that spawned it), so one session is one trace across processes.
Spans leave in a background thread (a slow or dead collector never slows a turn, and a missing
one costs the exit only its first refusal); message contents stay out unless
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, and then with every known credential
masked."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from lace.core.ids import root_of
from lace.core.records import Agent
from lace.core.secrets import mask
from lace.core.version import __version__
from lace.llm.types import ModelReply
from lace.paths import credential_values
from lace.runtime.database import AsyncStore
from lace.runtime.tracing import ENDPOINTS, Span, Tracing
from lace.tools.base import ToolContext, ToolResult

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
LENGTH_LIMITS = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
ATTRIBUTE_LENGTH = 4096
"""The longest attribute value sent (unless an OTEL_*_LENGTH_LIMIT says otherwise): a huge tool
result or MCP tool name is cut, never sent whole."""
NAME_LENGTH = 120
"""The longest tool or agent name in a span's name (the SDK does not cut names)."""
CLOSE_S = 2.0
"""The longest lace waits at exit for the last spans and metrics to leave (a collector that
answers slowly or hangs); it stops waiting at the first problem the exporters report then (a
collector that is not there: a refused connection fails at once, then the exporter would wait
1 s and 2 s to try again)."""
COMMAND_LINE = ("process.command", "process.command_args", "process.command_line")
"""Resource attributes never sent: `lace run`'s command line holds the person's prompt."""
PROVIDERS = {"gemini": "gcp.gemini", "vertex_ai": "gcp.vertex_ai", "bedrock": "aws.bedrock",
             "azure": "azure.ai.openai", "mistral": "mistral_ai", "xai": "x_ai",
             "watsonx": "ibm.watsonx.ai"}
"""litellm's provider names that GenAI conventions spell otherwise."""
PROPAGATOR = TraceContextTextMapPropagator()


def unsupported(environ: Mapping[str, str]) -> str | None:
    """Why the variables ask for something lace cannot send, or None."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name, "").strip()
        if protocol:
            if protocol != "http/protobuf":
                return (f"{name}={protocol} is not supported: lace sends OTLP over "
                        "http/protobuf (point the endpoint at the collector's HTTP port, 4318)")
            break
    return None


def exporting(environ: Mapping[str, str], variable: str) -> bool:
    """Whether a signal is sent (`OTEL_TRACES_EXPORTER=none` turns spans off)."""
    return environ.get(variable, "").strip().lower() != "none"


def resource() -> Resource:
    """Who sends, as the SDK detects it from the OTEL_* variables: `service.name` lace unless
    OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names it, and no attribute that carries the
    command line."""
    detected = Resource.create({"service.version": __version__})
    attributes = {key: value for key, value in detected.attributes.items()
                  if key not in COMMAND_LINE}
    if str(attributes.get("service.name", "")).startswith("unknown_service"):
        attributes["service.name"] = "lace"
    return Resource(attributes)


def traceparent(span: trace.Span) -> str | None:
    """A span's W3C `traceparent`, to store on a row."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def parent_context(value: str | None) -> otel_context.Context:
    """The context of a stored `traceparent`; an empty one (a new trace) for none or a bad
    one."""
    if not value:
        return otel_context.Context()
    return PROPAGATOR.extract({"traceparent": value}, context=otel_context.Context())


def provider_name(provider: str) -> str:
    """`gen_ai.provider.name` of a litellm provider."""
    return PROVIDERS.get(provider, provider)


def short(name: str) -> str:
    """A name as a span's name carries it (the SDK cuts attributes, not names)."""
    return name if len(name) <= NAME_LENGTH else name[:NAME_LENGTH - 1] + "…"


def failed(span: trace.Span, error: BaseException) -> None:
    """An error as the span's status: its kind only (its message may hold content)."""
    kind = type(error).__name__
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))


def masked(value: Any) -> str:
    """Content as sent when capturing: JSON, every known credential masked."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return mask(text, credential_values())


@dataclasses.dataclass
class OpenSpan(Span):
    """An OpenTelemetry span lace has open."""

    span: trace.Span
    tracing: OtelTracing
    operation: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The attributes its metrics carry (a model call's)."""

    @property
    def traceparent(self) -> str | None:
        return traceparent(self.span)

    def replied(self, reply: ModelReply) -> None:
        self.span.set_attributes({
            "gen_ai.usage.input_tokens": reply.prompt_tokens,
            "gen_ai.usage.output_tokens": reply.completion_tokens,
            "gen_ai.response.finish_reasons": ["tool_calls" if reply.tool_calls else "stop"]})
        for attribute, count in (("gen_ai.usage.cache_read.input_tokens", reply.cache_read_tokens),
                                 ("gen_ai.usage.cache_creation.input_tokens",
                                  reply.cache_write_tokens)):
            if count is not None:  # part of input_tokens, where the provider said
                self.span.set_attribute(attribute, count)
        for kind, count in (("input", reply.prompt_tokens), ("output", reply.completion_tokens)):
            self.tracing.token_usage.record(count, {**self.operation, "gen_ai.token.type": kind})
        if self.tracing.capture:
            self.span.set_attribute("gen_ai.output.messages", masked([reply.message()]))

    def returned(self, result: ToolResult) -> None:
        if result.is_error:
            kind = result.kind or "tool_error"
            self.span.set_attribute("error.type", kind)
            self.span.set_status(Status(StatusCode.ERROR, kind))
        if self.tracing.capture:
            self.span.set_attribute("gen_ai.tool.call.result", masked(result.text))

    def within(self, context: ToolContext) -> ToolContext:
        return dataclasses.replace(context, trace_parent=self.traceparent)


class CountedSpans(BatchSpanProcessor):
    """A batch span processor that counts the spans it was given and those its exporter took:
    the difference is what was lost (a full queue, a failed export, the exit)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.ended = self.sent = 0
        self._counting = threading.Lock()
        super().__init__(_Taken(exporter, self))

    def on_end(self, span: ReadableSpan) -> None:
        with self._counting:
            self.ended += 1
        super().on_end(span)

    def taken(self, count: int) -> None:
        """`count` spans reached the collector."""
        with self._counting:
            self.sent += count

    @property
    def lost(self) -> int:
        """Spans ended and not sent (so far)."""
        return self.ended - self.sent


@dataclasses.dataclass
class _Taken(SpanExporter):
    """An exporter that tells `CountedSpans` how many spans each successful export took."""

    exporter: SpanExporter
    counted: CountedSpans

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.exporter.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.counted.taken(len(spans))
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class OtelTracing(Tracing):
    """Spans and metrics through OpenTelemetry's SDK, on providers of lace's own (never the
    global ones: the MCP SDK's and litellm's spans stay out of the person's traces)."""

    enabled = True

    def __init__(self, db: AsyncStore, tracer_provider: TracerProvider,
                 meter_provider: MeterProvider | None, *, capture: bool = False,
                 spans: CountedSpans | None = None, endpoint: str = ENDPOINTS[-1]) -> None:
        self.db, self.capture = db, capture
        self.tracer_provider, self.meter_provider = tracer_provider, meter_provider
        self.spans, self.endpoint = spans, endpoint
        self.problems = quiet_exporter_logs()
        self.tracer = tracer_provider.get_tracer("lace", __version__)
        meter = (meter_provider or MeterProvider()).get_meter("lace", __version__)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used")
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], db: AsyncStore) -> OtelTracing:
        """Exporters as the OTEL_* variables configure them (the SDK reads the endpoint,
        headers, timeout and compression itself)."""
        limit = None if any(environ.get(name) for name in LENGTH_LIMITS) else ATTRIBUTE_LENGTH
        tracer_provider = TracerProvider(
            resource=resource(), shutdown_on_exit=False,
            span_limits=SpanLimits(max_span_attribute_length=limit))
        spans = None
        if exporting(environ, "OTEL_TRACES_EXPORTER"):
            spans = CountedSpans(OTLPSpanExporter())
            tracer_provider.add_span_processor(spans)
        meter_provider = None
        if exporting(environ, "OTEL_METRICS_EXPORTER"):
            meter_provider = MeterProvider(
                resource=tracer_provider.resource, shutdown_on_exit=False,
                metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
        capture = environ.get(CAPTURE, "").strip().lower() == "true"
        endpoint = next((name for name in ENDPOINTS if environ.get(name, "").strip()),
                        ENDPOINTS[-1])
        return cls(db, tracer_provider, meter_provider, capture=capture, spans=spans,
                   endpoint=endpoint)

    @contextlib.asynccontextmanager
    async def agent_turn(self, agent: Agent) -> AsyncIterator[Span]:
        thread_id, root_id = agent.thread_id, root_of(agent.thread_id)
        parent = await self.db.read(lambda tx: tx.threads.trace_parent(thread_id))
        attributes = {"gen_ai.operation.name": "invoke_agent",
                      "gen_ai.agent.id": thread_id, "gen_ai.agent.name": agent.name,
                      "gen_ai.conversation.id": root_id,
                      "gen_ai.provider.name": provider_name(agent.provider),
                      "gen_ai.request.model": agent.model}
        with self._span(f"invoke_agent {short(agent.name)}", attributes,
                        context=parent_context(parent)) as span:
            if parent is None:  # the session's first traced turn: its trace starts here
                started = span.traceparent
                if started is not None:
                    await self.db.write(lambda tx: tx.threads.claim_trace(root_id, started))
            yield span

    def model_call(self, agent: Agent, messages: list[dict[str, Any]],
                   ) -> contextlib.AbstractContextManager[Span]:
        operation = {"gen_ai.operation.name": "chat",
                     "gen_ai.provider.name": provider_name(agent.provider),
                     "gen_ai.request.model": agent.model}
        attributes = {**operation, "gen_ai.agent.id": agent.thread_id}
        if self.capture:
            attributes["gen_ai.input.messages"] = masked(messages)
        return self._span(f"chat {short(agent.model)}", attributes, kind=SpanKind.CLIENT,
                          metered=operation)

    @contextlib.asynccontextmanager
    async def tool_call(self, context: ToolContext, name: str, call_id: str | None,
                        arguments: Any) -> AsyncIterator[Span]:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": name, "gen_ai.tool.type": "function",
                                      "gen_ai.agent.id": context.thread_id,
                                      "gen_ai.conversation.id": context.session_id}
        if call_id is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = masked(arguments or {})
        parent = None
        if not trace.get_current_span().get_span_context().is_valid:  # the person's call
            session_id = context.session_id
            parent = parent_context(await self.db.read(
                lambda tx: tx.threads.trace_parent(session_id)))
        with self._span(f"execute_tool {short(name)}", attributes, context=parent) as span:
            yield span

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any], *,
              context: otel_context.Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
              metered: dict[str, Any] | None = None) -> Iterator[OpenSpan]:
        """A span made current until the block ends; an exception out of the block becomes
        its error status (and `metered` operations record their duration)."""
        began, error_type = time.monotonic(), None
        with self.tracer.start_as_current_span(
                name, context=context, kind=kind, attributes=attributes,
                record_exception=False, set_status_on_exception=False) as span:
            try:
                yield OpenSpan(span, self, metered or {})
            except BaseException as error:
                failed(span, error)
                error_type = type(error).__name__
                raise
            finally:
                if metered is not None:
                    self.duration.record(time.monotonic() - began, {
                        **metered, **({"error.type": error_type} if error_type else {})})

    def close(self) -> None:
        """Flush and stop both providers in a daemon thread, waiting at most CLOSE_S and no
        longer than the first problem the exporters report meanwhile: a collector that hangs
        delays lace's exit by CLOSE_S, one that is not there by its first refusal. The spans
        that never left are said in one line on stderr, unless a problem was told already."""
        over = threading.Event()
        self.problems.closing = over  # the exporters' problems end the wait, unshown

        def stop() -> None:
            try:
                self.tracer_provider.shutdown()
                if self.meter_provider is not None:
                    self.meter_provider.shutdown(timeout_millis=CLOSE_S * 1000)
            finally:
                over.set()
                if self.problems.closing is over:  # its problems, however late, are counted
                    self.problems.closing = None

        threading.Thread(target=stop, name="lace-otel-close", daemon=True).start()
        over.wait(CLOSE_S)
        lost = self.spans.lost if self.spans is not None else 0
        if lost and not self.problems.told:  # one line in all: a problem told is enough
            self.problems.told = True
            print(f"lace: {lost} span{'s' if lost != 1 else ''} not sent: no collector took "
                  f"them before lace exited ({self.endpoint})", file=sys.stderr)


class OnceToStderr(logging.Handler):
    """The first problem the exporters report, as one line on stderr; the rest are dropped
    (a collector that is down would otherwise print a line per batch)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.told = False
        self.closing: threading.Event | None = None
        """Set while lace exits (`OtelTracing.close`): a problem then ends its wait, and the
        spans lost are said instead."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.closing is not None:
            self.closing.set()
            return
        if self.told:
            return
        self.told = True
        with contextlib.suppress(Exception):  # a collector's answer may echo a header's key
            problem = mask(record.getMessage(), credential_values())
            print(f"lace: traces or metrics not sent: {problem} (further problems are not "
                  "shown)", file=sys.stderr)


def quiet_exporter_logs() -> OnceToStderr:
    """Route OpenTelemetry's own log records to `OnceToStderr` (one per process)."""
    logger = logging.getLogger("opentelemetry")
    logger.propagate = False
    handler = next((handler for handler in logger.handlers
                    if isinstance(handler, OnceToStderr)), None)
    if handler is None:
        handler = OnceToStderr()
        logger.addHandler(handler)
    return handler
