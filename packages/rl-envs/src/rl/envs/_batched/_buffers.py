"""The preallocated buffers that batched envs and their workers exchange data through.

One set of ``[num_workers, *sub_batch, ...]`` tensors per role, allocated once from the
batched env's specs (in shared memory for :class:`~rl.envs.ParallelEnv`):

- ``inputs``: the action and state entries the parent writes before a step;
- ``out``: the *current* outputs of every worker: a step writes the next observation,
  reward and done flags there, a reset the reset observation and flags;
- ``reset``: where a step-and-maybe-reset writes the reset entries of the workers that
  were done (``out`` then still holds their final observation);
- ``mask``: the ``"_reset"`` mask of a partial reset, ``[num_workers, *sub_batch, 1]``.

Worker ``i`` only ever touches index ``i`` of each tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rl.core import Composite

__all__ = ["BufferLayout", "Buffers", "allocate_buffers"]

NestedKey = str | tuple[str, ...]


def _leaves(spec: Composite) -> list[NestedKey]:
    return list(spec.keys(include_nested=True, leaves_only=True))


@dataclass
class BufferLayout:
    """Which keys live in which buffer (computed once from the batched env's specs)."""

    in_keys: list[NestedKey]
    action_keys: list[NestedKey]
    step_keys: list[NestedKey]
    reset_keys: list[NestedKey]
    done_key: NestedKey

    @classmethod
    def from_specs(
        cls,
        full_action_spec: Composite,
        full_state_spec: Composite,
        full_observation_spec: Composite,
        full_reward_spec: Composite,
        full_done_spec: Composite,
        done_key: NestedKey,
    ) -> BufferLayout:
        action_keys = _leaves(full_action_spec)
        state_keys = [k for k in _leaves(full_state_spec) if k not in action_keys]
        obs_keys = _leaves(full_observation_spec)
        done_keys = _leaves(full_done_spec)
        step_keys = obs_keys + _leaves(full_reward_spec) + done_keys
        reset_keys = obs_keys + done_keys + [k for k in state_keys if k not in obs_keys]
        return cls(
            in_keys=action_keys + state_keys,
            action_keys=action_keys,
            step_keys=step_keys,
            reset_keys=reset_keys,
            done_key=done_key,
        )


@dataclass
class Buffers:
    """The tensors of a :class:`BufferLayout` (``{key: tensor[N, *B, ...]}`` per role)."""

    inputs: dict = field(default_factory=dict)
    out: dict = field(default_factory=dict)
    reset: dict = field(default_factory=dict)
    mask: torch.Tensor | None = None


def allocate_buffers(
    layout: BufferLayout, input_spec: Composite, output_spec: Composite, share: bool
) -> Buffers:
    """Zero-filled CPU buffers shaped like the specs (``share``: in shared memory)."""

    def alloc(spec) -> torch.Tensor:
        tensor = torch.zeros(spec.shape, dtype=spec.dtype)
        return tensor.share_memory_() if share else tensor

    specs = {}
    for composite in input_spec.values():
        for key in _leaves(composite):
            specs[key] = composite[key]
    for composite in output_spec.values():
        for key in _leaves(composite):
            specs[key] = composite[key]
    buffers = Buffers()
    for key in layout.in_keys:
        buffers.inputs[key] = alloc(specs[key])
    for key in dict.fromkeys(layout.step_keys + layout.reset_keys):
        buffers.out[key] = alloc(specs[key])
    for key in layout.reset_keys:
        buffers.reset[key] = alloc(specs[key])
    done = buffers.out[layout.done_key]
    buffers.mask = torch.zeros(done.shape, dtype=torch.bool)
    if share:
        buffers.mask.share_memory_()
    return buffers
