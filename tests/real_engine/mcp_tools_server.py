"""An MCP server for the tool-loop tests, built with the official `mcp` Python SDK and served
over its Streamable HTTP transport at /mcp.

Tools: `add` (two integers), `echo` (a string), `slow` (sleeps the seconds asked, then answers),
`fail` (always raises, so the SDK answers an isError result) and `header` (the value of the
named request header the call itself came with, or "absent"). With --token, every request
must carry `Authorization: Bearer <token>` (401 otherwise), as a server behind a key would.

    python mcp_tools_server.py --port 8123 [--token T]
Prints LISTENING once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("tollgate-test-tools")


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Returns its text.")
def echo(text: str) -> str:
    return text


@server.tool(description="Waits the given seconds, then answers.")
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="Always fails.")
def fail() -> str:
    raise RuntimeError("this tool always fails")


# The headers of the request being served (one request at a time reaches a tool call here:
# the tests call `header` alone).
LAST_HEADERS: dict[bytes, bytes] = {}


@server.tool(description="Returns the value of the named header of this request.")
def header(name: str) -> str:
    return LAST_HEADERS.get(name.lower().encode(), b"absent").decode()


class RequireBearer:
    """ASGI middleware: 401 unless the request carries the expected bearer token."""

    def __init__(self, app, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            LAST_HEADERS.clear()
            LAST_HEADERS.update(dict(scope["headers"]))
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token")
    parser.add_argument("--extra-tools", type=int, default=0,
                        help="also offer this many trivial tools (extra_0, extra_1, ...)")
    args = parser.parse_args()
    for i in range(args.extra_tools):
        server.add_tool(lambda: "ok", name=f"extra_{i}", description="Does nothing.")
    app = server.streamable_http_app()
    if args.token:
        app = RequireBearer(app, args.token)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    uv = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(uv.serve())
        while not uv.started:
            await asyncio.sleep(0.05)
        print("LISTENING", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
