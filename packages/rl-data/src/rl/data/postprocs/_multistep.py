"""n-step returns (Sutton, 1988, https://doi.org/10.1007/BF00115009)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import n_step_return
from rl.data.replay_buffers._utils import KeyMismatchError


class MultiStep(nn.Module):
    """Turns one-step transitions into ``n``-step transitions, within each trajectory.

    For a batch with time as its last batch dim (``[*B, T]``), step ``t`` gets
    ``k_t = min(n_steps, steps until its trajectory ends (included), T - t)`` and, as
    TorchRL's ``MultiStep`` writes them:

    - ``("next", "reward")``: ``sum_{j<k_t} gamma^j r_{t+j}`` (:func:`rl.core.n_step_return`);
      the one-step reward moves to ``("next", "original_reward")``;
    - every other ``("next", ...)`` entry but the done flags (``done``, ``terminated``,
      ``truncated`` stay those of step ``t``) is taken from step ``t + k_t - 1``;
    - ``"steps_to_next_obs"``: ``k_t`` (int64), ``"gamma"``: ``gamma ** k_t`` and
      ``"nonterminal"``: ``k_t != 1`` (``False`` too where ``("collector", "mask")`` is
      ``False``), all of shape ``[*B, T]``.

    The input is left unchanged: a shallow copy is returned.

    Args:
        gamma: the discount factor, in ``(0, 1]``.
        n_steps: the look-ahead, at least 1.
        reward_key: the one-step reward (default ``("next", "reward")``).
        done_key: the end-of-trajectory flag (default ``("next", "done")``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import MultiStep
        >>> td = TensorDict(
        ...     {
        ...         "observation": torch.arange(4.0).unsqueeze(-1),
        ...         "next": {
        ...             "observation": torch.arange(1.0, 5.0).unsqueeze(-1),
        ...             "reward": torch.ones(4, 1),
        ...             "done": torch.tensor([[False], [True], [False], [False]]),
        ...         },
        ...     },
        ...     batch_size=[4],
        ... )
        >>> out = MultiStep(gamma=0.5, n_steps=2)(td)
        >>> out["next", "reward"].squeeze(-1).tolist()
        [1.5, 1.0, 1.5, 1.0]
        >>> out["next", "observation"].squeeze(-1).tolist()
        [2.0, 2.0, 4.0, 4.0]
        >>> out["steps_to_next_obs"].tolist(), out["nonterminal"].tolist()
        ([2, 1, 2, 1], [True, False, True, False])
    """

    mask_key: NestedKey = ("collector", "mask")

    def __init__(
        self,
        gamma: float,
        n_steps: int,
        *,
        reward_key: NestedKey = ("next", "reward"),
        done_key: NestedKey = ("next", "done"),
    ) -> None:
        super().__init__()
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
            raise ValueError(f"n_steps must be an int >= 1, got {n_steps!r}")
        for name, key in (("reward_key", reward_key), ("done_key", done_key)):
            if not (isinstance(key, tuple) and len(key) >= 2 and key[0] == "next"):
                raise ValueError(f"{name} must be a key under 'next', got {key!r}")
        self.gamma = float(gamma)
        self.n_steps = n_steps
        self.reward_key = reward_key
        self.done_key = done_key

    def _done_keys(self) -> list[NestedKey]:
        """The done flags that stay at step ``t`` (keys relative to ``"next"``)."""
        prefix = self.done_key[1:-1]
        return [self.done_key[1:]] + [prefix + (name,) for name in ("terminated", "truncated")]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims == 0:
            raise ValueError("MultiStep needs a batch with a time dimension, got batch_size []")
        for key in (self.reward_key, self.done_key):
            if key not in tensordict.keys(include_nested=True):
                raise KeyMismatchError(f"MultiStep needs the key {key!r}, which the batch lacks")
        out = tensordict.clone(False)
        done_shape = out.get(self.done_key).shape
        batch = out.batch_size
        if done_shape in (batch, (*batch, 1)):
            return self._n_step(out)
        # Done flags with dims after the batch (one per agent, say): those dims are batch
        # dims too, and time moves last while the n-step returns are computed.
        ndim, full = len(batch), len(done_shape)
        try:
            out.batch_size = done_shape
        except RuntimeError as err:
            raise RuntimeError(
                f"the tensordict shape must be compatible with the done's shape (trailing "
                f"singleton dimension excluded): {self.done_key!r} has shape "
                f"{tuple(done_shape)}, which not every entry of the batch of shape "
                f"{tuple(batch)} has as leading dims"
            ) from err

        def swap(td: TensorDictBase) -> TensorDictBase:
            shape = list(td.batch_size)
            shape[ndim - 1], shape[full - 1] = shape[full - 1], shape[ndim - 1]
            return td.apply(lambda x: x.transpose(ndim - 1, full - 1), batch_size=shape)

        out = swap(self._n_step(swap(out)))
        out.batch_size = batch
        return out

    def _n_step(self, out: TensorDictBase) -> TensorDictBase:
        """The n-step transitions of ``out``, whose done flags have its batch shape."""
        tdim = out.batch_dims - 1
        batch = out.batch_size
        T = batch[-1]
        reward = out.get(self.reward_key)
        done = out.get(self.done_key).reshape(*batch, -1).any(-1, keepdim=True)
        ret, steps = n_step_return(reward, done, self.gamma, self.n_steps)
        steps = steps.squeeze(-1)
        last = torch.arange(T, device=done.device) + steps - 1

        def pick(x: torch.Tensor) -> torch.Tensor:
            idx = last.reshape(*batch, *([1] * (x.ndim - len(batch)))).expand_as(x)
            return torch.gather(x, tdim, idx)

        next_td = out.get("next")
        fixed = {self.reward_key[1:], *self._done_keys()}
        for key, value in list(next_td.items(include_nested=True, leaves_only=True)):
            key = key if isinstance(key, tuple) else (key,)
            if key not in fixed:
                next_td.set(key, pick(value))
        original = self.reward_key[1:-1] + ("original_" + self.reward_key[-1],)
        next_td.set(original, reward)
        next_td.set(self.reward_key[1:], ret)
        out.set("steps_to_next_obs", steps)
        out.set("gamma", self.gamma**steps)
        nonterminal = steps != 1
        mask = out.get(self.mask_key, None)
        if mask is not None:
            nonterminal = nonterminal & mask.reshape(batch).bool()
        out.set("nonterminal", nonterminal)
        return out
