"""``IFEvalEnv``: instruction following with verifiable instructions (IFEval), from a local copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from tensordict import TensorClass

from rl.core import Composite, NonTensor, Unbounded

from ...transforms import StepCounter
from .._chat import DatasetChatEnv
from ..reward import IfEvalScorer

__all__ = ["IFEvalData", "IFEvalEnv"]


class IFEvalData(TensorClass["nocast"]):
    """One IFEval row: its ``key``, ``instruction_id_list``, per-instruction ``kwargs`` and
    ``query`` (the prompt), and optionally what a policy produced."""

    key: torch.Tensor
    instruction_id_list: list[str]
    kwargs: list[dict]
    query: str
    response: str | None = None
    tokens: torch.Tensor | None = None
    tokens_response: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    reward: torch.Tensor | None = None

    @classmethod
    def default_spec(cls, shape: torch.Size, device: torch.device | None = None) -> Composite:
        """The specs of the dataset fields a reset writes."""
        return Composite(
            key=Unbounded(shape=shape, dtype=torch.int64, device=device),
            instruction_id_list=NonTensor(
                shape=shape, device=device, example_data=["punctuation:no_comma"]
            ),
            kwargs=NonTensor(shape=shape, device=device, example_data=[{}]),
            query=NonTensor(shape=shape, device=device, example_data="Answer without commas."),
            shape=shape,
            device=device,
        )


def _collate_fn(batch: list[dict]) -> dict:
    def as_list(value):
        return list(value) if isinstance(value, (list, tuple)) else [value]

    return {
        "key": [int(row["key"]) for row in batch],
        "instruction_id_list": [as_list(row["instruction_id_list"]) for row in batch],
        "kwargs": [as_list(row["kwargs"]) for row in batch],
        "query": [row["prompt"] for row in batch],
    }


class IFEvalEnv(DatasetChatEnv):
    """IFEval as a chat environment: each prompt carries verifiable instructions ("no
    commas", "at least 3 bullet points"...) that :class:`~rl.envs.llm.IfEvalScorer` checks.

    Reads a LOCAL copy of IFEval (rows with ``"key"``, ``"prompt"``,
    ``"instruction_id_list"``, ``"kwargs"``), in any form :class:`~rl.envs.llm.GSM8KEnv`
    takes; TorchRL's default ``"google/IFeval"`` is refused (no download).

    Keyword Args:
        as :class:`~rl.envs.llm.GSM8KEnv` (the reward is :class:`~rl.envs.llm.IfEvalScorer`).

    Examples:
        >>> from rl.envs.llm import IFEvalEnv
        >>> rows = [{"key": 1, "prompt": "Say hi, no commas.",
        ...          "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}]
        >>> list(IFEvalEnv(dataset=rows).reset()["instruction_id_list"])
        [['punctuation:no_comma']]
    """

    SYSTEM_PROMPT = (
        "You are a helpful AI assistant that follows instructions extremely well.\n\n"
        "IMPORTANT: You must respond in a specific format for every task:\n\n"
        "1. First, think through the problem step by step and write your reasoning between "
        "<think> and </think> tags\n"
        "2. Then, provide your final answer between <answer> and </answer> tags\n\n"
        "CRITICAL RULES:\n"
        "- ALWAYS use <think>...</think> and <answer>...</answer> tags exactly as shown\n"
        "- Do NOT use <thought>, <reasoning>, or any other tag variations\n"
        "- Your <answer> section will be evaluated, so make it complete and accurate\n"
        "- Follow ALL specific requirements in the user's request (formatting, content, etc.)\n"
        "- If the user asks for placeholders like [restaurant], include them exactly as requested\n"
        "- Pay attention to capitalization, punctuation, and other formatting requirements"
    )

    def __init__(
        self,
        *,
        dataset: Any = "google/IFeval",
        shuffle: bool = True,
        num_envs: int = 1,
        repeats: int | None = None,
        batch_size_dl: int = 1,
        seed: int | None = None,
        group_repeats: bool = False,
        tokenizer=None,
        device: torch.device | None = None,
        template_kwargs: dict[str, Any] | None = None,
        apply_template: bool | None = False,
        compute_reward: bool = True,
        collate_fn: Callable | None = None,
        max_steps: int = 1,
        input_mode: Literal["history", "text", "tokens"] = "history",
        split: str | None = None,
        ray_backend: bool = False,
        dataloader_actor_name: str | None = None,
    ):
        super().__init__(
            dataset=dataset,
            shuffle=shuffle,
            split=split,
            num_envs=num_envs,
            repeats=repeats,
            batch_size_dl=batch_size_dl,
            seed=seed,
            group_repeats=group_repeats,
            tokenizer=tokenizer,
            device=device,
            template_kwargs=template_kwargs,
            apply_template=apply_template,
            collate_fn=_collate_fn if collate_fn is None else collate_fn,
            input_mode=input_mode,
            data_key="query",
            ray_backend=ray_backend,
            dataloader_actor_name=dataloader_actor_name,
        )
        if max_steps:
            self.append_transform(StepCounter(max_steps=max_steps))
        if compute_reward:
            self.append_transform(IfEvalScorer())
