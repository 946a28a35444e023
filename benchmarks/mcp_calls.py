"""MCP tool calls through lace's client: how long a server takes to start and list its tools,
and what one call costs, alone and with many agents calling at once (the real third-party
`mcp-server-time` over stdio, lace's `McpServers` as the runtime uses it, no model).

    python -m benchmarks.mcp_calls [--calls 200] [--concurrent 20]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

from benchmarks.common import percentile, table
from lace.config import Limits, McpServer
from lace.tools.mcp.servers import McpServers


def time_server() -> McpServer:
    """`mcp-server-time` from the virtual environment lace runs in."""
    command = shutil.which("mcp-server-time", path=str(Path(sys.executable).parent))
    if command is None:
        raise SystemExit("mcp-server-time is not installed: pip install -e '.[dev]'")
    return McpServer(command=command, args=["--local-timezone", "UTC"])


async def measure(calls: int, concurrent: int) -> list[list[object]]:
    """Rows: the start, then calls one at a time, then `concurrent` at a time."""
    servers = McpServers({"time": time_server()}, Limits())
    try:
        began = time.perf_counter()
        tools = {tool.tool: tool for tool in await servers.ready()}
        started_ms = (time.perf_counter() - began) * 1000
        tool = tools["get_current_time"]

        async def one() -> float:
            began = time.perf_counter()
            result = await servers.call(tool, {"timezone": "Europe/Paris"})
            if result.is_error:
                raise SystemExit(f"the call failed: {result.text}")
            return (time.perf_counter() - began) * 1000

        alone = [await one() for _ in range(calls)]
        began = time.perf_counter()
        together: list[float] = []
        for _ in range(max(1, calls // concurrent)):
            together += await asyncio.gather(*(one() for _ in range(concurrent)))
        wall = time.perf_counter() - began
    finally:
        await servers.stop()
    return [["start and list tools", 1, f"{started_ms:.0f}", "", ""],
            ["one call at a time", calls, f"{percentile(alone, 0.5):.2f}",
             f"{percentile(alone, 0.95):.2f}", f"{calls / (sum(alone) / 1000):.0f}"],
            [f"{concurrent} calls at once", len(together), f"{percentile(together, 0.5):.2f}",
             f"{percentile(together, 0.95):.2f}", f"{len(together) / wall:.0f}"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=20)
    args = parser.parse_args()
    rows = asyncio.run(measure(args.calls, args.concurrent))
    print(table(["what", "n", "p50 ms", "p95 ms", "calls/s"], rows))


if __name__ == "__main__":
    main()
