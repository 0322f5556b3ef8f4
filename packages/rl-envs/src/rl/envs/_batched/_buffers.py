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
    # root observations a sub-env's ``_step`` may read from its input, as TorchRL hands
    # it the caller's root: copied into input buffers of their own at each step
    obs_in_keys: list[NestedKey] = field(default_factory=list)

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


_ALIGN = 64  # bytes: each buffer starts on its own cache line


@dataclass
class Buffers:
    """The tensors of a :class:`BufferLayout` (``{key: tensor[N, *B, ...]}`` per role).

    Shared buffers are views into one flat shared-memory block, so that sending them to
    a worker process passes a single shared-memory handle (the views are rebuilt there).
    """

    inputs: dict = field(default_factory=dict)
    out: dict = field(default_factory=dict)
    reset: dict = field(default_factory=dict)
    mask: torch.Tensor | None = None
    flat: torch.Tensor | None = None
    entries: list = field(default_factory=list)  # (role, key, dtype, shape, offset)

    def __reduce__(self):
        if self.flat is None:
            return super().__reduce__()
        return _rebuild_buffers, (self.flat, self.entries)


def _view(flat: torch.Tensor, dtype: torch.dtype, shape: torch.Size, offset: int) -> torch.Tensor:
    nbytes = torch.Size(shape).numel() * dtype.itemsize
    return flat[offset : offset + nbytes].view(dtype).view(shape)


def _rebuild_buffers(flat: torch.Tensor, entries: list) -> Buffers:
    buffers = Buffers(flat=flat, entries=entries)
    for role, key, dtype, shape, offset in entries:
        tensor = _view(flat, dtype, shape, offset)
        if role == "mask":
            buffers.mask = tensor
        else:
            getattr(buffers, role)[key] = tensor
    return buffers


def allocate_buffers(
    layout: BufferLayout, input_spec: Composite, output_spec: Composite, share: bool
) -> Buffers:
    """Zero-filled CPU buffers shaped like the specs (``share``: in shared memory)."""
    specs = {}
    for composite in (*input_spec.values(), *output_spec.values()):
        for key in _leaves(composite):
            specs[key] = composite[key]
    entries = []
    offset = 0

    def add(role: str, key, dtype: torch.dtype, shape: torch.Size) -> None:
        nonlocal offset
        entries.append((role, key, dtype, torch.Size(shape), offset))
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        offset += -(-nbytes // _ALIGN) * _ALIGN

    for key in layout.in_keys + layout.obs_in_keys:
        add("inputs", key, specs[key].dtype, specs[key].shape)
    for key in dict.fromkeys(layout.step_keys + layout.reset_keys):
        add("out", key, specs[key].dtype, specs[key].shape)
    for key in layout.reset_keys:
        add("reset", key, specs[key].dtype, specs[key].shape)
    add("mask", None, torch.bool, specs[layout.done_key].shape)
    flat = torch.zeros(max(offset, 1), dtype=torch.uint8)
    if share:
        flat.share_memory_()
    buffers = _rebuild_buffers(flat, entries)
    if not share:
        buffers.flat = None
    return buffers
