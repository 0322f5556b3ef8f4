"""``CountdownEnv``: the Countdown numbers game, generated on the fly (no dataset)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader, IterableDataset

from ...transforms import StepCounter
from .._chat import DatasetChatEnv
from ..reward import CountdownRewardParser

__all__ = ["CountdownEnv"]


class _CountdownProblems(IterableDataset):
    """Endless Countdown problems: ``num_count`` numbers in ``[1, max_number]`` and a target
    reached by combining all of them with ``+ - *`` (its absolute value; the numbers' sum
    when that is 0 or above ``max_target``)."""

    def __init__(self, num_count: int, max_number: int, max_target: int, seed: int | None):
        self.num_count, self.max_number, self.max_target = num_count, max_number, max_target
        self.rng = random.Random(seed)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, str]:
        numbers = [self.rng.randint(1, self.max_number) for _ in range(self.num_count)]
        pool = list(numbers)
        self.rng.shuffle(pool)
        value = pool[0]
        for n in pool[1:]:
            value = self.rng.choice((value + n, value - n, value * n))
        target = abs(value)
        if target == 0 or target > self.max_target:
            target = sum(numbers)
        query = (
            f"Using the numbers {numbers}, create an arithmetic expression that equals "
            f"{target}. You may use each number at most once. Only use +, -, *, / and parentheses."
        )
        return {"query": query, "answer": f"target={target}, numbers={','.join(map(str, numbers))}"}


def _collate_fn(batch: list[dict]) -> dict:
    return {key: [row[key] for row in batch] for key in batch[0]}


class CountdownEnv(DatasetChatEnv):
    """The Countdown numbers game for LLM post-training, with problems generated on the fly.

    Each problem gives ``num_count`` numbers and a target that combining them reaches; the
    answer is an expression using each number at most once, scored by
    :class:`~rl.envs.llm.CountdownRewardParser`.

    Keyword Args:
        num_count (int): numbers per problem. Defaults to ``4``.
        max_number (int): the largest number. Defaults to ``100``.
        max_target (int): the largest target. Defaults to ``1000``.
        seed (int, optional): the problems' seed.
        shuffle (bool): ignored (problems are random), kept for TorchRL's signature.
        num_envs, repeats, batch_size_dl, group_repeats, tokenizer, device,
        template_kwargs, apply_template, input_mode: as :class:`~rl.envs.llm.DatasetChatEnv`.
        compute_reward (bool): append the reward parser. Defaults to ``True``.
        collate_fn (callable, optional): stacks problems; defaults to a dict of lists.
        max_steps (int): turns per episode. Defaults to ``1``.

    Examples:
        >>> from rl.envs.llm import CountdownEnv
        >>> env = CountdownEnv(seed=0, num_count=3, max_number=9)
        >>> env.reset()["answer"][0].startswith("target=")
        True
    """

    SYSTEM_PROMPT = (
        "A conversation between User and Assistant. The user gives a set of numbers and a "
        "target. The Assistant must find an arithmetic expression using each given number at "
        "most once that equals the target.\nThe reasoning process and answer are enclosed "
        "within <think></think> and <answer></answer> tags, respectively.\nThe answer should "
        "contain ONLY the arithmetic expression (e.g. (25 + 3) * 4)."
    )

    def __init__(
        self,
        *,
        num_count: int = 4,
        max_number: int = 100,
        max_target: int = 1000,
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
    ):
        dataloader = DataLoader(
            _CountdownProblems(num_count, max_number, max_target, seed),
            batch_size=batch_size_dl,
            collate_fn=_collate_fn if collate_fn is None else collate_fn,
        )
        self._from_dataloader(
            self,
            dataloader,
            repeats=repeats,
            device=device,
            group_repeats=group_repeats,
            batch_size=(num_envs,),
            primers=None,
            tokenizer=tokenizer,
            template_kwargs=template_kwargs,
            input_mode=input_mode,
            data_key=None,
            system_prompt=None,
        )
        if max_steps:
            self.append_transform(StepCounter(max_steps=max_steps))
        if compute_reward:
            self.append_transform(CountdownRewardParser(tokenizer=tokenizer))
