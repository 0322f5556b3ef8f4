"""Helpers used by several transforms: reset masks, episode boundaries in stored data."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from ._spec_utils import NestedKey

__all__ = [
    "carry_preset",
    "reset_mask",
    "reset_entry_mask",
    "masked_reset",
    "sibling_key",
    "episode_starts",
    "episode_cumsum",
    "first_episode",
    "steps_since_start",
]


def reset_mask(
    tensordict: TensorDictBase | None, reset_key: NestedKey = "_reset"
) -> torch.Tensor | None:
    """The partial-reset mask of a reset input (``reset_key``, default the env's root
    ``"_reset"``), with trailing dims (e.g. ``[*B, 1]``) reduced with ``any`` to the batch
    dims ``[*B]``; None where there is none."""
    if tensordict is None:
        return None
    mask = tensordict.get(reset_key, None)
    if mask is None:
        return None
    nb = tensordict.batch_dims
    if mask.ndim > nb:
        mask = mask.reshape(*mask.shape[:nb], -1).any(-1)
    return mask


def reset_entry_mask(tensordict, reset_key: NestedKey | None) -> torch.Tensor | None:
    """The partial-reset mask ``[*B]`` read from ``reset_key`` (None: the env's ``"_reset"``)."""
    return reset_mask(tensordict, "_reset" if reset_key is None else reset_key)


def masked_reset(
    fresh: torch.Tensor, previous: torch.Tensor | None, mask: torch.Tensor | None
) -> torch.Tensor:
    """``fresh`` where ``mask`` (``[*B]``) is True, ``previous`` elsewhere."""
    if mask is None or previous is None or previous.shape != fresh.shape:
        return fresh
    m = mask.reshape(*mask.shape, *((1,) * (fresh.ndim - mask.ndim)))
    return torch.where(m, fresh, previous)


def sibling_key(key: NestedKey, name: str) -> NestedKey:
    """``("agents", "truncated")`` -> ``("agents", name)``; ``"truncated"`` -> ``name``."""
    if isinstance(key, str):
        return name
    return (*key[:-1], name)


def episode_starts(
    tensordict: TensorDictBase, done_key: NestedKey = "done", time_dim: int = -1
) -> torch.Tensor:
    """Boolean, the tensordict's batch shape: True where a step starts an episode in a
    stored trajectory whose time runs along batch dim ``time_dim`` (the last by default).

    Step 0 starts an episode, and so does every step that follows a ``("next", done)``.
    """
    nb = tensordict.batch_dims
    if nb == 0:
        raise ValueError("episode boundaries need a time dim: got a tensordict with batch_size []")
    shape = tensordict.batch_size
    full_key = ("next", done_key) if isinstance(done_key, str) else ("next", *done_key)
    done = tensordict.get(full_key, None)
    starts = torch.zeros(shape, dtype=torch.bool, device=tensordict.device)
    starts.select(time_dim, 0).fill_(True)
    if done is not None:
        done = done.reshape(*shape, -1).any(-1)
        t = shape[time_dim]
        starts.narrow(time_dim, 1, t - 1).copy_(done.narrow(time_dim, 0, t - 1))
    return starts


def episode_cumsum(values: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Cumulative sum along the time dim of ``values`` ``[*B, T, *F]`` restarting at ``starts``.

    Args:
        values: per-step values, time at dim ``starts.ndim - 1``.
        starts: ``[*B, T]`` episode starts.
    """
    tdim = starts.ndim - 1
    extra = values.ndim - starts.ndim
    dtype = values.dtype
    if values.is_floating_point():
        # float64 prefix sums: no cancellation error when subtracting earlier episodes
        values = values.double()
    cs = values.cumsum(tdim)
    before = cs - values  # sum of the steps strictly before t
    t = torch.arange(starts.shape[-1], device=starts.device).expand(starts.shape)
    last_start = torch.where(starts, t, torch.zeros_like(t)).cummax(-1).values
    idx = last_start.reshape(*last_start.shape, *((1,) * extra)).expand(values.shape)
    return (cs - before.gather(tdim, idx)).to(dtype)


def first_episode(starts: torch.Tensor) -> torch.Tensor:
    """``[*B, T]``: True on the steps of the episode that was running at step 0."""
    return starts.cumsum(-1) == 1


def steps_since_start(starts: torch.Tensor) -> torch.Tensor:
    """``[*B, T]`` int64: number of steps since the last episode start (0 at a start)."""
    t = torch.arange(starts.shape[-1], device=starts.device).expand(starts.shape)
    last_start = torch.where(starts, t, torch.zeros_like(t)).cummax(-1).values
    return t - last_start


def carry_preset(next_td: TensorDictBase, preset: TensorDictBase | None) -> None:
    """Copies into ``next_td`` the ``"next"`` entries the policy wrote that it lacks.

    Entries the policy wrote for the next step (e.g. a recurrent state) are visible to the
    transforms, as in TorchRL.
    """
    if preset is None:
        return
    present = set(next_td.keys(True, True))
    for key in preset.keys(True, True):
        if key not in present:
            next_td.set(key, preset.get(key))
