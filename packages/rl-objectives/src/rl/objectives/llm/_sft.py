"""Supervised fine-tuning on chat histories: ``SFTLoss`` (and the MinorSFT variant)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import NestedKey, TensorClass, TensorDictBase
from torch import nn

from .._loss import LossModule
from ._kl import k3_kl_token_estimate

__all__ = ["SFTLoss", "SFTLossOutput"]

_REDUCTIONS = ("mean", "sum", "none")


class SFTLossOutput(TensorClass["nocast"]):
    """Output of :class:`SFTLoss`: ``loss_sft``, and ``loss_kl_to_ref`` / ``kl_to_ref``
    when a KL to a reference model is asked for."""

    loss_sft: torch.Tensor
    loss_kl_to_ref: torch.Tensor | None = None
    kl_to_ref: torch.Tensor | None = None


def _reduce(value: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return value.mean()
    if reduction == "sum":
        return value.sum()
    return value


class SFTLoss(LossModule):
    """Negative log-likelihood of the assistant's tokens of chat histories.

    For each conversation of ``("history", "full")`` the policy scores the tokens of the
    rendered chat; the log-probs of the assistant's tokens (the template's
    ``{% generation %}`` blocks) are summed (divided by their count when
    ``normalize_by_seq_length``), and ``loss_sft = -reduce(sum)``. With
    ``loss_function="minor_sft"``, ``loss_sft = -reduce(logsigmoid(beta * (lp - ref_lp)))``
    (`MinorSFT <https://arxiv.org/abs/2408.10642>`_).

    Args:
        actor_network (TransformersWrapper): the policy in scoring mode
            (``generate=False``, ``input_mode="history"``).
        tokenizer: defaults to ``actor_network.tokenizer``.
        tokenizer_kwargs (dict, optional): kept for TorchRL's signature.
        reduction (str): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        normalize_by_seq_length (bool): defaults to ``True``.
        kl_to_ref_coeff (float, optional): weight of the k3 KL to reference log-probs at
            ``ref_log_prob`` (``[B, T]`` over the full tokens).
        loss_function (str): ``"sft"`` (default) or ``"minor_sft"``.
        beta (float): MinorSFT's temperature. Defaults to ``0.1``.
        device: unused here (TorchRL's signature).

    Raises:
        ValueError: no tokenizer; an unknown reduction / loss function; a conversation
            without assistant tokens; missing reference log-probs where needed.
    """

    @dataclass
    class _AcceptedKeys:
        """Keys: ``history`` (full conversations), ``ref_log_prob``, ``log_probs``."""

        history: NestedKey = ("history", "full")
        ref_log_prob: NestedKey = ("next", "ref_log_probs", "full")
        log_probs: NestedKey = ("log_probs", "full")

    def __init__(
        self,
        actor_network: nn.Module,
        tokenizer=None,
        tokenizer_kwargs: dict | None = None,
        reduction: Literal["mean", "sum", "none"] = "mean",
        normalize_by_seq_length: bool = True,
        kl_to_ref_coeff: float | None = None,
        loss_function: Literal["sft", "minor_sft"] = "sft",
        beta: float = 0.1,
        device: torch.device | None = None,
    ):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction {reduction!r} is not one of {_REDUCTIONS}")
        if loss_function not in ("sft", "minor_sft"):
            raise ValueError(f"loss_function {loss_function!r} is not one of ('sft', 'minor_sft')")
        self.actor_network = actor_network
        tokenizer = (
            tokenizer if tokenizer is not None else getattr(actor_network, "tokenizer", None)
        )
        if tokenizer is None:
            raise ValueError("SFTLoss needs a tokenizer (argument or actor_network.tokenizer)")
        self.tokenizer = tokenizer
        self.tokenizer_kwargs = dict(tokenizer_kwargs or {})
        self.reduction = reduction
        self.normalize_by_seq_length = normalize_by_seq_length
        self.kl_to_ref_coeff = kl_to_ref_coeff
        self.loss_function = loss_function
        if loss_function == "minor_sft" and kl_to_ref_coeff:
            warnings.warn(
                "kl_to_ref_coeff is ignored with loss_function='minor_sft' (its KL regularisation is implicit)",
                stacklevel=2,
            )
            self.kl_to_ref_coeff = 0.0
        self.beta = beta
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        self.in_keys = [self.tensor_keys.history]
        if self.kl_to_ref_coeff or self.loss_function == "minor_sft":
            self.in_keys.append(self.tensor_keys.ref_log_prob)
        self.out_keys = []

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        self._set_in_keys()

    def forward(self, tensordict: TensorDictBase) -> SFTLossOutput:
        keys = self.tensor_keys
        scored = self.actor_network(tensordict.select(keys.history))
        log_probs = scored.get(keys.log_probs, as_padded_tensor=True, padding_value=0.0)
        assistant = scored.get(
            ("masks", "all_assistant_mask"), as_padded_tensor=True, padding_value=0
        ).bool()
        attention = scored.get(
            ("masks", "all_attention_mask"), as_padded_tensor=True, padding_value=0
        ).bool()
        mask = assistant & attention
        if not mask.any(-1).all():
            raise ValueError(
                f"some conversations at {keys.history} have no assistant tokens (all_assistant_mask is all False)"
            )
        masked = log_probs.masked_fill(~mask, 0.0)
        summed = masked.sum(-1)
        lengths = mask.sum(-1)
        if self.normalize_by_seq_length:
            summed = summed / lengths.clamp_min(1)
        ref = None
        if self.kl_to_ref_coeff or self.loss_function == "minor_sft":
            ref = tensordict.get(keys.ref_log_prob, None, as_padded_tensor=True, padding_value=0.0)
            if ref is None:
                raise ValueError(
                    f"reference log-probs not found at {keys.ref_log_prob}, needed by kl_to_ref_coeff / minor_sft"
                )
            if ref.shape != log_probs.shape:
                raise ValueError(
                    f"{keys.ref_log_prob} has shape {tuple(ref.shape)}, expected {tuple(log_probs.shape)} from the policy's log-probs"
                )
            ref = ref.masked_fill(~mask, 0.0)
        if self.loss_function == "sft":
            loss = _reduce(-summed, self.reduction)
        else:
            ref_summed = ref.sum(-1)
            if self.normalize_by_seq_length:
                ref_summed = ref_summed / lengths.clamp_min(1)
            loss = _reduce(-F.logsigmoid(self.beta * (summed - ref_summed)), self.reduction)
        if self.kl_to_ref_coeff:
            kl = k3_kl_token_estimate(ref, masked)[mask].mean()
            return SFTLossOutput(
                loss_sft=loss, loss_kl_to_ref=self.kl_to_ref_coeff * kl, kl_to_ref=kl.detach()
            )
        return SFTLossOutput(loss_sft=loss)
