"""rl.envs.llm.MCPToolTransform against a real MCP server (tests/data/mcp_calc_server.py)
started as a subprocess over stdio: results and errors appended to the history as TorchRL
writes them, the time limit, and the server's end on close."""

from __future__ import annotations

import doctest
import logging
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("mcp")

from mcp.types import TextContent  # noqa: E402
from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import History  # noqa: E402
from rl.envs.llm import ChatEnv, MCPToolTransform  # noqa: E402
from rl.envs.llm.transforms import _mcp  # noqa: E402

SERVER = str(Path(__file__).parent / "data" / "mcp_calc_server.py")


def calc_servers():
    return {"calc": {"command": sys.executable, "args": [SERVER]}}


def text(value: str) -> str:
    """How the transform prints a one-block text result (as TorchRL does)."""
    return str([TextContent(type="text", text=value)])


def step_with(env, replies: list[str]):
    """Resets ``env`` with one query per reply, answers each with ``replies[i]`` and
    returns the next histories' prompts."""
    td = env.reset(TensorDict(query=["q"] * len(replies), batch_size=(len(replies),)))
    turns = lazy_stack([History(role="assistant", content=r, batch_size=()) for r in replies])
    td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
    return env.step(td)["next", "history"].prompt


def server_pid(env) -> int:
    prompt = step_with(env, ["<tool>calc.pid\n{}</tool>"])
    return int(prompt[0, -1].content.split("text='")[1].split("'")[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def tools():
    tools = MCPToolTransform(calc_servers())
    yield tools
    tools.close()


@pytest.fixture(scope="module")
def env(tools):
    return ChatEnv(batch_size=(2,)).append_transform(tools)


class TestMCPToolTransform:
    def test_results_appended_as_tool_turns(self, env):
        calls = (
            '<tool>calc.add\n{"a": 2, "b": 3}</tool> then <tool>calc.echo\n{"text": "hi"}</tool>'
        )
        prompt = step_with(env, [calls, "no call here"])
        first, second = prompt[0], prompt[1]
        assert first.role == ["user", "assistant", "tool", "tool"]
        assert first[2].content == f"Tool calc.add executed successfully:\n{text('5')}"
        assert first[3].content == f"Tool calc.echo executed successfully:\n{text('hi')}"
        assert second.role == ["user", "assistant"]
        assert second[1].content == "no call here"

    def test_unprefixed_tool_goes_to_the_first_server(self, env):
        prompt = step_with(
            env, ['<tool>echo\n{"text": "x"}</tool>', '<tool>add\n{"a": 1, "b": 1}</tool>']
        )
        assert prompt[0, -1].content == f"Tool calc.echo executed successfully:\n{text('x')}"
        assert prompt[1, -1].content == f"Tool calc.add executed successfully:\n{text('2')}"

    def test_errors_are_written_not_raised(self, env):
        calls = (
            "<tool>calc.nope\n{}</tool>"
            '<tool>calc.fail\n{"message": "boom"}</tool>'
            '<tool>other.add\n{"a": 1, "b": 2}</tool>'
            "<tool>calc.add\n{bad json</tool>"
        )
        prompt = step_with(env, [calls, "<tool>calc.add\n{}</tool>"])
        unknown, failing, no_server, bad_json = (prompt[0, i].content for i in range(2, 6))
        assert unknown == f"Tool calc.nope failed:\n{text('Unknown tool: nope')}"
        assert failing.startswith("Tool calc.fail failed:\n")
        assert "Error executing tool fail" in failing
        assert no_server == "Tool other.add failed:\nMCP server 'other' not connected"
        assert bad_json.startswith("Tool calc.add failed:\nFailed to parse tool arguments: ")
        # arguments the tool's schema refuses: the server's validation error
        missing = prompt[1, -1].content
        assert missing.startswith("Tool calc.add failed:\n") and "Field required" in missing

    def test_slow_tool_is_cut_off(self, env, tools):
        tools.timeout = 1.0
        try:
            start = time.monotonic()
            prompt = step_with(env, ['<tool>calc.sleep\n{"seconds": 4}</tool>', "nothing"])
            elapsed = time.monotonic() - start
        finally:
            tools.timeout = 10.0
        assert (
            prompt[0, -1].content == "Tool calc.sleep failed:\nTool execution timed out after 1.0s"
        )
        assert elapsed < 10
        # the session is still usable after a cancelled call
        after = step_with(env, ['<tool>calc.add\n{"a": 4, "b": 5}</tool>', "nothing"])
        assert after[0, -1].content == f"Tool calc.add executed successfully:\n{text('9')}"

    def test_close_ends_the_server_process(self):
        tools = MCPToolTransform(calc_servers())
        env = ChatEnv(batch_size=(1,)).append_transform(tools)
        pid = server_pid(env)
        assert pid != os.getpid() and alive(pid)
        env.close()
        assert not alive(pid)
        tools.close()  # idempotent
        assert tools._process_batch_item("<tool>calc.pid\n{}</tool>", 0) == [
            "Tool calc.pid failed:\nMCP thread not running"
        ]

    def test_server_that_does_not_start(self, caplog):
        with caplog.at_level(logging.ERROR, logger=_mcp.__name__):
            tools = MCPToolTransform({"gone": {"command": "/nonexistent/mcp-server", "args": []}})
        assert "Failed to connect to MCP server 'gone'" in caplog.text
        env = ChatEnv(batch_size=(1,)).append_transform(tools)
        prompt = step_with(env, ["<tool>gone.add\n{}</tool>"])
        assert prompt[0, -1].content == "Tool gone.add failed:\nMCP server 'gone' not connected"
        env.close()

    def test_bad_configuration(self):
        with pytest.raises(
            ValueError, match="MCP server 'calc' needs a configuration dict with a 'command'"
        ):
            MCPToolTransform({"calc": {"args": [SERVER]}})

    def test_missing_package_names_the_extra(self, monkeypatch):
        monkeypatch.setattr(_mcp, "_has_mcp", False)
        with pytest.raises(ImportError, match=r'pip install "rl-envs\[mcp\]"'):
            MCPToolTransform(calc_servers())

    def test_docstring_example(self):
        result = doctest.testmod(_mcp, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 0 and result.failed == 0
