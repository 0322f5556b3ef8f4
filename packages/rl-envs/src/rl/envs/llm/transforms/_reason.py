"""``AddThinkingPrompt``: when a condition holds, ask the policy to think again."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Literal

from tensordict import TensorDictBase, lazy_stack

from rl.data.llm import ChatHistory, History

from ...transforms import Transform
from .._base_env import base_env_of

__all__ = ["AddThinkingPrompt"]

_ANSWER = re.compile(r"<answer>.*?</answer>(?:\s*<\|im_end\|>)?", re.S)
_EOS = "<|im_end|>"


class AddThinkingPrompt(Transform):
    """After a step where ``cond`` holds, prompts the policy to reconsider its answer.

    With ``edit_last_turn`` (role ``"assistant"``), the last ``<answer>...</answer>`` of
    the assistant's turn is replaced by the prompt (appended when there is none);
    otherwise a new ``role`` message with the prompt is appended. The episode then goes on
    (``undo_done`` clears the done flags) and, with ``zero_reward``, that step's reward is
    0. Runs per conversation on a :class:`~rl.envs.llm.ChatEnv` in history mode.

    Args:
        cond (callable): ``cond(next_tensordict_row) -> bool`` on one conversation's step.
        prompt (str, optional): the prompt; defaults to the first of the built-in ones.
        random_prompt (bool): draw one of the built-in prompts each time. Defaults to ``False``.
        role (str): ``"assistant"`` or ``"user"``. Defaults to ``"assistant"``.
        edit_last_turn (bool): edit the assistant's turn (role ``"assistant"`` only).
            Defaults to ``True``.
        zero_reward (bool, optional): defaults to ``edit_last_turn``.
        undo_done (bool): defaults to ``True``.
        egocentric (bool, optional): prompts in the assistant's voice; defaults to
            ``role == "assistant"``.

    Raises:
        ValueError: ``edit_last_turn`` with a role other than ``"assistant"``, or a role
            that is not ``"assistant"`` / ``"user"``.
        RuntimeError: outside a history-mode chat env.

    Examples:
        >>> from rl.envs.llm import AddThinkingPrompt
        >>> t = AddThinkingPrompt(cond=lambda td: True, prompt="Wait...")
        >>> t._replace_answer_with_prompt("<think>a</think><answer>3</answer>")
        '<think>a</think>Wait...'
    """

    DEFAULT_PROMPTS_EG = [
        "But wait, let me think about this more carefully...",
        "Actually, let me reconsider this...",
        "But we can do better. Let me think about it step by step...",
        "Wait, I need to double-check my reasoning...",
        "Actually, let me think about it more carefully...",
        "It looks like I made a mistake. Let me think about it step by step...",
    ]
    DEFAULT_PROMPTS_COG = [
        "But wait, think about this more carefully...",
        "Actually, reconsider this...",
        "But we can do better. Let's think about it step by step...",
        "Wait, you need to double-check your reasoning...",
        "Actually, think about it more carefully...",
        "It looks like you made a mistake. Can you see what went wrong? Let's think about it "
        "step by step...",
    ]

    def __init__(
        self,
        cond: Callable[[TensorDictBase], bool],
        prompt: str | None = None,
        random_prompt: bool = False,
        role: Literal["user", "assistant"] = "assistant",
        edit_last_turn: bool = True,
        zero_reward: bool | None = None,
        undo_done: bool = True,
        egocentric: bool | None = None,
    ):
        super().__init__()
        if role not in ("user", "assistant"):
            raise ValueError(f"role={role!r}: expected 'user' or 'assistant'")
        if edit_last_turn and role != "assistant":
            raise ValueError("edit_last_turn=True needs role='assistant', got role='user'")
        self.cond = cond
        self.role = role
        self.egocentric = role == "assistant" if egocentric is None else egocentric
        if prompt is None:
            prompt = (self.DEFAULT_PROMPTS_EG if self.egocentric else self.DEFAULT_PROMPTS_COG)[0]
        self._prompt = prompt
        self.random_prompt = random_prompt
        self.edit_last_turn = edit_last_turn
        self.zero_reward = edit_last_turn if zero_reward is None else zero_reward
        self.undo_done = undo_done

    @property
    def prompt(self) -> str:
        if self.random_prompt:
            return random.choice(
                self.DEFAULT_PROMPTS_EG if self.egocentric else self.DEFAULT_PROMPTS_COG
            )
        return self._prompt

    def _replace_answer_with_prompt(self, content: str) -> str:
        """``content`` with its last ``<answer>`` block replaced by the prompt (appended,
        after a blank line, when there is no answer block); a final ``<|im_end|>`` is kept."""
        prompt = self.prompt
        matches = list(_ANSWER.finditer(content))
        if not matches:
            return content.rstrip() + "\n\n" + prompt
        start, end = matches[-1].span()
        out = (content[:start] + prompt + content[end:]).rstrip()
        if content.endswith(_EOS) and not out.endswith(_EOS):
            out += _EOS
        return out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        env = base_env_of(self)
        if env is None or getattr(env, "input_mode", None) != "history":
            raise RuntimeError("AddThinkingPrompt needs a ChatEnv in history mode")
        if next_tensordict.batch_dims != 1:
            raise ValueError(
                f"AddThinkingPrompt runs on a [B] batch, got {tuple(next_tensordict.batch_size)}"
            )
        top = self._top_env()
        done_keys = list(top.done_keys) if top is not None else ["done", "terminated"]
        reward_keys = list(top.reward_keys) if top is not None else ["reward"]
        history = next_tensordict["history"].prompt
        rows, changed = [], False
        for i, row in enumerate(history.unbind(0)):
            if self.cond(next_tensordict[i]):
                changed = True
                if self.edit_last_turn:
                    last = row[-1]
                    edited = History(
                        role="assistant",
                        content=self._replace_answer_with_prompt(str(last.content)),
                        batch_size=(),
                    )
                    row = lazy_stack([*row[:-1].unbind(0), edited])
                else:
                    row = lazy_stack(
                        [
                            *row.unbind(0),
                            History(role=self.role, content=self.prompt, batch_size=()),
                        ]
                    )
                if self.undo_done:
                    for key in done_keys:
                        flag = next_tensordict.get(key, None)
                        if flag is not None:
                            flag[i] = False
                if self.zero_reward:
                    for key in reward_keys:
                        reward = next_tensordict.get(key, None)
                        if reward is not None:
                            reward[i] = 0
            rows.append(row)
        if changed:
            next_tensordict.set(
                "history",
                ChatHistory(prompt=lazy_stack(rows), batch_size=next_tensordict.batch_size),
            )
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset
