"""What the ``<think>`` / ``<answer>`` reward parsers share: reading the policy's last turn,
writing the reward entries, ending the episode when an answer is given."""

from __future__ import annotations

import re
from typing import Any, Literal

import torch
from tensordict import NestedKey, NonTensorData, NonTensorStack, TensorDictBase

from rl.core import Composite, Unbounded

from ...transforms import Transform
from .._base_env import input_mode_of

__all__ = ["AnswerRewardParser", "extract_tags"]

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_OUT_KEYS = ["reward_answer", "reward_think", "reward_right", "reward", "success"]


def extract_tags(text: str) -> tuple[str, str]:
    """``(think, answer)``: the stripped contents of the first ``<think>`` and ``<answer>``
    blocks of ``text`` (``""`` where a block is missing)."""
    think = _THINK.search(text)
    answer = _ANSWER.search(text)
    return (
        think.group(1).strip() if think else "",
        answer.group(1).strip() if answer else "",
    )


def _as_list(value: Any) -> list:
    if isinstance(value, NonTensorStack):
        return value.tolist()
    if isinstance(value, NonTensorData):
        return [value.data]
    if isinstance(value, (str, bytes)):
        return [value]
    return list(value)


class AnswerRewardParser(Transform):
    """Base of the reward parsers of answers in ``<answer>...</answer>`` tags.

    After each step it reads the policy's last turn (``(mode, "full")`` in the
    ``input_mode`` of the :class:`~rl.envs.llm.ChatEnv` it is appended to) and the
    reference under ``"answer"``, and writes, each of shape ``[*B, 1, 1]``:
    ``reward_answer`` (1 when an ``<answer>`` block is there), ``reward_think`` (1 when a
    ``<think>`` block is), ``reward_right`` and ``reward`` (``correct_reward`` for a right
    answer, ``format_reward`` for a wrong one, 0 with no answer) and ``success``. With
    ``set_done_if_answer``, an answer ends the episode.

    Subclasses define ``score(answer, reference) -> bool``.
    """

    def __init__(
        self,
        tokenizer=None,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
        eos_token: str | None = None,
        set_done_if_answer: bool = True,
        input_mode: Literal["history", "text", "tokens"] | None = None,
        format_reward: float = 0.1,
        correct_reward: float = 1.0,
    ):
        super().__init__()
        self.tokenizer = tokenizer
        if eos_token is None and tokenizer is not None:
            eos_token = tokenizer.eos_token
        self.eos_token = eos_token
        self.set_done_if_answer = set_done_if_answer
        self._input_mode = input_mode
        self.format_reward = float(format_reward)
        self.correct_reward = float(correct_reward)
        if in_keys is not None:
            self.in_keys = in_keys
        self.out_keys = list(out_keys) if out_keys is not None else list(_OUT_KEYS)

    def _on_keys_changed(self) -> None:
        # in_keys (response, reference) and out_keys (the five reward entries) are not pairs
        self.__dict__["_io_pairs"] = []
        self.__dict__["_io_pairs_inv"] = []

    @property
    def input_mode(self) -> str:
        if self._input_mode is None:
            return input_mode_of(self)
        return self._input_mode

    def _keys(self) -> list[NestedKey]:
        if self.in_keys:
            return self.in_keys
        return [(self.input_mode, "full"), "answer"]

    # ------------------------------------------------------------------ reading
    def _completions(self, tensordict: TensorDictBase) -> list[str]:
        """The text of the policy's last turn, one per row of a ``[B]`` tensordict."""
        key = self._keys()[0]
        value = tensordict.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__} reads the policy's output at {key!r}; the tensordict "
                f"has keys {sorted(map(str, tensordict.keys(True, True)))}"
            )
        mode = self.input_mode
        if mode == "history":
            texts = []
            for row in value.unbind(0):
                content = row[-1].content
                texts.append(content.text if hasattr(content, "text") else str(content))
        elif mode == "text":
            texts = [str(t) for t in _as_list(value)]
        else:
            if self.tokenizer is None:
                raise ValueError(f"{type(self).__name__} needs a tokenizer in input_mode='tokens'")
            rows = tensordict.get(key, as_list=True)
            texts = [self.tokenizer.decode(r.tolist()) for r in rows]
        if self.eos_token:
            texts = [t.removesuffix(self.eos_token) for t in texts]
        return [t.removesuffix("<|im_end|>") for t in texts]

    # ------------------------------------------------------------------ scoring
    def score(self, answer: str, reference: str) -> bool:
        """Whether ``answer`` (the ``<answer>`` block) is right for ``reference``."""
        raise NotImplementedError

    def reward_of(self, completion: str, reference: str) -> dict[str, float | bool]:
        """The reward entries of one completion against its reference."""
        think, answer = extract_tags(completion)
        right = bool(answer) and self.score(answer, reference)
        if right:
            value = self.correct_reward
        elif answer:
            value = self.format_reward
        else:
            value = 0.0
        return {
            "reward_answer": float(bool(answer)),
            "reward_think": float(bool(think)),
            "reward_right": value,
            "reward": value,
            "success": right,
        }

    # ------------------------------------------------------------------ env hooks
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if next_tensordict.batch_dims > 1:
            flat, next_flat = tensordict.reshape(-1), next_tensordict.reshape(-1)
            out = self._step(flat, next_flat)
            return out.reshape(next_tensordict.batch_size)
        if next_tensordict.batch_dims == 0:
            out = self._step(tensordict.unsqueeze(0), next_tensordict.unsqueeze(0))
            return out.squeeze(0)
        completions = self._completions(tensordict)
        ref_key = self._keys()[1]
        references = next_tensordict.get(ref_key, None)
        if references is None:
            references = tensordict.get(ref_key, None)
        if references is None:
            raise KeyError(
                f"{type(self).__name__} reads the reference answer at {ref_key!r}, which is missing"
            )
        references = [str(r) for r in _as_list(references)]
        if len(references) != len(completions):
            raise ValueError(
                f"{len(completions)} completions for {len(references)} references at {ref_key!r}"
            )
        rows = [self.reward_of(c, r) for c, r in zip(completions, references)]
        device = next_tensordict.device
        for name, out_key in zip(_OUT_KEYS, self.out_keys):
            dtype = torch.bool if name == "success" else torch.get_default_dtype()
            value = torch.tensor([row[name] for row in rows], dtype=dtype, device=device)
            value = value.reshape(-1, 1, 1)
            previous = next_tensordict.get(out_key, None)
            if previous is not None and name != "success":
                value = value + previous.reshape(value.shape).to(value.dtype)
            next_tensordict.set(out_key, value)
        if self.set_done_if_answer:
            answered = torch.tensor([row["reward_answer"] > 0 for row in rows], device=device)
            for key in ("done", "terminated"):
                flag = next_tensordict.get(key, None)
                if flag is not None:
                    next_tensordict.set(key, flag | answered.reshape(flag.shape))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """On data: scores ``tensordict`` (its ``"next"`` if present) in place."""
        next_td = tensordict.get("next", None)
        if next_td is None:
            return self._step(tensordict, tensordict)
        tensordict.set("next", self._step(tensordict, next_td))
        return tensordict

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        shape = (*reward_spec.shape, 1, 1)
        for name, out_key in zip(_OUT_KEYS, self.out_keys):
            dtype = torch.bool if name == "success" else torch.get_default_dtype()
            reward_spec[out_key] = Unbounded(shape=shape, dtype=dtype, device=reward_spec.device)
        return reward_spec
