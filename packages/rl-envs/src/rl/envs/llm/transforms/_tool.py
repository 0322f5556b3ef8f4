"""``ToolTransformBase``: the step of every tool transform. It reads the assistant's last
turn of each conversation, lets the subclass run the tools it names, and appends one tool
message per result."""

from __future__ import annotations

from tensordict import TensorDictBase, lazy_stack

from rl.data.llm import ChatHistory, History

from ...transforms import Transform
from .._base_env import base_env_of

__all__ = ["ToolTransformBase"]


class ToolTransformBase(Transform):
    """Runs the tools named in the assistant's last turn and appends their results.

    A subclass implements :meth:`_process_batch_item`: given the text of one
    conversation's last turn, it returns the result strings of the tools that turn called
    (``None`` when it called none). Each result becomes a message of role
    :attr:`tool_role` at the end of that conversation's ``("history", "prompt")``;
    conversations without a call are left as they are (rows may then differ in length:
    the history is a lazy stack). Works under a :class:`~rl.envs.llm.ChatEnv` in history
    mode, on a ``[B]`` batch.

    Raises:
        RuntimeError: outside a history-mode chat env.
        ValueError: on a batch that is not one-dimensional.
    """

    tool_role: str = "tool"

    def _process_batch_item(self, content: str, index: int) -> list[str] | None:
        """The results of the tools called in ``content`` (conversation ``index``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _process_batch_item")

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        env = base_env_of(self)
        if env is None or getattr(env, "input_mode", None) != "history":
            raise RuntimeError(f"{type(self).__name__} needs a ChatEnv in history mode")
        if next_tensordict.batch_dims != 1:
            raise ValueError(
                f"{type(self).__name__} runs on a [B] batch, got {tuple(next_tensordict.batch_size)}"
            )
        history = next_tensordict["history"].prompt
        rows, changed = [], False
        for i, row in enumerate(history.unbind(0)):
            content = row[-1].content
            results = self._process_batch_item(str(getattr(content, "text", content)), i)
            if results:
                changed = True
                tools = lazy_stack(
                    [History(role=self.tool_role, content=r, batch_size=()) for r in results]
                )
                row = row.extend(tools)
            rows.append(row)
        if changed:
            next_tensordict.set(
                "history",
                ChatHistory(prompt=lazy_stack(rows), batch_size=next_tensordict.batch_size),
            )
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset
