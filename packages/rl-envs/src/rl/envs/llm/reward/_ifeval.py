"""``IfEvalScorer``: IFEval's verifiable instructions as a reward, and ``IFEvalScoreData``."""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from tensordict import (
    NestedKey,
    NonTensorData,
    NonTensorStack,
    TensorClass,
    TensorDictBase,
    lazy_stack,
)

from rl.core import Composite, Unbounded

from ...transforms import Transform
from .._base_env import input_mode_of
from ._ifeval_checks import check_instruction

__all__ = ["IFEvalScoreData", "IfEvalScorer"]

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


class IFEvalScoreData(TensorClass):
    """IFEval's four accuracies of one response: ``prompt_level_*_acc`` (``[*B, 1]``, every
    instruction followed) and ``inst_level_*_acc`` (``[*B, n_instructions]``, each one),
    ``strict`` on the response as is, ``loose`` on any of its variants (first / last line
    dropped, ``*`` removed)."""

    prompt_level_strict_acc: torch.Tensor | None = None
    inst_level_strict_acc: torch.Tensor | None = None
    prompt_level_loose_acc: torch.Tensor | None = None
    inst_level_loose_acc: torch.Tensor | None = None

    @classmethod
    def default_spec(cls, shape: torch.Size, device: torch.device | None = None) -> Composite:
        """The spec of a batch of scores (``-1``: one entry per instruction)."""
        shape = torch.Size(shape)
        return Composite(
            {
                name: Unbounded(shape=(*shape, -1), dtype=torch.bool, device=device)
                for name in (
                    "prompt_level_strict_acc",
                    "inst_level_strict_acc",
                    "prompt_level_loose_acc",
                    "inst_level_loose_acc",
                )
            },
            shape=shape,
            device=device,
        )


def _loose_variants(response: str) -> list[str]:
    lines = response.split("\n")
    cut = [
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    return [response, response.replace("*", ""), *cut, *(c.replace("*", "") for c in cut)]


def score_response(
    response: str, instruction_ids: list[str], kwargs: list[dict], prompt: str | None = None
) -> IFEvalScoreData:
    """IFEval's strict and loose accuracies of one response.

    Raises:
        ValueError: ``instruction_ids`` and ``kwargs`` of different lengths.
        KeyError: an unknown instruction id.
    """
    if len(instruction_ids) != len(kwargs):
        raise ValueError(
            f"{len(instruction_ids)} instruction ids for {len(kwargs)} kwargs dicts: one per instruction"
        )
    strict, loose = [], []
    variants = _loose_variants(response)
    for instruction, args in zip(instruction_ids, kwargs):
        args = dict(args or {})
        if (
            instruction == "combination:repeat_prompt"
            and not args.get("prompt_to_repeat")
            and prompt
        ):
            args["prompt_to_repeat"] = prompt
        strict.append(check_instruction(instruction, response, args))
        loose.append(any(check_instruction(instruction, v, args) for v in variants))
    return IFEvalScoreData(
        prompt_level_strict_acc=torch.tensor([all(strict)]),
        inst_level_strict_acc=torch.tensor(strict, dtype=torch.bool),
        prompt_level_loose_acc=torch.tensor([all(loose)]),
        inst_level_loose_acc=torch.tensor(loose, dtype=torch.bool),
        batch_size=(),
    )


def _python(value):
    if isinstance(value, NonTensorStack):
        return value.tolist()
    if isinstance(value, NonTensorData):
        return value.data
    return value


class IfEvalScorer(Transform):
    """Scores the ``<answer>`` of the assistant's last turn against IFEval's instructions.

    Reads, per conversation, the instruction ids (``instruction_ids_key``), their
    arguments (``keyword_args_key``, one dict per instruction) and the turn in
    ``("history", "full")``; writes an :class:`IFEvalScoreData` under ``score_key`` and,
    with ``aggregate_reward``, a ``reward`` of shape ``[*B, 1, 1]``: ``0.4 * prompt strict
    + 0.3 * mean instruction strict + 0.2 * prompt loose + 0.1 * mean instruction loose``
    (``format_weights``), plus 0.1 for exactly one ``<answer>`` block and 0.05 for exactly
    one ``<think>`` block. An answer ends the episode (``set_done_if_answer``). Needs a
    :class:`~rl.envs.llm.ChatEnv` in history mode. The checks are rl's own (25 IFEval
    instructions; the language ones need ``langdetect``).

    Keyword Args:
        instruction_ids_key (NestedKey): defaults to ``"instruction_id_list"``.
        prompt_key (NestedKey): defaults to ``"text"`` (TorchRL's; the user turn is read
            from the history).
        keyword_args_key (NestedKey): defaults to ``"kwargs"``.
        id_key (NestedKey): defaults to ``"key"``.
        response_column (NestedKey): kept for TorchRL's signature.
        score_key (NestedKey): defaults to ``"ifeval_score"``.
        aggregate_reward (bool or callable): ``True`` for the default aggregator, a
            callable ``f(score, think_blocks=, answer_blocks=, complete=) -> [*B, 1]``, or
            ``False`` (no reward).
        format_weights (list of 4 floats, optional): defaults to ``[0.4, 0.3, 0.2, 0.1]``.
        verbose (bool): kept for TorchRL's signature.
        set_done_if_answer (bool): defaults to ``True``.

    Examples:
        >>> from rl.envs.llm import IfEvalScorer
        >>> from rl.envs.llm.reward import IFEvalScoreData
        >>> scorer = IfEvalScorer()
        >>> score = IFEvalScoreData(prompt_level_strict_acc=torch.tensor([True]),
        ...     inst_level_strict_acc=torch.tensor([True, False]),
        ...     prompt_level_loose_acc=torch.tensor([True]),
        ...     inst_level_loose_acc=torch.tensor([True, True]), batch_size=())
        >>> scorer.default_reward_aggregator(score, answer_blocks=["x"])
        tensor([0.9500])
    """

    def __init__(
        self,
        *,
        instruction_ids_key: NestedKey = "instruction_id_list",
        prompt_key: NestedKey = "text",
        keyword_args_key: NestedKey = "kwargs",
        id_key: NestedKey = "key",
        response_column: NestedKey = "text_response",
        score_key: NestedKey = "ifeval_score",
        aggregate_reward: bool | Callable = True,
        format_weights: list[float] | None = None,
        verbose: bool = False,
        set_done_if_answer: bool = True,
    ):
        super().__init__()
        self.instruction_ids_key = instruction_ids_key
        self.prompt_key = prompt_key
        self.keyword_args_key = keyword_args_key
        self.id_key = id_key
        self.response_key = response_column
        self.score_key = score_key
        self.aggregate_reward = aggregate_reward
        self.format_weights = (
            list(format_weights) if format_weights is not None else [0.4, 0.3, 0.2, 0.1]
        )
        if len(self.format_weights) != 4:
            raise ValueError(f"format_weights takes 4 weights, got {self.format_weights}")
        self.verbose = verbose
        self.set_done_if_answer = set_done_if_answer

    def default_reward_aggregator(
        self,
        score: IFEvalScoreData,
        think_blocks: list[str] | None = None,
        answer_blocks: list[str] | None = None,
        complete: bool | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The weighted accuracies plus the format bonus, ``[*B, 1]``."""
        dtype = torch.get_default_dtype()
        parts = torch.stack(
            [
                score.prompt_level_strict_acc.to(dtype).sum(-1),
                score.inst_level_strict_acc.to(dtype).mean(-1),
                score.prompt_level_loose_acc.to(dtype).sum(-1),
                score.inst_level_loose_acc.to(dtype).mean(-1),
            ],
            -1,
        )
        value = (parts * torch.tensor(self.format_weights, dtype=dtype)).sum(-1, keepdim=True)
        bonus = 0.0
        if answer_blocks and len(answer_blocks) == 1:
            bonus += 0.1
        if think_blocks and len(think_blocks) == 1:
            bonus += 0.05
        return value + bonus

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if input_mode_of(self) != "history":
            raise ValueError("IfEvalScorer only supports the history input mode")
        if next_tensordict.batch_dims != 1:
            raise ValueError(
                f"IfEvalScorer runs on a [B] batch, got {tuple(next_tensordict.batch_size)}"
            )
        ids = _python(tensordict.get(self.instruction_ids_key, None))
        kwargs = _python(tensordict.get(self.keyword_args_key, None))
        if ids is None or kwargs is None:
            raise KeyError(
                f"IfEvalScorer reads {self.instruction_ids_key!r} and {self.keyword_args_key!r}, "
                f"missing from keys {sorted(map(str, tensordict.keys()))}"
            )
        full = tensordict.get(("history", "full"), None)
        if full is None:
            raise KeyError(
                "IfEvalScorer reads the assistant's turn at ('history', 'full'), missing"
            )
        prompts = tensordict.get(("history", "prompt"), None)
        scores, rewards, answered = [], [], []
        for i, row in enumerate(full.unbind(0)):
            last = row[-1]
            response = str(last.content)
            think, answer = _THINK.findall(response), _ANSWER.findall(response)
            prompt = str(prompts[i][-1].content) if prompts is not None else None
            score = score_response(
                answer[0] if answer else "", list(ids[i]), list(kwargs[i]), prompt
            )
            scores.append(score)
            answered.append(bool(answer))
            if self.aggregate_reward:
                aggregate = (
                    self.aggregate_reward
                    if callable(self.aggregate_reward)
                    else self.default_reward_aggregator
                )
                rewards.append(
                    aggregate(
                        score, think_blocks=think, answer_blocks=answer, complete=last.is_complete
                    ).reshape(1, 1)
                )
        next_tensordict.set(self.score_key, lazy_stack(scores))
        if self.aggregate_reward:
            next_tensordict.set("reward", torch.stack(rewards).to(torch.get_default_dtype()))
        if self.set_done_if_answer:
            flags = torch.tensor(answered).reshape(-1, 1)
            for key in ("done", "terminated"):
                flag = next_tensordict.get(key, None)
                if flag is not None:
                    next_tensordict.set(key, flag | flags)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        if self.aggregate_reward:
            reward_spec["reward"] = Unbounded(
                shape=(*reward_spec.shape, 1, 1), device=reward_spec.device
            )
        return reward_spec
