"""``MCPToolTransform``: runs the tools the policy calls on Model Context Protocol servers,
each started as a subprocess and spoken to over stdio (``pip install "rl-envs[mcp]"``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import json
import logging
import re
import threading
import weakref
from typing import Any

from ._tool import ToolTransformBase

__all__ = ["MCPToolTransform"]

_logger = logging.getLogger(__name__)

_has_mcp = importlib.util.find_spec("mcp") is not None

_DEFAULT_PATTERN = r"<tool>([\w.]+)\n(.*?)</tool>"
# how long the constructor waits for the servers to start before going on without them
_CONNECT_TIMEOUT = 10.0
# how long close() waits for the servers to stop (the MCP client gives each 2 s to exit on
# its own after its stdin closes, then kills it)
_CLOSE_TIMEOUT = 10.0


def _command_line(config: dict) -> str:
    return " ".join([str(config["command"]), *map(str, config.get("args", []))])


class _MCPClients:
    """The sessions of one transform with its servers.

    An event loop runs on a daemon thread; one task there starts every server, opens a
    session with each, lists its tools, then waits for :meth:`close` and leaves the
    sessions and the servers in the order it entered them (MCP's client contexts must be
    left by the task that entered them). Tool calls are further tasks on the same loop.
    This object never refers to the transform, so a transform dropped without ``close``
    is collected and its finalizer stops the servers.
    """

    def __init__(self, servers: dict[str, dict]):
        self.servers = servers
        self.sessions: dict[str, Any] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="MCPToolTransform", daemon=True
        )
        self._thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    async def _serve(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                for name, config in self.servers.items():
                    await self._connect(stack, name, config)
                self.ready.set()
                await self._stop.wait()
        finally:
            self.sessions.clear()
            self.ready.set()

    async def _connect(self, stack: contextlib.AsyncExitStack, name: str, config: dict) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        _logger.info("Connecting to MCP server %r (%s)", name, _command_line(config))
        server = contextlib.AsyncExitStack()
        try:
            params = StdioServerParameters(
                command=config["command"],
                args=list(config.get("args", [])),
                env=config.get("env"),
                cwd=config.get("cwd"),
            )
            read, write = await server.enter_async_context(stdio_client(params))
            session = await server.enter_async_context(ClientSession(read, write))
            await session.initialize()
            listing = await session.list_tools()
        except Exception as err:  # a server that fails to start is reported, not raised
            with contextlib.suppress(Exception):
                await server.aclose()
            _logger.error(
                "Failed to connect to MCP server %r (%s): %s: %s",
                name,
                _command_line(config),
                type(err).__name__,
                err,
            )
            return
        stack.push_async_exit(server)
        self.sessions[name] = session
        self.tools[name] = {tool.name: tool for tool in listing.tools}
        _logger.info("Connected to MCP server %r with %d tools", name, len(self.tools[name]))

    async def call(self, server_name: str, tool_name: str, args_json: str) -> dict:
        session = self.sessions.get(server_name)
        if session is None:
            return {"success": False, "error": f"MCP server '{server_name}' not connected"}
        try:
            args = json.loads(args_json) if args_json.strip() else {}
        except json.JSONDecodeError as err:
            return {"success": False, "error": f"Failed to parse tool arguments: {err}"}
        try:
            result = await session.call_tool(tool_name, arguments=args)
        except Exception as err:
            return {"success": False, "error": f"MCP tool call failed: {err}"}
        content = getattr(result, "content", result)
        # mcp 2 names the flag is_error, mcp 1 isError
        failed = bool(getattr(result, "is_error", getattr(result, "isError", False)))
        return {"success": not failed, "result" if not failed else "error": str(content)}

    def close(self) -> None:
        """Stops the servers (waiting for their processes to end), then the loop."""
        if not self.running:
            return
        if threading.current_thread() is self._thread:
            # the transform was collected on the loop's own thread: waiting here would
            # block the loop that has to stop the servers, so stop once they are stopped
            self._stop.set()
            self._main.add_done_callback(lambda _: self.loop.stop())
            return
        self.loop.call_soon_threadsafe(self._stop.set)
        try:
            self._main.result(timeout=_CLOSE_TIMEOUT)
        except concurrent.futures.TimeoutError:
            # still starting a server: cancel the task, which leaves what it entered
            self._main.cancel()
            with contextlib.suppress(Exception):
                self._main.result(timeout=_CLOSE_TIMEOUT)
        except Exception as err:
            _logger.warning("Error while disconnecting from the MCP servers: %s", err)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=_CLOSE_TIMEOUT)
        if not self._thread.is_alive():
            self.loop.close()


class MCPToolTransform(ToolTransformBase):
    r"""Executes the tools the assistant calls through the Model Context Protocol.

    Each entry of ``servers`` starts one MCP server as a subprocess (its ``"command"``
    with its ``"args"``, and ``"env"`` / ``"cwd"`` when given) and talks to it over
    stdio with the official ``mcp`` client, on an event loop in a background thread.
    A call in the assistant's last turn reads ``<tool>server.tool\n{json arguments}</tool>``
    (``<tool>tool\n...`` uses the first server); every call is answered, in order, by a
    message of role ``tool_name``:

    - ``"Tool <server>.<tool> executed successfully:\n<content>"``, ``<content>`` being
      the result's content blocks as the ``mcp`` client returns them (a list printed as
      Python prints it, e.g. ``[TextContent(type='text', text='5', ...)]``);
    - ``"Tool <server>.<tool> failed:\n<error>"`` when the server reports an error (an
      unknown tool, a tool that raised: its content blocks), the server is unknown or did
      not start (``MCP server '<server>' not connected``), the arguments are not JSON
      (``Failed to parse tool arguments: ...``), or the call ran past ``timeout``
      (``Tool execution timed out after <timeout>s``; the call is cancelled).

    A server that fails to start is logged, not raised: its calls fail as above. The
    servers stop on :meth:`close` (``env.close()`` calls it), or when the transform is
    garbage collected; each gets two seconds to exit once its stdin closes, then is
    killed.

    Args:
        servers (dict[str, dict]): server name to its launch configuration:
            ``{"command": str, "args": list[str], "env": dict (optional), "cwd": str
            (optional)}``, e.g. ``{"python": {"command": "uvx", "args":
            ["mcp-run-python", "stdio"]}}``.
        tool_call_pattern (str, optional): a regular expression (matched with
            ``re.DOTALL``) whose two groups capture the (``server.``-prefixed) tool name
            and its JSON arguments. Defaults to ``r"<tool>([\w.]+)\n(.*?)</tool>"``.
        tool_name (str): the role of the result messages. Defaults to ``"tool"``.
        timeout (float): seconds a tool call may take. Defaults to ``10.0``.

    Raises:
        ImportError: ``mcp`` is not installed (``pip install "rl-envs[mcp]"``).
        ValueError: a server configuration that is not a dict with a ``"command"``.
        RuntimeError: stepped outside a history-mode :class:`~rl.envs.llm.ChatEnv`.

    Examples:
        >>> import sys
        >>> from tensordict import TensorDict, lazy_stack
        >>> from rl.data.llm import History
        >>> from rl.envs.llm import ChatEnv, MCPToolTransform
        >>> server = '''
        ... from mcp.server.mcpserver import MCPServer
        ... app = MCPServer("calc")
        ... @app.tool()
        ... def add(a: int, b: int) -> int:
        ...     return a + b
        ... app.run()
        ... '''
        >>> tools = MCPToolTransform({"calc": {"command": sys.executable, "args": ["-c", server]}})
        >>> env = ChatEnv(batch_size=(1,)).append_transform(tools)
        >>> td = env.reset(TensorDict(query="What is 2 + 3?", batch_size=(1,)))
        >>> call = History(role="assistant", content='<tool>calc.add\n{"a": 2, "b": 3}</tool>')
        >>> td["history"].full = td["history"].prompt.extend(lazy_stack([call]).unsqueeze(-1))
        >>> print(env.step(td)["next", "history"].prompt[0, -1].content)
        Tool calc.add executed successfully:
        [TextContent(type='text', text='5', annotations=None, meta=None)]
        >>> env.close()
    """

    def __init__(
        self,
        servers: dict[str, dict],
        tool_call_pattern: str | None = None,
        tool_name: str = "tool",
        timeout: float = 10.0,
    ):
        if not _has_mcp:
            raise ImportError('MCPToolTransform needs the mcp package: pip install "rl-envs[mcp]"')
        for name, config in servers.items():
            if not isinstance(config, dict) or "command" not in config:
                raise ValueError(
                    f"MCP server {name!r} needs a configuration dict with a 'command' "
                    f"(and optional 'args', 'env', 'cwd'), got {config!r}"
                )
        super().__init__()
        self.server_configs = dict(servers)
        self.tool_call_pattern = tool_call_pattern or _DEFAULT_PATTERN
        self.tool_role = tool_name
        self.timeout = timeout
        self._clients = _MCPClients(self.server_configs)
        self._finalizer = weakref.finalize(self, self._clients.close)
        if not self._clients.ready.wait(_CONNECT_TIMEOUT):
            _logger.warning(
                "MCP servers still starting after %s s; calls wait for them", _CONNECT_TIMEOUT
            )

    def __reduce__(self):
        # a copy (clone, pickling into a worker) starts its own servers
        return (
            type(self),
            (self.server_configs, self.tool_call_pattern, self.tool_role, self.timeout),
        )

    def _extract_tool_calls(self, text: str) -> list[tuple[str, str, str]]:
        """The ``(server, tool, arguments JSON)`` of each call in ``text``, in order."""
        calls = []
        for full_name, args_json in re.findall(self.tool_call_pattern, text, re.DOTALL):
            if "." in full_name:
                server_name, tool_name = full_name.split(".", 1)
            else:
                server_name, tool_name = next(iter(self.server_configs), None), full_name
            if server_name:
                calls.append((server_name, tool_name, args_json))
        return calls

    def _execute_tool_sync(self, server_name: str, tool_name: str, args_json: str) -> dict:
        """Runs one call: ``{"success": True, "result": str}`` or ``{"success": False,
        "error": str}``."""
        clients = self._clients
        if not clients.running:
            return {"success": False, "error": "MCP thread not running"}
        clients.ready.wait(self.timeout)
        future = asyncio.run_coroutine_threadsafe(
            clients.call(server_name, tool_name, args_json), clients.loop
        )
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return {"success": False, "error": f"Tool execution timed out after {self.timeout}s"}
        except Exception as err:
            return {"success": False, "error": f"Tool execution failed: {err}"}

    def _process_batch_item(self, content: str, index: int) -> list[str] | None:
        calls = self._extract_tool_calls(content)
        if not calls:
            return None
        results = []
        for server_name, tool_name, args_json in calls:
            result = self._execute_tool_sync(server_name, tool_name, args_json)
            if result["success"]:
                results.append(
                    f"Tool {server_name}.{tool_name} executed successfully:\n{result['result']}"
                )
            else:
                results.append(f"Tool {server_name}.{tool_name} failed:\n{result['error']}")
        return results

    def close(self) -> None:
        """Stops the MCP servers and the background thread (idempotent)."""
        self._finalizer()
