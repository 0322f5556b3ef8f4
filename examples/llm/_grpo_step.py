"""GRPO's update as one compiled graph (``grpo_countdown.py --compile``): the answers of
a minibatch padded to tensors, ``GRPOLoss``'s objective computed on them with masks (no
data-dependent shape), and :class:`GRPOStep`, the trainer's ``optimization_stepper``
that runs the forward, the objective, backward, clipping and AdamW as one
``UpdateStep``."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from tensordict import TensorDict

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from _stepper import UpdateStepper  # noqa: E402
from sft import UpdateStep, token_log_probs  # noqa: E402

__all__ = ["GRPOStep", "grpo_objective", "grpo_tensors"]


def grpo_tensors(batch, width: int | None = None) -> tuple[torch.Tensor, ...]:
    """What GRPO's objective reads from a minibatch of answers, right-padded to ``width``
    (default: the longest answer's): the full tokens, their attention mask and the mask of
    the answer's tokens (``[B, T]``), each answer's advantage (``[B]``) and the log-probs
    it was sampled with (``[B, T]``; ``GRPOLoss``'s default keys)."""

    def padded(key, dtype=None):
        value = batch.get(key, as_padded_tensor=True, padding_value=0)
        value = value if dtype is None else value.to(dtype)
        if width is None:
            return value
        return torch.nn.functional.pad(value, (0, width - value.shape[-1]))

    advantage = batch.get("advantage").reshape(batch.shape[0])
    return (
        padded(("tokens", "full"), torch.long),
        padded(("masks", "all_attention_mask"), torch.long),
        padded(("masks", "all_assistant_mask"), torch.bool),
        advantage,
        padded(("log_probs", "full")),
    )


def grpo_objective(
    model, clip_epsilon: float, tokens, attention, answer, advantage, sample_log_prob
) -> dict[str, torch.Tensor]:
    """``GRPOLoss``'s outputs (clipped objective averaged over the answers' tokens, the
    clipped share, the approximate KL to the sampling policy, the effective sample size)
    on :func:`grpo_tensors`, with masks in the place of its boolean indexing (no
    data-dependent shape: one graph)."""
    # the first token has no context
    log_prob = torch.nn.functional.pad(token_log_probs(model, tokens, attention), (1, 0))
    first = torch.arange(tokens.shape[-1], device=tokens.device) == 0
    mask = answer & attention.bool() & ~first & torch.isfinite(sample_log_prob)
    log_weight = torch.where(mask, log_prob - torch.where(mask, sample_log_prob, 0.0), 0.0)
    count = mask.sum()
    low, high = math.log1p(-clip_epsilon), math.log1p(clip_epsilon)
    clipped = log_weight.clamp(low, high)
    advantage = advantage.unsqueeze(-1)
    objective = -torch.minimum(log_weight.exp() * advantage, clipped.exp() * advantage)
    with torch.no_grad():
        masked = log_weight.masked_fill(~mask, float("-inf")).flatten()
        ess = (2 * masked.logsumexp(0) - (2 * masked).logsumexp(0)).exp() / count
        clip_fraction = ((clipped != log_weight) & mask).sum() / count
        kl_approx = torch.where(mask, -log_weight, 0.0).sum() / count
    return {
        "loss_objective": torch.where(mask, objective, 0.0).sum() / count.clamp_min(1),
        "clip_fraction": clip_fraction,
        "kl_approx": kl_approx,
        "ESS": ess,
    }


class GRPOStep(UpdateStepper):
    """GRPO's ``optimization_stepper`` under ``--compile``: pads the minibatch's answers
    (eagerly), then runs one ``UpdateStep`` call (the forward, :func:`grpo_objective`,
    backward, clipping at ``max_grad_norm``, AdamW: one graph); the optimizer's state goes
    into the checkpoints as the trainer's hook saves it.

    ``width=None`` pads each minibatch to its longest answer and compiles with dynamic
    shapes (one graph for every length: padding every answer to the model's context
    would cost more than compiling saves); a ``width`` pads to it (fixed shapes, as CUDA
    graphs need)."""

    def __init__(
        self,
        model,
        width: int | None,
        optimizer,
        *,
        clip_epsilon: float,
        max_grad_norm: float,
        compile,
        cudagraphs: bool = False,
    ) -> None:
        self.width = width

        def loss_fn(*tensors):
            out = grpo_objective(model, clip_epsilon, *tensors)
            return out["loss_objective"], out

        if compile and width is None:  # one graph for every batch and answer length
            compile = {"dynamic": True, **(compile if isinstance(compile, dict) else {})}
        update = UpdateStep(
            loss_fn,
            optimizer,
            max_grad_norm=max_grad_norm,
            compile=compile,
            cudagraphs=cudagraphs,
        )
        super().__init__(update, optimizer)

    def inputs(self, batch) -> tuple[torch.Tensor, ...]:
        return grpo_tensors(batch, self.width)

    def step(self, trainer, batch) -> TensorDict:
        return TensorDict(super().step(trainer, batch))
