"""A small MCP server for tests: `python notes_server.py [--http PORT [--json]]` (`--json`:
answers as one JSON body, not a server-sent event). Its pid goes to the file
`$NOTES_PID_FILE` names (when set), so a test can tell whether it outlived lace; with
`$NOTES_STUBBORN` set it does not end when its stdin closes (only a signal ends it), so a test
can tell whether lace stopped it or it merely left; `$NOTES_EXTRA_TOOLS` adds that many more
tools (`extra_0`, ...) with long descriptions."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("notes")
NOTES: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add_note(text: str) -> str:
    """Keep a note; returns how many there are."""
    NOTES.append(text)
    return f"{len(NOTES)} note(s)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def secret() -> str:
    """Return the value of NOTES_TOKEN from the server's environment, and whether it can see
    OPENAI_API_KEY."""
    return f"token={os.environ.get('NOTES_TOKEN')} openai={'OPENAI_API_KEY' in os.environ}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def flood(characters: int) -> str:
    """Return `characters` characters."""
    return "x" * characters


@server.tool()
def fail() -> str:
    """Raise an error."""
    raise ValueError("the notes are on fire")


@server.tool()
def crash() -> str:
    """Kill the server mid-call."""
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def picture() -> list[TextContent | ImageContent]:
    """A caption and a small image."""
    return [TextContent(type="text", text="a red dot"),
            ImageContent(type="image", data=base64.b64encode(b"\x89PNG" + b"0" * 296).decode(),
                         mime_type="image/png")]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


def _extra(number: int) -> None:
    def extra(text: str) -> str:
        return f"extra {number}: {text}"

    server.add_tool(extra, name=f"extra_{number}", description=f"Extra tool {number}. " * 200)


for _number in range(int(os.environ.get("NOTES_EXTRA_TOOLS") or 0)):
    _extra(_number)


if __name__ == "__main__":
    pid_file = os.environ.get("NOTES_PID_FILE")
    if pid_file:
        with Path(pid_file).open("a") as file:
            file.write(f"{os.getpid()}\n")
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]),
                   json_response="--json" in sys.argv)
    else:
        server.run()
        if os.environ.get("NOTES_STUBBORN"):
            time.sleep(3600)
