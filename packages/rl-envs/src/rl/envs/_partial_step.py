"""Partial steps: the ``"_step"`` mask of TorchRL's ``EnvBase.step``.

A boolean ``"_step"`` entry of shape ``[*batch]`` in the tensordict given to
:meth:`~rl.envs.EnvBase.step` (written by the caller, or by a transform's ``inv`` such as
``ConditionalSkip`` or ``MultiAction``) selects the entries that are stepped; the others
are *skipped*: their ``"next"`` holds their current (root) values, zeros for the entries
the root lacks (the reward), and no transform after the env runs on them. As in TorchRL:

- a batch-locked env skips the step altogether when no entry is selected, runs it as
  usual when all are, and otherwise hands the mask to its ``_step`` (batched envs step
  the selected sub-envs only; other envs are trusted to honor it);
- an env that is not batch-locked (a stateless env) steps the selected entries only.

Without a ``"_step"`` entry nothing here runs: the check is one dict lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict, TensorDictBase

if TYPE_CHECKING:
    from ._env_base import EnvBase

__all__ = [
    "check_step_mask",
    "masked_merge",
    "peek_step_mask",
    "pop_step_mask",
    "skip_tensordict",
    "step_masked",
]

STEP_KEY = "_step"


def peek_step_mask(tensordict: TensorDictBase) -> torch.Tensor | None:
    """The ``"_step"`` entry of ``tensordict`` or None (a dict lookup for a TensorDict)."""
    if type(tensordict) is TensorDict:
        return tensordict._tensordict.get(STEP_KEY)
    return tensordict.get(STEP_KEY, None)


def pop_step_mask(tensordict: TensorDictBase) -> torch.Tensor | None:
    """Removes the ``"_step"`` entry of ``tensordict`` and returns it (None if absent)."""
    mask = peek_step_mask(tensordict)
    if mask is not None:
        tensordict.del_(STEP_KEY)
    return mask


def check_step_mask(mask: torch.Tensor, batch_size: torch.Size) -> torch.Tensor:
    """``mask`` as a ``batch_size``-shaped bool tensor (a trailing dim of 1 is dropped)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"'_step' must be a bool tensor of shape {tuple(batch_size)}, got "
            f"{mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__}"
        )
    if mask.shape != batch_size:
        if mask.numel() != batch_size.numel():
            raise ValueError(
                f"'_step' has shape {tuple(mask.shape)}, expected the batch size "
                f"{tuple(batch_size)} (one flag per entry)"
            )
        mask = mask.reshape(batch_size)
    return mask


def skip_tensordict(env: EnvBase, tensordict: TensorDictBase) -> TensorDictBase:
    """The ``"next"`` of a skipped step: the root values of ``tensordict`` for every
    output entry it holds (observations, done flags), zeros for the others (reward).

    Shaped as ``tensordict`` (an env that is not batch-locked may get extra leading dims).
    """
    extra = tensordict.batch_size[: tensordict.batch_dims - len(env.batch_size)]
    out = env.full_done_spec.zero(extra)
    out.update(env.full_observation_spec.zero(extra))
    out.update(env.full_reward_spec.zero(extra))
    for key in list(out.keys(True, True)):
        value = tensordict.get(key, None)
        if value is not None and isinstance(value, torch.Tensor):
            out.set(key, value.clone())
    return out


def masked_merge(
    out: TensorDictBase, mask: torch.Tensor, stepped: TensorDictBase
) -> TensorDictBase:
    """Writes ``stepped`` (the outputs of the ``mask`` entries) into ``out`` at ``mask``.

    Entries of ``stepped`` that ``out`` lacks are added, zero where ``mask`` is False.
    """
    for key in stepped.keys(True, True):
        value = stepped.get(key)
        if not isinstance(value, torch.Tensor):
            continue
        target = out.get(key, None)
        if target is None or target.shape[mask.ndim :] != value.shape[1:]:
            target = value.new_zeros((*mask.shape, *value.shape[1:]))
            out.set(key, target)
        target[mask] = value
    return out


def step_masked(env: EnvBase, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
    """Runs ``env._step`` on ``tensordict`` (its ``"_step"`` removed) under ``mask``.

    Returns:
        the ``"next"`` tensordict of the whole batch (see the module docstring).
    """
    if env.batch_locked:
        mask = check_step_mask(mask, env.batch_size)
        if not bool(mask.any()):
            return skip_tensordict(env, tensordict)
        if bool(mask.all()):
            return env._step(tensordict)
        # trusted to honor the mask (batched envs do)
        tensordict.set(STEP_KEY, mask)
        try:
            return env._step(tensordict)
        finally:
            tensordict.del_(STEP_KEY)
    mask = check_step_mask(mask, tensordict.batch_size)
    if bool(mask.all()):
        return env._step(tensordict)
    out = skip_tensordict(env, tensordict)
    if bool(mask.any()):
        stepped = env._step(tensordict[mask])
        env._complete_done(stepped)
        masked_merge(out, mask, stepped)
    return out
