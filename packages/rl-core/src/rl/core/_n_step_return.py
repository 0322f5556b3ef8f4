"""The n-step return: the discounted sum of the next ``n`` rewards, cut at trajectory ends.

Sutton, 1988, https://doi.org/10.1007/BF00115009; Sutton & Barto, *Reinforcement
Learning: An Introduction*, 2nd ed., section 7.1. Shared by rl-data's ``MultiStep`` and
rl-envs' ``MultiStepTransform``, which both call :func:`n_step_return`.
"""

from __future__ import annotations

import torch

__all__ = ["n_step_return"]


def n_step_return(
    reward: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    n_steps: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The n-step return of every step of a batch of rollouts, and the steps it spans.

    Time is the dim before the last of ``done`` (``[*B, T, 1]``, time last as in a rollout
    or a collector batch). A trajectory ends at a step whose ``done`` is set (termination
    or truncation alike) or at the last step ``T - 1`` of the data. Step ``t`` looks
    ``k_t = min(n_steps, e_t - t + 1)`` steps ahead, where ``e_t`` is the first end at or
    after ``t``, and gets

    ``G_t = sum_{j < k_t} gamma^j r_{t+j}``.

    An n-step target bootstraps from the ``"next"`` entries of step ``t + k_t - 1`` with
    the discount ``gamma ** k_t``. Vectorised over the batch and time: one tensor
    operation per offset ``j < n_steps``, none per step.

    Args:
        reward: the one-step rewards ``r_t``, ``[*B, T, *F]`` (usually ``[*B, T, 1]``).
        done: True at the last step of a trajectory, ``[*B, T, 1]`` (any dtype; read as
            bool).
        gamma: the discount factor.
        n_steps: the look-ahead, an int >= 1.

    Returns:
        ``(G, k)``: the n-step returns ``[*B, T, *F]`` (the dtype of ``reward``, or the
        default float dtype for integer rewards) and the steps ``k_t`` each one spans,
        ``[*B, T, 1]`` int64, in ``[1, n_steps]``.

    Raises:
        ValueError: ``n_steps`` is not an int >= 1, ``done`` is not ``[*B, T, 1]``, or
            ``reward`` does not start with ``done``'s ``[*B, T]``.

    Examples:
        >>> import torch
        >>> from rl.core import n_step_return
        >>> reward = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).unsqueeze(-1)
        >>> done = torch.tensor([False, False, True, False, False]).unsqueeze(-1)
        >>> G, k = n_step_return(reward, done, gamma=0.5, n_steps=2)
        >>> G.squeeze(-1)
        tensor([2.0000, 3.5000, 3.0000, 6.5000, 5.0000])
        >>> k.squeeze(-1)
        tensor([2, 2, 1, 2, 1])
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be an int >= 1, got {n_steps!r}")
    if done.ndim < 2 or done.shape[-1] != 1:
        raise ValueError(f"done must be [*B, T, 1], got shape {tuple(done.shape)}")
    batch = done.shape[:-1]  # [*B, T]
    if reward.shape[: len(batch)] != batch:
        raise ValueError(
            f"reward must be [*B, T, *F] with [*B, T] = {tuple(batch)} from done, got shape "
            f"{tuple(reward.shape)}"
        )
    tdim = len(batch) - 1
    T = batch[-1]
    dtype = reward.dtype if reward.is_floating_point() else torch.get_default_dtype()
    if T == 0:
        return reward.to(dtype), torch.ones(done.shape, dtype=torch.int64, device=done.device)

    # e_t: the first trajectory end at or after t (a suffix minimum of the end indices)
    time = torch.arange(T, device=done.device)
    ends = torch.where(done.squeeze(-1).bool(), time, T - 1)
    ends = ends.flip(-1).cummin(-1).values.flip(-1)
    steps = (ends - time + 1).clamp_max(n_steps)  # [*B, T]

    # one vectorised term per offset j (n_steps is small; time is never looped over)
    pad = reward.new_zeros(*batch[:-1], n_steps - 1, *reward.shape[len(batch) :])
    padded = torch.cat([reward, pad], tdim)  # r_{t+j} for every j < n_steps, zero past T
    keep_shape = (*batch, *([1] * (reward.ndim - len(batch))))
    gamma = float(gamma)
    ret = reward.to(dtype, copy=True)
    for j in range(1, n_steps):
        keep = (steps > j).view(keep_shape)
        ret.add_(torch.where(keep, padded.narrow(tdim, j, T), 0.0), alpha=gamma**j)
    return ret, steps.unsqueeze(-1)
