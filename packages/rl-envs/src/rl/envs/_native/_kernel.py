"""The rollout kernel of the native torch envs (see :mod:`rl.envs.engine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..engine import BufferKernel
from ..engine._buffers import StepViews, StepWriter

if TYPE_CHECKING:
    pass

__all__ = ["NativeKernel"]

FLAGS = ("done", "terminated", "truncated")


class NativeKernel(BufferKernel):
    """Steps a :class:`~rl.envs._native._base.NativeEnv` through its tensor-level
    ``_step_entries`` / ``_reset_entries`` (what its ``_step`` / ``_reset`` call too) and
    copies each step's tensors into the ``"next"`` buffers: no TensorDict per step.

    The done-flag buffers start zeroed; a step whose entries leave the flags out (no
    episode ends) writes only its observations and reward and reports ``False``.
    """

    def accepts(self, tensordict) -> bool:
        """Not when gradients flow through the rollout (a policy's action or the env's
        state requires grad): the step-by-step kernel keeps each step's outputs as the
        autograd graph made them, where this one copies them into buffers."""
        if not super().accepts(tensordict):
            return False
        if not torch.is_grad_enabled():
            return True
        if any(value.requires_grad for value in tensordict.values(True, True)):
            return False
        env = self.env
        if any(param.requires_grad for param in env.parameters()):
            return False
        return not any(
            isinstance(value, torch.Tensor) and value.requires_grad
            for value in env.__dict__.values()
        )

    def start(self, buffers, tensordict, actions, *, eager, stops) -> None:
        env = self.env
        nb = buffers.nb
        steps = buffers.max_steps
        self.action_key = env.action_key
        self.check = env._check_action
        specs = list(env.full_observation_spec.items(True, True))
        self.obs_keys = [key for key, _ in specs]
        specs.append((env.reward_key, env.full_reward_spec[env.reward_key]))
        values = [
            (key, buffers.next_buffer(key, spec.shape[nb:], spec.dtype)) for key, spec in specs
        ]
        flags = []
        for key in FLAGS:
            spec = env.full_done_spec[key]
            flags.append((key, buffers.next_buffer(key, spec.shape[nb:], spec.dtype, zero=True)))
        self.value_keys = [key for key, _ in values]
        self.all_keys = [*self.value_keys, *FLAGS]
        self.write_values = StepWriter(values, nb, steps)
        self.write_all = StepWriter(values + flags, nb, steps)
        self.actions = None
        if actions is not None:
            self.actions = StepViews([dict(actions)[self.action_key]], nb, steps)

    def step(self, t: int, tensordict):
        if tensordict is None:
            action = self.actions[t][0]
        else:
            action = tensordict.get(self.action_key)
            self.check(action)
        entries = self.env._step_entries(action)
        done = entries.get("done")
        if done is None:
            self.write_values(t, [entries[key] for key in self.value_keys])
            return False
        self.write_all(t, [entries[key] for key in self.all_keys])
        return done

    def reset(self, t: int, done: torch.Tensor, tensordict) -> dict:
        """The reset observations of the whole batch (the others keep theirs, as
        ``_reset_entries`` returns them) and the done flags of the reset rows cleared."""
        mask = done.reshape(self.env.batch_size)
        entries = self.env._reset_entries(mask)
        out = {key: entries[key] for key in self.obs_keys}
        if mask.ndim == 0:  # an unbatched env
            rows = ()
        else:
            rows = mask.numpy() if mask.is_cpu else mask
        for key in FLAGS:
            value = entries.get(key)
            out[key] = (rows, False) if value is None else value
        return out
