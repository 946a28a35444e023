"""A hostile MCP server for tests, written on bare JSON-RPC lines so it never holds what it sends:
`python flood_server.py`. Its tool `flood` answers with `$FLOOD_RESULT_MB` megabytes of text in
one result (the JSON line streamed out in pieces), after writing `$FLOOD_STDERR_MB` megabytes to
its stderr; its tool `small` answers "small" (after a log notification of `$FLOOD_NOTICE_MB`
megabytes, which answers no request), so a test can tell the connection still works."""

from __future__ import annotations

import json
import os
import sys

PIECE = b"x" * (1 << 20)


def send(message: dict[str, object]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def flood_stderr(megabytes: int) -> None:
    line = b"the server complains at length " * 32 + b"\n"
    for _ in range(megabytes * (1 << 20) // len(line)):
        sys.stderr.buffer.write(line)
    sys.stderr.buffer.flush()


def flood_result(request_id: object, megabytes: int) -> None:
    out = sys.stdout.buffer
    out.write(b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode()
              + b', "result": {"content": [{"type": "text", "text": "')
    for _ in range(megabytes):
        out.write(PIECE)
    out.write(b'"}], "isError": false}}\n')
    out.flush()


def flood_notice(megabytes: int) -> None:
    if not megabytes:
        return
    out = sys.stdout.buffer
    out.write(b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": '
              b'"info", "data": "')
    for _ in range(megabytes):
        out.write(PIECE)
    out.write(b'"}}\n')
    out.flush()


def answer(request: dict[str, object]) -> None:
    method, request_id = request.get("method"), request.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": request_id, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "flood", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [
            {"name": name, "description": f"The {name} tool.",
             "inputSchema": {"type": "object", "properties": {}}}
            for name in ("flood", "small")]}})
    elif method == "tools/call":
        params = request.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if name == "flood":
            flood_stderr(int(os.environ.get("FLOOD_STDERR_MB") or 0))
            flood_result(request_id, int(os.environ.get("FLOOD_RESULT_MB") or 0))
        else:
            flood_notice(int(os.environ.get("FLOOD_NOTICE_MB") or 0))
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "content": [{"type": "text", "text": "small"}], "isError": False}})
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})


if __name__ == "__main__":
    for line in sys.stdin:
        answer(json.loads(line))
