"""``MATHEnv``: competition mathematics problems (MATH), from a local copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch

from ...transforms import StepCounter
from .._chat import DatasetChatEnv
from ..reward import MATHRewardParser

__all__ = ["MATHEnv"]


def _collate_fn(batch: list[dict]) -> dict:
    return {
        "query": [row["problem"] for row in batch],
        "answer": [row["solution"] for row in batch],
    }


class MATHEnv(DatasetChatEnv):
    r"""MATH as a chat environment: rows with ``"problem"`` and ``"solution"`` (the answer
    in the solution's last ``\boxed{}``), scored by :class:`~rl.envs.llm.MATHRewardParser`.

    Reads a LOCAL dataset (see :class:`~rl.envs.llm.GSM8KEnv` for the accepted forms);
    TorchRL's default ``"DigitalLearningGmbH/MATH-lighteval"`` is refused (no download).

    Keyword Args:
        as :class:`~rl.envs.llm.GSM8KEnv`.

    Examples:
        >>> from rl.envs.llm import MATHEnv
        >>> rows = [{"problem": "1/2 + 0?", "solution": r"It is $\boxed{\frac{1}{2}}$."}]
        >>> list(MATHEnv(dataset=rows).reset()["answer"])
        ['It is $\\boxed{\\frac{1}{2}}$.']
    """

    SYSTEM_PROMPT = (
        "A conversation between User and Assistant. The user asks a math problem, and the "
        "Assistant solves it.\nThe assistant first thinks about the reasoning process in the "
        "mind and then provides the user with the answer.\nThe reasoning process and answer "
        "are enclosed within <think></think> and <answer></answer> tags, respectively, i.e.,\n"
        "<think>reasoning process here</think> <answer>answer here</answer>.\nThe answer "
        "should be a mathematical expression (use LaTeX if needed)."
    )

    def __init__(
        self,
        *,
        dataset: Any = "DigitalLearningGmbH/MATH-lighteval",
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
            ray_backend=ray_backend,
            dataloader_actor_name=dataloader_actor_name,
        )
        if max_steps:
            self.append_transform(StepCounter(max_steps=max_steps))
        if compute_reward:
            self.append_transform(MATHRewardParser(tokenizer=tokenizer))
