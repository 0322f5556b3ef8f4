"""VMAS spaces as specs, and the stacking of per-agent VMAS values into group tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)

__all__ = [
    "agent_values",
    "as_column",
    "column",
    "one_hot_index",
    "same_layout",
    "space_to_spec",
    "stack_dense",
    "stack_values",
]


def space_to_spec(space: Any, device, categorical: bool) -> TensorSpec:
    """One agent's VMAS space (gym or gymnasium ``spaces``) as an unbatched spec."""
    kind = type(space).__name__
    if kind == "Discrete":
        if categorical:
            return Categorical(int(space.n), device=device, dtype=torch.int64)
        return OneHot(int(space.n), device=device, dtype=torch.int64)
    if kind == "MultiDiscrete":
        nvec = [int(n) for n in space.nvec]
        if categorical:
            return MultiCategorical(nvec, device=device, dtype=torch.int64)
        return MultiOneHot(nvec, device=device, dtype=torch.int64)
    if kind == "Box":
        shape = tuple(space.shape) or (1,)
        low = torch.as_tensor(space.low, dtype=torch.float32).reshape(shape)
        high = torch.as_tensor(space.high, dtype=torch.float32).reshape(shape)
        if bool(low.isinf().all()) and bool(high.isinf().all()):
            return Unbounded(shape=shape, device=device, dtype=torch.float32)
        return Bounded(low, high, shape=shape, device=device, dtype=torch.float32)
    if kind == "Dict":
        return Composite(
            {key: space_to_spec(sub, device, categorical) for key, sub in space.spaces.items()},
            device=device,
        )
    raise TypeError(
        f"VMAS space {space!r} is not supported: expected Box, Discrete, MultiDiscrete or Dict"
    )


def as_column(value: torch.Tensor, num_envs: int) -> torch.Tensor:
    """``[num_envs]`` tensors get a trailing feature dim (as TorchRL's rewards / infos)."""
    return value.unsqueeze(-1) if value.ndim == 1 and value.shape[0] == num_envs else value


def same_layout(specs: Sequence[TensorSpec]) -> bool:
    """Whether the agents' specs can be stacked into dense tensors (same keys, shapes, dtypes)."""
    first = specs[0]
    if isinstance(first, Composite):
        keys = set(first.keys())
        if any(not isinstance(s, Composite) or set(s.keys()) != keys for s in specs[1:]):
            return False
        return all(same_layout([s[key] for s in specs]) for key in keys)
    return all(
        type(s) is type(first) and s.shape == first.shape and s.dtype == first.dtype
        for s in specs[1:]
    )


def stack_dense(specs: Sequence[TensorSpec], dim: int = 0) -> TensorSpec:
    """Stacks agents' specs of one layout into one dense spec (leaf bounds stacked)."""
    first = specs[0]
    if isinstance(first, Composite):
        return Composite(
            {key: stack_dense([s[key] for s in specs]) for key in first.keys()},
            shape=(len(specs),),
            device=first.device,
        )
    return torch.stack(list(specs), dim)


def stack_values(values: list, num_envs: int, n: int) -> torch.Tensor | TensorDict:
    """Stacks per-agent values ``[num_envs, *F]`` (or dicts of them) on dim 1."""
    first = values[0]
    if isinstance(first, dict):
        return TensorDict(
            {key: stack_values([v[key] for v in values], num_envs, n) for key in first},
            batch_size=(num_envs, n),
        )
    return torch.stack(values, 1)


def agent_values(value: Any, num_envs: int) -> torch.Tensor | TensorDict:
    if isinstance(value, dict):
        return TensorDict(
            {key: agent_values(v, num_envs) for key, v in value.items()}, batch_size=(num_envs,)
        )
    return value


def one_hot_index(action: torch.Tensor) -> torch.Tensor:
    return action.argmax(-1, keepdim=True)


def column(action: torch.Tensor) -> torch.Tensor:
    return action.unsqueeze(-1)
