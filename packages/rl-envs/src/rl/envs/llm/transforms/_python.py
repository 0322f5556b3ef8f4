"""``PythonInterpreter``: runs the Python blocks of the policy's last turn in a separate,
time-limited interpreter and answers with their output as a tool message."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from ._tool import ToolTransformBase

__all__ = ["PythonInterpreter"]

_BLOCK = re.compile(r"```python\n(.*?)\n```", re.S)


def _limits(memory_bytes: int | None):
    """A ``preexec_fn`` capping the child's address space (POSIX)."""

    def apply():  # pragma: no cover - runs in the child
        import resource

        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply if os.name == "posix" else None


class PythonInterpreter(ToolTransformBase):
    r"""Executes the `` ```python `` blocks of the assistant's last turn and appends each
    block's output to the conversation, as a message of role ``tool_name``.

    Each block runs in a NEW interpreter process (``python -I``: no user site, no
    ``PYTHON*`` variables), in an empty temporary folder, killed after ``timeout``
    seconds, with its address space capped (``memory_limit`` bytes, POSIX); code never
    runs in the caller's process. A block's message reads
    ``"Code block <i> executed successfully:\n<stdout>"`` or
    ``"Code block <i> failed:\n<stderr>"`` (``"Code execution timed out"`` when killed).
    Appended to a :class:`~rl.envs.llm.ChatEnv` in history mode.

    Args:
        tokenizer: kept for TorchRL's signature.
        tool_name (str): the role of the output messages. Defaults to ``"tool"``.
        persistent (bool): one long-lived interpreter per conversation (state kept between
            blocks); not supported here (``False``).
        timeout (float): seconds a block may run. Defaults to ``10.0``.
        services (str, optional): a shared (Ray) executor; not supported (``None``).
        memory_limit (int, optional): the child's address-space cap in bytes. Defaults to
            2 GiB.

    Raises:
        NotImplementedError: ``persistent=True`` or a ``services`` back-end.
        RuntimeError: outside a history-mode chat env.

    Examples:
        >>> from rl.envs.llm import PythonInterpreter
        >>> PythonInterpreter(timeout=5).execute("print(6 * 7)")["stdout"]
        '42\n'
    """

    def __init__(
        self,
        tokenizer=None,
        tool_name: str = "tool",
        persistent: bool = False,
        timeout: float = 10.0,
        services: str | None = None,
        service_name: str = "python_executor",
        namespace: str | None = None,
        memory_limit: int | None = 2 * 1024**3,
    ):
        if persistent:
            raise NotImplementedError(
                "persistent=True (one interpreter kept per conversation) is not supported: "
                "each block runs in a fresh process"
            )
        if services is not None:
            raise NotImplementedError(
                f"services={services!r} is not supported (local processes only)"
            )
        super().__init__()
        self.tokenizer = tokenizer
        self.tool_role = tool_name
        self.persistent = persistent
        self.timeout = float(timeout)
        self.services = services
        self.service_name = service_name
        self.namespace = namespace
        self.memory_limit = memory_limit

    def execute(self, code: str) -> dict:
        """Runs ``code`` in a fresh interpreter: ``{"success", "stdout", "stderr", "returncode"}``."""
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "block.py")
            with open(path, "w") as f:
                f.write(code)
            env = {"PATH": os.environ.get("PATH", ""), "PYTHONIOENCODING": "utf-8"}
            try:
                done = subprocess.run(
                    [sys.executable, "-I", path],
                    cwd=folder,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout,
                    preexec_fn=_limits(self.memory_limit),
                )
            except subprocess.TimeoutExpired:
                return {
                    "success": False,
                    "stdout": "",
                    "stderr": "Code execution timed out",
                    "returncode": -1,
                }
        return {
            "success": done.returncode == 0,
            "stdout": done.stdout,
            "stderr": done.stderr,
            "returncode": done.returncode,
        }

    def _extract_python_code(self, text: str) -> list[str]:
        return _BLOCK.findall(text)

    def _process_batch_item(self, content: str, index: int) -> list[str] | None:
        """The output messages of one turn's blocks (``None`` when it has no block)."""
        blocks = self._extract_python_code(content)
        if not blocks:
            return None
        out = []
        for i, code in enumerate(blocks, start=1):
            result = self.execute(code)
            if result["success"]:
                out.append(f"Code block {i} executed successfully:\n{result['stdout']}")
            else:
                out.append(f"Code block {i} failed:\n{result['stderr']}")
        return out
