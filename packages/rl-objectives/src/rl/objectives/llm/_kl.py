"""Per-token KL estimates shared by the LLM losses."""

from __future__ import annotations

import torch

__all__ = ["k3_kl_token_estimate"]


def k3_kl_token_estimate(target_log_prob: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of a KL divergence: ``exp(d) - 1 - d`` with ``d = target_log_prob - log_prob``.

    Unbiased for ``KL(p || q)`` when the tokens were drawn from ``p`` (``log_prob``) and
    ``target_log_prob`` is ``log q``; always nonnegative. See
    `Approximating KL Divergence <http://joschu.net/blog/kl-approx.html>`_.

    Args:
        target_log_prob (torch.Tensor): ``[*B, T]`` log-probabilities of the target.
        log_prob (torch.Tensor): ``[*B, T]`` log-probabilities of the sampling distribution.

    Returns:
        ``[*B, T]`` per-token estimates.

    Raises:
        ValueError: the two shapes differ.

    Examples:
        >>> import torch
        >>> from rl.objectives.llm import k3_kl_token_estimate
        >>> k3_kl_token_estimate(torch.zeros(2), torch.tensor([0.0, -1.0]))
        tensor([0.0000, 0.7183])
    """
    if target_log_prob.shape != log_prob.shape:
        raise ValueError(
            f"target_log_prob has shape {tuple(target_log_prob.shape)}, expected "
            f"{tuple(log_prob.shape)} from log_prob"
        )
    diff = target_log_prob - log_prob
    return diff.expm1() - diff
