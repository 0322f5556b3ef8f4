"""A small MCP server for the MCPToolTransform tests, served over stdio.

Tools: ``add(a, b)``, ``echo(text)``, ``fail(message)`` (raises), ``sleep(seconds)`` and
``pid()`` (the server's process id, to check that closing the transform ends it).
"""

from __future__ import annotations

import os
import time

try:  # mcp 2 renamed FastMCP to MCPServer
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1
    from mcp.server.fastmcp import FastMCP as Server

app = Server("calc")


@app.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@app.tool()
def echo(text: str) -> str:
    """Returns its argument."""
    return text


@app.tool()
def fail(message: str) -> str:
    """Raises ``ValueError(message)``."""
    raise ValueError(message)


@app.tool()
def sleep(seconds: float) -> str:
    """Sleeps, then answers ``"slept"``."""
    time.sleep(seconds)
    return "slept"


@app.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    app.run()
