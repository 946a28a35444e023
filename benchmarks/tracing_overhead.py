"""What tracing costs per tool call: per_event.py's loop (a helper's task_add_note calls, from
lace receiving the reply to its next model request, zero-latency model) with tracing off and
with every span sent over OTLP/HTTP to a collector in a process of its own, in alternating
rounds of one run.

    python -m benchmarks.tracing_overhead [--calls 200] [--rounds 3] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from benchmarks.common import percentile, table
from benchmarks.fanout import warm_up
from benchmarks.per_event import run_lace

SINK = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
"""An OTLP/HTTP endpoint that takes every request and throws it away."""


@dataclass(frozen=True)
class TracingCost:
    off_ms: list[float]
    on_ms: list[float]

    @property
    def added_ms(self) -> float:
        """The median call with tracing on, less the median call with it off."""
        return statistics.median(self.on_ms) - statistics.median(self.off_ms)


@contextmanager
def sink() -> Iterator[str]:
    """The URL of a throwaway OTLP endpoint on 127.0.0.1, in a process of its own."""
    process = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{process.stdout.readline().strip()}"
    finally:
        process.kill()
        process.wait()


@contextmanager
def tracing_to(endpoint: str | None) -> Iterator[None]:
    """Runtimes opened in the block send their spans to `endpoint` (None: no tracing)."""
    saved = os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if endpoint is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    try:
        yield
    finally:
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        if saved is not None:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = saved


def report(cost: TracingCost) -> str:
    rows = [[name, len(values), f"{statistics.median(values):.3f}",
             f"{percentile(values, 0.90):.3f}"]
            for name, values in (("tracing off", cost.off_ms), ("tracing on", cost.on_ms))]
    return "\n".join([table(["loop", "calls", "median ms", "p90 ms"], rows),
                      f"added per tool call (medians): {cost.added_ms:.3f} ms"])


def main(argv: Sequence[str] | None = None) -> TracingCost:
    """Parse the flags, run the rounds, print the table; returns the timings."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tracing_overhead",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="task_add_note calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each, alternating")
    parser.add_argument("--tiny", action="store_true", help="5 calls, one round (a smoke test)")
    args = parser.parse_args(argv)
    calls, rounds = (5, 1) if args.tiny else (args.calls, args.rounds)
    off: list[float] = []
    on: list[float] = []
    with sink() as endpoint:
        asyncio.run(warm_up())
        for _ in range(rounds):
            for timings, sent_to in ((off, None), (on, endpoint)):
                with tracing_to(sent_to):
                    timings.extend(asyncio.run(run_lace(calls))[0])
    cost = TracingCost(off, on)
    print("A SQLite file with WAL and synchronous=NORMAL; time per call: from lace receiving a "
          "reply with one task_add_note call to its next model request (a chat and an "
          "execute_tool span per call when on).")
    print(report(cost))
    return cost


if __name__ == "__main__":
    main()
