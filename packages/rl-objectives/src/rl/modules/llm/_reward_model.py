"""``HFRewardModelWrapper``: a Hugging Face reward model read and written through TensorDict keys."""

from __future__ import annotations

import contextlib

import torch
from tensordict import NestedKey, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

__all__ = ["HFRewardModelWrapper"]


class HFRewardModelWrapper(TensorDictModuleBase):
    """Scores token sequences with a Hugging Face reward model, one scalar per sequence.

    The model (``AutoModelForSequenceClassification`` with one label, a model trained by
    ``trl.RewardTrainer``, or any module taking ``input_ids`` and ``attention_mask``) is
    called on the tokens at ``token_key``; its ``logits`` (or ``rewards``, or the tensor it
    returns), of shape ``[B, 1]`` or ``[B]``, are written as float ``[B]`` at ``reward_key``.

    Args:
        model: the reward model.

    Keyword Args:
        token_key: the token ids ``[B, T]`` (the full sequences of a TorchRL LLM wrapper).
        attention_mask_key: the attention mask ``[B, T]``; ``None`` calls the model without
            one.
        reward_key: where the rewards ``[B]`` are written.
        inference_mode: run the model without gradients (``torch.no_grad``).

    Raises:
        KeyError: (on call) ``token_key`` or ``attention_mask_key`` is missing.
        RuntimeError: (on call) the model's output holds no reward, or not one per sequence.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules.llm import HFRewardModelWrapper
        >>> class LengthReward(torch.nn.Module):
        ...     def forward(self, input_ids, attention_mask=None):
        ...         return attention_mask.sum(-1, keepdim=True).float()
        >>> rm = HFRewardModelWrapper(LengthReward())
        >>> td = TensorDict(
        ...     {
        ...         ("tokens", "full"): torch.ones(2, 4, dtype=torch.long),
        ...         ("masks", "all_attention_mask"): torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
        ...     },
        ...     batch_size=[2],
        ... )
        >>> rm(td)["reward"].tolist()
        [4.0, 2.0]
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        token_key: NestedKey = ("tokens", "full"),
        attention_mask_key: NestedKey | None = ("masks", "all_attention_mask"),
        reward_key: NestedKey = "reward",
        inference_mode: bool = False,
    ) -> None:
        super().__init__()
        self.in_keys = (
            [token_key] if attention_mask_key is None else [token_key, attention_mask_key]
        )
        self.out_keys = [reward_key]
        self._token_key = token_key
        self._attention_mask_key = attention_mask_key
        self._reward_key = reward_key
        self._inference_mode = inference_mode
        self._model = model

    @property
    def model(self) -> nn.Module:
        """The wrapped reward model."""
        return self._model

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the reward of each sequence of ``tensordict`` at ``reward_key`` (in place)."""
        input_ids = tensordict.get(self._token_key, None)
        if input_ids is None:
            raise KeyError(
                f"HFRewardModelWrapper: token_key {self._token_key!r} not found in the input "
                f"TensorDict (keys: {list(tensordict.keys(True, True))})"
            )
        kwargs = {"input_ids": input_ids}
        if self._attention_mask_key is not None:
            mask = tensordict.get(self._attention_mask_key, None)
            if mask is None:
                raise KeyError(
                    f"HFRewardModelWrapper: attention_mask_key {self._attention_mask_key!r} "
                    f"not found in the input TensorDict (pass attention_mask_key=None to "
                    f"call the model without a mask)"
                )
            kwargs["attention_mask"] = mask
        grad = torch.no_grad() if self._inference_mode else contextlib.nullcontext()
        with grad:
            out = self._model(**kwargs)
        tensordict.set(self._reward_key, self._rewards(out, input_ids.shape[:-1]))
        return tensordict

    @staticmethod
    def _rewards(out, batch_shape: torch.Size) -> torch.Tensor:
        if isinstance(out, torch.Tensor):
            rewards = out
        elif getattr(out, "logits", None) is not None:
            rewards = out.logits
        elif getattr(out, "rewards", None) is not None:
            rewards = out.rewards
        else:
            raise RuntimeError(
                f"HFRewardModelWrapper: the reward model returned {type(out).__name__}, "
                f"expected a tensor or an output with a 'logits' or 'rewards' attribute"
            )
        if rewards.shape == (*batch_shape, 1):
            rewards = rewards.squeeze(-1)
        elif rewards.shape != batch_shape:
            raise RuntimeError(
                f"HFRewardModelWrapper: expected one reward per sequence, of shape "
                f"{tuple(batch_shape)} or {(*batch_shape, 1)}, got {tuple(rewards.shape)}"
            )
        return rewards.float()
