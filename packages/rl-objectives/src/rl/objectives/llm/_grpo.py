"""Group-relative policy optimisation for LLMs: ``GRPOLoss`` (and its ``DAPO`` /
``CISPOLoss`` variants); the group-relative advantage is in ``_advantage``.

Per-token tensors are ``[B, T]``, right-padded; the policy's distribution says which
tokens count (its ``mask``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import NestedKey, TensorClass, TensorDict, TensorDictBase
from torch import nn

from .._loss import LossModule
from .._reduction import _clip_epsilon
from ._kl import k3_kl_token_estimate

__all__ = [
    "CISPOLoss",
    "CISPOLossOutput",
    "DAPO",
    "DAPOLossOutput",
    "GRPOLoss",
    "GRPOLossOutput",
    "LLMLossOutput",
]


class LLMLossOutput(TensorClass["nocast"]):
    """What an LLM policy-gradient loss returns: ``loss_*`` terms to sum, and diagnostics.

    ``loss_objective`` (policy term), ``clip_fraction``, ``kl_approx`` (mean of
    ``old - new`` log-probability), ``ESS`` (effective sample size of the importance
    weights over the scored tokens, divided by their number), and the optional
    ``entropy`` / ``loss_entropy``, ``kl_to_ref`` / ``loss_kl_to_ref``,
    ``kl_to_inference`` / ``loss_kl_to_inference``.
    """

    loss_objective: torch.Tensor
    clip_fraction: torch.Tensor
    kl_approx: torch.Tensor
    ESS: torch.Tensor
    entropy: torch.Tensor | None = None
    loss_entropy: torch.Tensor | None = None
    loss_kl_to_ref: torch.Tensor | None = None
    kl_to_ref: torch.Tensor | None = None
    loss_kl_to_inference: torch.Tensor | None = None
    kl_to_inference: torch.Tensor | None = None


class GRPOLossOutput(LLMLossOutput):
    """Output of :class:`GRPOLoss`."""


class DAPOLossOutput(LLMLossOutput):
    """Output of :class:`DAPO`."""


class CISPOLossOutput(LLMLossOutput):
    """Output of :class:`CISPOLoss`."""


class GRPOLoss(LossModule):
    """GRPO: a PPO-style clipped objective over tokens, with a group-relative advantage.

    ``loss_objective = -min(w * A, clip(w, 1 - eps_low, 1 + eps_high) * A)`` per scored
    token, ``w = exp(log_prob - sample_log_prob)``, averaged over the scored tokens
    (``aggregation="token_mean"``) or per sequence then over the batch (``"prompt_mean"``).
    See `DeepSeekMath <https://arxiv.org/abs/2402.03300>`_.

    Args:
        actor_network (LLMWrapperBase): the policy; its ``_get_sft_dist`` /
            ``_get_rlhf_dist`` / ``_get_generic_dist`` give the per-token distribution.
        clip_epsilon (float or (float, float)): clipping of the ratio. Defaults to ``0.2``.
        kl_mask_threshold (float, optional): drop tokens whose ``0.5 * (log w)^2`` exceeds it.
        aggregation (str): ``"token_mean"`` (default), ``"prompt_mean"`` or ``"none"``.
        entropy_bonus (bool): add ``loss_entropy = -entropy_coeff * entropy``. Defaults to ``True``.
        samples_mc_entropy (int): kept for TorchRL's signature (the entropy is exact here).
        entropy_coeff (float): defaults to ``0.01``.
        gamma (float, optional): unused (TorchRL's signature).
        reduction (str, optional): ``"none"`` keeps per-token losses (masked tokens are 0).
        clip_value: unused (TorchRL's signature).
        kl_to_ref_coeff (float, optional): weight of the k3 KL to the reference log-probs
            at ``ref_log_probs``.
        kl_to_inference_coeff (float, optional): weight of the k3 KL to the sampling
            log-probs.
        device: where the clip bounds live.
        masking_strategy (str): ``"sft"`` (response tokens, default), ``"rlhf"``
            (assistant tokens) or ``"generic"`` (every attended token).
        ref_log_prob_padding_side (str): the side on which ragged reference log-probs
            (a lazy stack of sequences of different lengths) are padded into one tensor,
            as TorchRL; ``"left"`` (the default) or ``"right"``. rl's policies pad the
            tokens (hence the log-probs the KL compares them with) on the right, so ragged
            reference log-probs need ``"right"``: with ``"left"`` they would be compared
            with other tokens, and a clear error says so (dense ones are the same either
            way).
        ref_log_prob_padding_value (float): the value padded in. Defaults to ``0.0``.

    The advantage is ``[B]`` / ``[B, 1]`` (one per sequence) or ``[B, T]`` / ``[B, T, 1]``
    (one per token).

    Raises:
        KeyError: no tokens, advantage or sample log-probs at their keys.
        ValueError: log-probs whose shape differs from the policy's.
        RuntimeError: stored sample log-probs that require grad.
    """

    output_type: type[LLMLossOutput] = GRPOLossOutput
    _schedulable_buffers = frozenset({"clip_epsilon_low", "clip_epsilon_high"})

    @dataclass
    class _AcceptedKeys:
        """Keys: ``advantage``, ``action`` (full tokens), ``sample_log_prob`` (full log-probs
        at sampling time), ``ref_log_probs`` (full log-probs of the reference model)."""

        advantage: NestedKey = "advantage"
        action: NestedKey = ("tokens", "full")
        sample_log_prob: NestedKey = ("log_probs", "full")
        ref_log_probs: NestedKey = ("next", "ref_log_probs", "full")

    def __init__(
        self,
        actor_network: nn.Module | None = None,
        *,
        clip_epsilon: float | tuple[float, float] = 0.2,
        kl_mask_threshold: float | None = None,
        aggregation: str | None = "token_mean",
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float = 0.01,
        gamma: float | None = None,
        reduction: str | None = None,
        clip_value: bool | float | None = None,
        kl_to_ref_coeff: float | None = None,
        kl_to_inference_coeff: float | None = None,
        device: torch.device | None = None,
        masking_strategy: Literal["sft", "rlhf", "generic"] = "sft",
        ref_log_prob_padding_side: Literal["left", "right"] = "left",
        ref_log_prob_padding_value: float = 0.0,
        **kwargs,
    ):
        super().__init__()
        if ref_log_prob_padding_side not in ("left", "right"):
            raise ValueError(
                f"ref_log_prob_padding_side must be 'left' or 'right', got "
                f"{ref_log_prob_padding_side!r}"
            )
        self.ref_log_prob_padding_side = ref_log_prob_padding_side
        self.ref_log_prob_padding_value = ref_log_prob_padding_value
        if masking_strategy not in ("sft", "rlhf", "generic"):
            raise ValueError(
                f"masking_strategy {masking_strategy!r} is not one of ('sft', 'rlhf', 'generic')"
            )
        aggregation = aggregation or "token_mean"
        if aggregation not in ("token_mean", "prompt_mean", "none"):
            raise ValueError(
                f"aggregation {aggregation!r} is not one of ('token_mean', 'prompt_mean', 'none')"
            )
        self.actor_network = actor_network
        self.entropy_bonus = entropy_bonus
        self.samples_mc_entropy = samples_mc_entropy
        self.entropy_coeff = entropy_coeff
        self.reduction = reduction if reduction is not None else "mean"
        self.kl_mask_threshold = kl_mask_threshold
        self.aggregation = aggregation
        self.masking_strategy = masking_strategy
        self.kl_to_ref_coeff = kl_to_ref_coeff
        self.kl_to_inference_coeff = kl_to_inference_coeff
        low, high = _clip_epsilon(clip_epsilon)
        self.register_buffer("clip_epsilon_low", torch.tensor(low, device=device))
        self.register_buffer("clip_epsilon_high", torch.tensor(high, device=device))
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        keys = self.tensor_keys
        self.in_keys = [keys.action, keys.advantage, keys.sample_log_prob]
        if self.kl_to_ref_coeff:
            self.in_keys.append(keys.ref_log_probs)
        self.out_keys = ["loss_objective", "clip_fraction", "kl_approx", "ESS"]

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        self._set_in_keys()

    @property
    def _clip_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        return (-self.clip_epsilon_low).log1p(), self.clip_epsilon_high.log1p()

    def _dist(self, tensordict: TensorDictBase):
        actor = self.actor_network
        if actor is None:
            raise RuntimeError("GRPOLoss has no actor_network to score the tokens")
        method = {"sft": "_get_sft_dist", "rlhf": "_get_rlhf_dist", "generic": "_get_generic_dist"}[
            self.masking_strategy
        ]
        if hasattr(actor, method):
            return getattr(actor, method)(tensordict)
        return actor.get_dist(tensordict)

    def _padded(
        self, td: TensorDictBase, key: NestedKey, name: str, side: str = "right", fill: float = 0
    ) -> torch.Tensor:
        value = td.get(key, None, as_padded_tensor=True, padding_side=side, padding_value=fill)
        if value is None:
            raise KeyError(f"{name} key {key} not in tensordict")
        return value

    def _ref_log_prob(self, tensordict: TensorDictBase, cur: torch.Tensor) -> torch.Tensor:
        """The reference log-probs, padded on ``ref_log_prob_padding_side`` with
        ``ref_log_prob_padding_value``; a trailing feature dim (``[B, T, 1]``) is dropped."""
        key = self.tensor_keys.ref_log_probs
        side, fill = self.ref_log_prob_padding_side, self.ref_log_prob_padding_value
        ref = self._padded(tensordict, key, "ref_log_probs", side, fill)
        if side == "left":
            right = self._padded(tensordict, key, "ref_log_probs", "right", fill)
            if not torch.equal(ref, right):
                raise ValueError(
                    f"the reference log-probs at {key} are ragged and "
                    "ref_log_prob_padding_side='left' would pad them against the policy's "
                    "log-probs, which rl pads on the right: pass "
                    "ref_log_prob_padding_side='right'"
                )
        if ref.ndim == cur.ndim + 1:
            ref = ref.squeeze(-1)
        return ref

    def forward(self, tensordict: TensorDictBase) -> LLMLossOutput:
        keys = self.tensor_keys
        action = self._padded(tensordict, keys.action, "action").long()
        advantage = self._padded(tensordict, keys.advantage, "advantage")
        prev_log_prob = self._padded(tensordict, keys.sample_log_prob, "sample_log_prob")
        if prev_log_prob.requires_grad:
            raise RuntimeError(
                f"the stored {keys.sample_log_prob} requires grad: detach it when collecting"
            )
        dist = self._dist(tensordict)
        cur_log_prob = dist.log_prob(action)
        if cur_log_prob.shape != prev_log_prob.shape:
            raise ValueError(
                f"{keys.sample_log_prob} has shape {tuple(prev_log_prob.shape)}, expected "
                f"{tuple(cur_log_prob.shape)} from the policy's log-probs (masking_strategy="
                f"{self.masking_strategy!r})"
            )
        mask = dist.mask & torch.isfinite(prev_log_prob)
        cur_log_prob = torch.where(mask, cur_log_prob, 0.0)
        prev_log_prob = torch.where(mask, prev_log_prob, 0.0)
        log_weight = cur_log_prob - prev_log_prob
        if self.kl_mask_threshold is not None and self.kl_mask_threshold > 0:
            mask = mask & (0.5 * log_weight.detach() ** 2 <= self.kl_mask_threshold)
        advantage = self._per_token(advantage, log_weight, tensordict.batch_dims)
        with torch.no_grad():
            lw = log_weight[mask]
            count = mask.sum()
            ess = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / count
        loss_objective, clip_fraction = self._compute_policy_objective(log_weight, advantage, mask)
        out = {
            "loss_objective": self._aggregate(loss_objective, mask),
            "clip_fraction": clip_fraction,
            "kl_approx": (-log_weight).detach()[mask].mean(),
            "ESS": ess,
        }
        if self.entropy_bonus:
            entropy = dist.entropy()
            out["entropy"] = entropy.detach()[mask].mean()
            out["loss_entropy"] = self._aggregate(-self.entropy_coeff * entropy, mask)
        if self.kl_to_ref_coeff:
            ref = self._ref_log_prob(tensordict, cur_log_prob)
            out["loss_kl_to_ref"], out["kl_to_ref"] = self._kl(
                ref, cur_log_prob, mask, self.kl_to_ref_coeff, "ref_log_probs"
            )
        if self.kl_to_inference_coeff is not None:
            out["loss_kl_to_inference"], out["kl_to_inference"] = self._kl(
                prev_log_prob, cur_log_prob, mask, self.kl_to_inference_coeff, "sample_log_prob"
            )
        return self.output_type.from_tensordict(TensorDict(out))

    @staticmethod
    def _per_token(
        advantage: torch.Tensor, log_weight: torch.Tensor, batch_dims: int
    ) -> torch.Tensor:
        """An advantage per sequence (``[B]``, ``[B, 1]``) or per token (``[B, T(, 1)]``) as ``[B, T]``."""
        if advantage.ndim == log_weight.ndim + 1 and advantage.shape[-1] == 1:
            advantage = advantage.squeeze(-1)
        if advantage.shape == log_weight.shape:
            return advantage
        if advantage.ndim == batch_dims + 1 and advantage.shape[-1] == 1:
            advantage = advantage.squeeze(-1)
        if advantage.ndim == batch_dims:
            return advantage.unsqueeze(-1).expand_as(log_weight)
        raise ValueError(
            f"advantage has shape {tuple(advantage.shape)}, expected one per sequence "
            f"[B] / [B, 1] or one per token {tuple(log_weight.shape)}"
        )

    def _compute_policy_objective(self, log_weight, advantage, mask):
        gain1 = log_weight.exp() * advantage
        clipped = log_weight.clamp(*self._clip_bounds)
        gain2 = clipped.exp() * advantage
        clip_fraction = (clipped != log_weight)[mask].float().mean()
        return -torch.minimum(gain1, gain2), clip_fraction

    def _aggregate(self, value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        value = torch.where(mask, value, 0.0)
        if self.aggregation == "none" or self.reduction == "none":
            return value
        if self.aggregation == "prompt_mean":
            per_seq = value.sum(-1) / mask.sum(-1).clamp_min(1)
            return per_seq.mean()
        return value.sum() / mask.sum().clamp_min(1)

    def _kl(self, target, cur, mask, coeff, name):
        if target.shape != cur.shape:
            raise ValueError(
                f"{name} has shape {tuple(target.shape)}, expected {tuple(cur.shape)} from the policy's log-probs"
            )
        kl = k3_kl_token_estimate(torch.where(mask, target, 0.0), cur)
        kl = kl[mask].mean()
        return coeff * kl, kl.detach()


class DAPO(GRPOLoss):
    """DAPO: GRPO with decoupled (``(low, high)``) clipping, e.g. ``clip_epsilon=(0.2, 0.28)``.

    See `DAPO <https://arxiv.org/abs/2503.14476>`_.
    """

    output_type = DAPOLossOutput


class CISPOLoss(GRPOLoss):
    """CISPO: ``loss = -clip(w, 1 - eps_low, 1 + eps_high).detach()``-free clipped ratio
    times the advantage (no ``min`` with the unclipped term).

    See `MiniMax-M1 <https://arxiv.org/abs/2506.13585>`_.
    """

    output_type = CISPOLossOutput

    def _compute_policy_objective(self, log_weight, advantage, mask):
        clipped = log_weight.clamp(*self._clip_bounds)
        clip_fraction = (clipped != log_weight)[mask].float().mean()
        return -clipped.exp() * advantage, clip_fraction
