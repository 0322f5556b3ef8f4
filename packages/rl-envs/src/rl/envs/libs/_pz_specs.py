"""PettingZoo spaces as group specs, the encoding of per-agent values into group tensors,
and the TensorDicts that hold them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl.core import Categorical, Composite, OneHot, Unbounded
from rl.envs._gym_spaces import walk

__all__ = [
    "DenseGroup",
    "GroupLeaf",
    "group_leaves",
    "info_value",
    "nested_td",
    "numpy_dtype",
    "shared_group_specs",
]

_MASK_KEY = ("observation", "action_mask")


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
        self.shape = tuple(self.spec.shape)
        self.np_dtype = numpy_dtype(self.dtype)
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
            rows.append(convert(value) if convert is not None else value)
        if self.np_dtype is not None:  # one numpy array, shared with the tensor
            return torch.from_numpy(np.asarray(rows, dtype=self.np_dtype).reshape(self.shape))
        stacked = np.stack([np.asarray(row) for row in rows], 0)
        return torch.as_tensor(stacked).to(self.dtype).reshape(self.shape)


def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The numpy dtype of a torch dtype, ``None`` when numpy has none (``bfloat16``)."""
    try:
        return torch.empty((), dtype=dtype).numpy().dtype
    except TypeError:
        return None


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


def nested_td(entries: dict, batch_size: torch.Size, device) -> TensorDict:
    """A TensorDict of ``entries`` (``{key tuple: tensor}``), nested along the keys.

    The tensors are trusted: their shapes were derived from the specs when those were built,
    so the TensorDict is assembled without per-entry checks (``TensorDict._new_unsafe``).
    They must already be on ``device``; ``batch_size`` is a ``torch.Size``.
    """
    tree: dict = {}
    for key, value in entries.items():
        node = tree
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return _tree_td(tree, batch_size, device)


def _tree_td(tree: dict, batch_size: torch.Size, device) -> TensorDict:
    # sub-dicts become TensorDicts of the same batch size, built here (nested=False skips
    # TensorDict's own walk over the entries)
    for name, value in tree.items():
        if type(value) is dict:
            tree[name] = _tree_td(value, batch_size, device)
    return TensorDict._new_unsafe(tree, batch_size=batch_size, device=device, nested=False)


class DenseGroup:
    """The specs of a group whose agents share one layout: its data are ``[n, ...]`` tensors.

    The action mask, when the agents' observations (a Dict with ``"action_mask"``) or infos
    hold one, leaves the observation for a boolean ``"action_mask"`` entry ``[n, n_actions]``;
    the numeric info entries all agents report become ``("info", name)`` entries.

    Args:
        group: the group's name.
        names: its agents.
        act_per_agent: each agent's action leaves (``space_leaves``), of one layout.
        obs_per_agent: each agent's observation leaves, of one layout.
        infos: the infos of the first reset (which entries exist, their shapes).
        use_mask: add the ``"mask"`` entry (which agents act).
        device: the specs' device.

    Raises:
        ValueError: the group has an action mask but its action is not discrete.
    """

    def __init__(
        self,
        group: str,
        names: list[str],
        act_per_agent: list[list],
        obs_per_agent: list[list],
        infos: dict,
        *,
        use_mask: bool,
        device,
    ) -> None:
        n = len(names)
        shape = (n,)
        self.act_leaves = group_leaves(act_per_agent)
        obs = group_leaves(obs_per_agent)
        self.obs_leaves = [leaf for leaf in obs if leaf.key != _MASK_KEY]
        numeric = [
            {k for k, v in infos.get(a, {}).items() if info_value(v) is not None} for a in names
        ]
        info_keys = sorted(set.intersection(*numeric))
        mask_source = "observation" if len(self.obs_leaves) < len(obs) else None
        if "action_mask" in info_keys:
            info_keys.remove("action_mask")
            mask_source = mask_source or "info"
        self.mask_source = mask_source
        self.info_shapes = [
            (key, tuple(info_value(infos[names[0]][key]).shape)) for key in info_keys
        ]
        self.n_actions = None
        obs_spec = Composite(shape=shape, device=device)
        for leaf in self.obs_leaves:
            obs_spec[leaf.key] = leaf.spec
        if mask_source is not None:
            action = self.act_leaves[0].spec
            if not isinstance(action, Categorical | OneHot):
                raise ValueError(
                    f"group {group!r} has an action mask but a non-discrete action spec {action!r}"
                )
            self.n_actions = action.n
            obs_spec["action_mask"] = Categorical(
                2, shape=(n, action.n), dtype=torch.bool, device=device
            )
        if use_mask:
            obs_spec["mask"] = Categorical(2, shape=shape, dtype=torch.bool, device=device)
        if self.info_shapes:
            obs_spec["info"] = Composite(
                {
                    key: Unbounded(shape=(n, *row), dtype=torch.float32, device=device)
                    for key, row in self.info_shapes
                },
                shape=shape,
            )
        act_spec = Composite(shape=shape, device=device)
        for leaf in self.act_leaves:
            act_spec[leaf.key] = leaf.spec
        self.obs_spec = obs_spec
        self.act_spec = act_spec
