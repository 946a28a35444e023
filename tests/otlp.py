"""A small OTLP/HTTP collector on 127.0.0.1: it decodes the protobuf requests lace's exporters
send (`ExportTraceServiceRequest`, `ExportMetricsServiceRequest`) into plain values, or, told to,
hangs on every request as a collector that stopped answering does."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    resource: dict[str, Any]


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Collector:
    """What arrived, by signal; `hang` makes every request wait until the collector stops."""

    hang: bool = False
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each metric's data points (their attributes, count or sum)."""
    requests: int = 0
    bodies: list[bytes] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def received(self, path: str, body: bytes) -> None:
        with self.lock:
            self.requests += 1
            self.bodies.append(body)
            if path == "/v1/traces":
                self._spans(body)
            elif path == "/v1/metrics":
                self._metrics(body)

    def _spans(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                self.spans.extend(ReceivedSpan(
                    name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex() or None, kind=span.kind,
                    attributes=attributes_of(span.attributes), status_code=span.status.code,
                    status_message=span.status.message, resource=resource)
                    for span in scope.spans)

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource_metrics in request.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    points = self.metrics.setdefault(metric.name, [])
                    for point in metric.histogram.data_points:
                        points.append({"attributes": attributes_of(point.attributes),
                                       "count": point.count, "sum": point.sum})

    def wait_for(self, holds: Callable[[Collector], bool], what: str,
                 timeout_s: float = 30) -> None:
        """Wait until `holds` is true of what arrived, or fail naming `what`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if holds(self):
                    return
            time.sleep(0.05)
        raise AssertionError(f"the collector never received {what}: {self.spans}")

    def environment(self) -> dict[str, str]:
        """The variables that send a process's traces and metrics here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url,
                "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "500"}


def handler_for(collector: Collector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if collector.hang:
                collector.received("hung", body)
                collector.released.wait()
                return
            collector.received(self.path, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def collector(*, hang: bool = False) -> Iterator[Collector]:
    """A collector listening on a free port of 127.0.0.1 until the block ends."""
    received = Collector(hang=hang)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(received))
    server.daemon_threads = True
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        received.released.set()
        server.shutdown()
        server.server_close()


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [span for span in spans if span.parent_id == parent.span_id]


def named(spans: list[ReceivedSpan], prefix: str, **attributes: Any) -> list[ReceivedSpan]:
    return [span for span in spans if span.name.startswith(prefix)
            and all(span.attributes.get(key) == value for key, value in attributes.items())]
