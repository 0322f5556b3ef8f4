"""PettingZoo spaces as group specs, and the encoding of per-agent values into group tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl.core import Categorical, Composite, Unbounded
from rl.envs._gym_spaces import walk

__all__ = ["GroupLeaf", "group_leaves", "info_value", "shared_group_specs"]


class GroupLeaf:
    """One entry of a group (``("observation", ...)``, ``("action",)``): its stacked spec
    and the converters between an agent's PettingZoo value and a row of the group tensor."""

    def __init__(self, key: tuple[str, ...], leaves: list, n: int) -> None:
        self.key = key
        self.paths = [leaf.path for leaf in leaves]
        self.from_gym = [leaf.from_gym for leaf in leaves]
        self.to_gym = [leaf.to_gym for leaf in leaves]
        self.spec = torch.stack([leaf.spec for leaf in leaves], 0)
        self.dtype = self.spec.dtype
        self.row_shape = tuple(leaves[0].spec.shape)
        self.n = n

    def encode(self, values: list) -> torch.Tensor:
        """The group tensor ``[n, *F]`` from each agent's gym value (``None``: zeros)."""
        rows = []
        for j, value in enumerate(values):
            if value is None:
                rows.append(np.zeros(self.row_shape))
                continue
            value = walk(value, self.paths[j])
            convert = self.from_gym[j]
            rows.append(np.asarray(convert(value) if convert is not None else value))
        return torch.as_tensor(np.stack(rows, 0)).to(self.dtype).reshape(self.spec.shape)


def group_leaves(per_agent: list[list]) -> list[GroupLeaf]:
    """The stacked leaves of a group whose agents share one layout (``per_agent``: each
    agent's :class:`~rl.envs._gym_spaces.SpaceLeaf` list, from ``space_leaves``)."""
    n = len(per_agent)
    return [
        GroupLeaf(agent_leaves[0].key, list(agent_leaves), n) for agent_leaves in zip(*per_agent)
    ]


def info_value(value: Any) -> np.ndarray | None:
    """A numeric info entry as an array (``None`` for entries that are not numbers)."""
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001  (ragged lists and objects are skipped)
        return None
    if array.dtype.kind not in "biuf":
        return None
    return array


def shared_group_specs(n: int, device) -> tuple[Composite, Composite]:
    """The reward and done specs of a group of ``n`` agents (dense in every group)."""
    group_rew = Composite(reward=Unbounded(shape=(n, 1), device=device), shape=(n,))
    group_flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
    group_done = Composite(
        done=group_flag, terminated=group_flag.clone(), truncated=group_flag.clone(), shape=(n,)
    )
    return group_rew, group_done
