"""``GSM8KEnv``: grade-school maths word problems (GSM8K), from a local copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from tensordict import NestedKey, NonTensorData, NonTensorStack, TensorDictBase

from ...transforms import StepCounter, Transform
from .._chat import DatasetChatEnv
from .._dataset import make_dataloader
from .._llm_env import LLMEnv
from ..reward import GSM8KRewardParser

__all__ = ["GSM8KEnv", "GSM8KPrepareQuestion", "make_gsm8k_env"]

BASE_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think></think> and <answer></answer> tags, respectively, i.e., <think>reasoning process "
    "here</think> <answer>answer here</answer>. User: %s. Assistant: <think>"
)


class GSM8KPrepareQuestion(Transform):
    """Wraps a raw question in GSM8K's think/answer instruction, before the env resets.

    Args:
        in_keys (list of NestedKey, optional): the questions. Defaults to ``["text"]``.
        out_keys (list of NestedKey, optional): where the prompts go; defaults to ``in_keys``.

    Examples:
        >>> from rl.envs.llm import GSM8KPrepareQuestion
        >>> GSM8KPrepareQuestion()._modify_str("1+1?").endswith("User: 1+1?. Assistant: <think>")
        True
    """

    def __init__(
        self, in_keys: list[NestedKey] | None = None, out_keys: list[NestedKey] | None = None
    ):
        in_keys = ["text"] if in_keys is None else list(in_keys)
        super().__init__(in_keys=in_keys, out_keys=list(in_keys) if out_keys is None else out_keys)

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            tensordict.set(out_key, self._modify_str(tensordict.get(in_key)))
        return tensordict

    def _modify_str(self, obs):
        if isinstance(obs, NonTensorData):
            return self._modify_str(obs.data)
        if isinstance(obs, NonTensorStack):
            return self._modify_str(obs.tolist())
        if isinstance(obs, list):
            return NonTensorStack(*[NonTensorData(BASE_PROMPT % o) for o in obs])
        return BASE_PROMPT % obs

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        return next_tensordict

    def transform_observation_spec(self, observation_spec):
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if out_key != in_key and in_key in observation_spec.keys(True):
                observation_spec[out_key] = observation_spec[in_key].clone()
        return observation_spec


def _collate_fn(batch: list[dict]) -> dict:
    return {
        "query": [row["question"] for row in batch],
        "answer": [row["answer"] for row in batch],
    }


class GSM8KEnv(DatasetChatEnv):
    """GSM8K as a chat environment: one question per episode, one answer, a reward.

    Reads a LOCAL copy of GSM8K (rows with ``"question"`` and ``"answer"``, the answer
    ending in ``"#### <number>"``): a list of dicts, an in-memory dataset, a
    ``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` file, or a folder of split files
    (``train.jsonl``, ``test.jsonl``). A Hub name is refused: nothing downloads at run
    time. A :class:`~rl.envs.StepCounter` ends the episode after ``max_steps`` turns and
    a :class:`~rl.envs.llm.GSM8KRewardParser` scores the answer.

    Keyword Args:
        dataset: the local dataset (required; TorchRL's default ``"openai/gsm8k"`` would
            download).
        shuffle, num_envs, repeats, batch_size_dl, seed, group_repeats, tokenizer, device,
        template_kwargs, apply_template, collate_fn, input_mode: as
            :class:`~rl.envs.llm.DatasetChatEnv`.
        compute_reward (bool): append the reward parser. Defaults to ``True``.
        max_steps (int): turns per episode. Defaults to ``1``.
        split (str, optional): the split of a folder / dict of splits (default ``"train"``).

    Examples:
        >>> from rl.envs.llm import GSM8KEnv
        >>> rows = [{"question": "What is 6 * 12?", "answer": "6 * 12 = 72\\n#### 72"}]
        >>> env = GSM8KEnv(dataset=rows)
        >>> td = env.reset()
        >>> td["history"].prompt[0, -1].content
        'What is 6 * 12?'
    """

    SYSTEM_PROMPT = (
        "A conversation between User and Assistant. The user asks a question, and the "
        "Assistant solves it.\nThe assistant first thinks about the reasoning process in the "
        "mind and then provides the user with the answer.\nThe reasoning process and answer "
        "are enclosed within <think></think> and <answer></answer> tags, respectively,\ni.e., "
        "<think>reasoning process here</think> <answer>answer here</answer>. The answer should "
        "be a number."
    )

    def __init__(
        self,
        *,
        dataset: Any = "openai/gsm8k",
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
            name=None,
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
            self.append_transform(GSM8KRewardParser(tokenizer=tokenizer))


def make_gsm8k_env(
    dataset: Any = "openai/gsm8k",
    num_envs: int = 1,
    repeats: int | None = None,
    batch_size_dl: int = 1,
    seed: int | None = None,
    group_repeats: bool = False,
    tokenizer=None,
):
    """GSM8K as a text :class:`~rl.envs.llm.LLMEnv` (TorchRL's older builder; prefer
    :class:`GSM8KEnv`): the question wrapped by :class:`GSM8KPrepareQuestion` under
    ``"text"``, one step, and with a ``tokenizer`` a :class:`GSM8KRewardParser` reading
    ``"text_response"``. ``dataset`` is LOCAL (see :class:`GSM8KEnv`).

    Examples:
        >>> from rl.envs.llm import make_gsm8k_env
        >>> env = make_gsm8k_env([{"question": "1+1?", "answer": "#### 2"}], seed=0)
        >>> env.reset()["text"][0].endswith("User: 1+1?. Assistant: <think>")
        True
    """

    def collate(batch):
        return {
            "text": [row["question"] for row in batch],
            "answer": [row["answer"] for row in batch],
        }

    dataloader = make_dataloader(
        dataset,
        split="train",
        seed=seed,
        batch_size=batch_size_dl,
        shuffle=True,
        collate_fn=collate,
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LLMEnv's deprecation: this builder is TorchRL's
        env = LLMEnv.from_dataloader(
            dataloader,
            from_text=True,
            batch_size=(num_envs,),
            repeats=repeats,
            group_repeats=group_repeats,
        )
    env.insert_transform(0, GSM8KPrepareQuestion())
    env.append_transform(StepCounter(max_steps=1))
    if tokenizer is not None:
        env.append_transform(
            GSM8KRewardParser(
                tokenizer=tokenizer, input_mode="text", in_keys=["text_response", "answer"]
            )
        )
    return env
