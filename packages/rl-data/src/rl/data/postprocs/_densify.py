"""Sparse rewards spread over their trajectory: each step gets the reward still to come."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey


def _reward_to_go(reward: torch.Tensor, done: torch.Tensor, discount: float) -> torch.Tensor:
    """Discounted sum of the rewards from each step to the end of its trajectory.

    Args:
        reward: ``[*B, T, F]`` rewards, time second to last.
        done: ``[*B, T, F]`` trajectory ends (a trajectory ends after its done step).
        discount: the per-step discount.

    Returns:
        ``[*B, T, F]``: ``out[t] = reward[t] + discount * out[t + 1]`` within a trajectory.
    """
    out = torch.empty_like(reward)
    keep = ~done.bool()
    acc = torch.zeros_like(reward[..., 0, :])
    for t in range(reward.shape[-2] - 1, -1, -1):
        acc = reward[..., t, :] + discount * acc * keep[..., t, :]
        out[..., t, :] = acc
    return out


class DensifyReward(TensorDictModuleBase):
    """Gives every step of a trajectory the reward still to come (for sparse rewards).

    Where only the step that ends a trajectory carries a reward, each earlier step gets it
    too: ``("next", reward_key_out)`` becomes the discounted reward-to-go, summed up to
    the end of the step's trajectory (intermediate rewards are summed as well). The batch
    is ``[*B, T]`` with the time dim last, and rewards and done flags ``[*B, T, 1]``.
    The tensordict is updated in place and returned.

    Args:
        reward_key: the reward under ``"next"``. Defaults to ``"reward"``.
        done_key: the done flag under ``"next"``. Defaults to ``"done"``.
        reward_key_out: where the densified reward is written under ``"next"``.
            Defaults to ``reward_key`` (overwritten).
        time_dim: kept for TorchRL's signature; the time dim is the one before the reward's
            last (feature) dim. Defaults to ``2``.
        discount: the discount of the reward-to-go. Defaults to ``1.0``.

    Raises:
        RuntimeError: the reward and done flags have different shapes.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import DensifyReward
        >>> td = TensorDict(
        ...     {"next": {"reward": torch.zeros(6, 1), "done": torch.zeros(6, 1, dtype=torch.bool)}},
        ...     batch_size=[6],
        ... )
        >>> td["next", "done"][[2, 5]] = True
        >>> td["next", "reward"][2] = 3.0
        >>> td["next", "reward"][5] = 7.0
        >>> DensifyReward()(td)["next", "reward"].squeeze(-1).tolist()
        [3.0, 3.0, 3.0, 7.0, 7.0, 7.0]
    """

    def __init__(
        self,
        *,
        reward_key: NestedKey = "reward",
        done_key: NestedKey = "done",
        reward_key_out: NestedKey | None = None,
        time_dim: int = 2,
        discount: float = 1.0,
    ) -> None:
        super().__init__()
        self.in_keys = [unravel_key(reward_key), unravel_key(done_key)]
        self.out_keys = [unravel_key(reward_key if reward_key_out is None else reward_key_out)]
        self.time_dim = time_dim
        self.discount = discount

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        reward_key, done_key = (unravel_key(("next", key)) for key in self.in_keys)
        reward, done = tensordict.get(reward_key), tensordict.get(done_key)
        if reward.shape != done.shape:
            raise RuntimeError(
                f"reward and done state are expected to have the same shape, got "
                f"{reward_key!r} of shape {tuple(reward.shape)} and {done_key!r} of shape "
                f"{tuple(done.shape)}"
            )
        dense = _reward_to_go(reward, done, self.discount)
        tensordict.set(unravel_key(("next", self.out_keys[0])), dense)
        return tensordict
