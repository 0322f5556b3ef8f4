"""PettingZoo groups whose agents have different layouts, lazily stacked (as TorchRL).

When the agents of one group differ in their observation or action entries (keys, shapes
or dtypes), their data cannot be stacked into dense ``[n_agents, ...]`` tensors. As in
TorchRL, the group's observation and action specs are then a
:class:`~rl.core.StackedComposite` of one ``Composite`` per agent, and its data a
``LazyStackedTensorDict`` of one TensorDict per agent (stacked on the group dim):
``td["agents"][j]["observation"]`` is agent ``j``'s observation, and entries the agents
share (``reward``, ``done``, ``mask``...) still read as one ``[n_agents, ...]`` tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from rl.core import Categorical, Composite, OneHot, Unbounded
from rl.envs._gym_spaces import SpaceLeaf, assemble, walk

from ._pz_specs import info_value, nested_td

__all__ = ["HeteroGroup", "agent_rows", "make_hetero_group", "same_layout", "set_agent_entries"]


def same_layout(per_agent: list[list[SpaceLeaf]]) -> bool:
    """Whether the agents' leaves stack into dense tensors (same keys, shapes, dtypes)."""
    layouts = {
        tuple((leaf.key, tuple(leaf.spec.shape), leaf.spec.dtype) for leaf in leaves)
        for leaves in per_agent
    }
    return len(layouts) == 1


def _n_actions(group: str, agent: str, leaves: list[SpaceLeaf]) -> int:
    spec = leaves[0].spec if len(leaves) == 1 else None
    if not isinstance(spec, Categorical | OneHot):
        raise ValueError(
            f"agent {agent!r} of group {group!r} has an action mask but a non-discrete "
            f"action spec {spec if spec is not None else [leaf.key for leaf in leaves]!r}"
        )
    return spec.n


class HeteroGroup:
    """The specs and the per-agent data of one heterogeneous group.

    Args:
        group: the group's name.
        names: its agents.
        obs_leaves: each agent's observation leaves (without the action mask).
        act_leaves: each agent's action leaves.
        act_spaces: each agent's gym action space (to send Dict / Tuple actions back).
        info_keys: each agent's numeric info entries.
        infos: the infos of the first reset (the shapes of the info entries).
        has_action_mask: the group has an ``"action_mask"`` entry.
        use_mask: the group has a ``"mask"`` entry.
        device: the env's device.
    """

    def __init__(
        self,
        group: str,
        names: list[str],
        obs_leaves: list[list[SpaceLeaf]],
        act_leaves: list[list[SpaceLeaf]],
        act_spaces: list[Any],
        info_keys: list[list[str]],
        infos: dict,
        has_action_mask: bool,
        use_mask: bool,
        device,
    ) -> None:
        self.names = list(names)
        self.obs_leaves = obs_leaves
        self.act_leaves = act_leaves
        self.act_spaces = act_spaces
        self.info_keys = info_keys
        self.mask_source: str | None = None  # set by make_hetero_group
        self.n_actions = (
            [_n_actions(group, a, leaves) for a, leaves in zip(names, act_leaves)]
            if has_action_mask
            else None
        )
        obs_specs, act_specs = [], []
        for j, agent in enumerate(self.names):
            obs = Composite(device=device)
            for leaf in obs_leaves[j]:
                obs[leaf.key] = leaf.spec
            if self.n_actions is not None:
                obs["action_mask"] = Categorical(
                    2, shape=(self.n_actions[j],), dtype=torch.bool, device=device
                )
            if use_mask:
                obs["mask"] = Categorical(2, shape=(), dtype=torch.bool, device=device)
            if info_keys[j]:
                obs["info"] = Composite(
                    {
                        key: Unbounded(
                            shape=info_value(infos[agent][key]).shape,
                            dtype=torch.float32,
                            device=device,
                        )
                        for key in info_keys[j]
                    }
                )
            act = Composite(device=device)
            for leaf in act_leaves[j]:
                act[leaf.key] = leaf.spec
            obs_specs.append(obs)
            act_specs.append(act)
        self.agent_obs_specs = obs_specs
        # what rows() needs at each step, read from the specs once
        self.obs_rows = [
            [
                (leaf.key, leaf.path, leaf.from_gym, leaf.spec.shape, leaf.spec.dtype)
                for leaf in leaves
            ]
            for leaves in obs_leaves
        ]
        self.info_shapes = [
            [(key, spec["info", key].shape) for key in keys]
            for keys, spec in zip(info_keys, obs_specs)
        ]
        self.agent_act_specs = act_specs
        self.obs_spec = torch.stack(obs_specs, 0)
        self.act_spec = torch.stack(act_specs, 0)

    def rows(
        self, observations: dict, infos: dict, acting: set[str], mask_source: str | None
    ) -> list[dict]:
        """Each agent's observation entries (zeros for an agent without observation)."""
        rows = []
        for j, agent in enumerate(self.names):
            value = observations.get(agent)
            row: dict = {}
            for key, path, from_gym, shape, dtype in self.obs_rows[j]:
                if value is None:
                    row[key] = torch.zeros(shape, dtype=dtype)
                    continue
                item = walk(value, path)
                array = np.asarray(item if from_gym is None else from_gym(item))
                row[key] = torch.as_tensor(array).to(dtype).reshape(shape)
            if self.n_actions is not None:
                mask = torch.ones(self.n_actions[j], dtype=torch.bool)
                holder = observations.get(agent) if mask_source == "observation" else None
                holder = holder if holder is not None else infos.get(agent)
                if agent in acting and holder is not None and "action_mask" in holder:
                    mask = torch.from_numpy(np.asarray(holder["action_mask"]).astype(bool))
                row[("action_mask",)] = mask
            found = infos.get(agent, {})
            for key, shape in self.info_shapes[j]:
                row[("info", key)] = (
                    torch.as_tensor(info_value(found[key]), dtype=torch.float32).reshape(shape)
                    if key in found
                    else torch.zeros(shape)
                )
            rows.append(row)
        return rows

    def actions(self, group_td: TensorDictBase) -> list:
        """Each agent's PettingZoo action, from the group's (lazily stacked) actions."""
        out = []
        for j, leaves in enumerate(self.act_leaves):
            agent_td = group_td[j]
            converted = {
                leaf.path: leaf.to_gym(agent_td.get(leaf.key).detach().cpu().numpy())
                for leaf in leaves
            }
            out.append(assemble(self.act_spaces[j], converted))
        return out

    def check_actions(self, group: str, group_td: TensorDictBase | None) -> None:
        """Raises if an agent's action entry is missing, of another shape, or outside its spec."""
        for j, spec in enumerate(self.agent_act_specs):
            agent_td = None if group_td is None else group_td[j]
            for key in spec.keys(True, True):
                value = None if agent_td is None else agent_td.get(key, None)
                name = (group, *((key,) if isinstance(key, str) else key))
                if value is None:
                    raise KeyError(
                        f"step() needs the action {name!r} of agent {self.names[j]!r} "
                        f"(member {j} of the group's lazy stack), spec {spec[key]!r}"
                    )
                if value.shape != spec[key].shape or not spec[key].is_in(value):
                    raise ValueError(
                        f"action {name!r} of agent {self.names[j]!r} = {value} is outside "
                        f"its spec {spec[key]!r}"
                    )

    def rand(self, group_td: TensorDictBase | None) -> list[TensorDictBase]:
        """Random actions of each agent, among those its ``"action_mask"`` allows."""
        out = []
        for j, spec in enumerate(self.agent_act_specs):
            mask = None
            if self.n_actions is not None and group_td is not None:
                mask = group_td[j].get("action_mask", None)
            if mask is not None:
                spec = spec.clone()
                spec[self.act_leaves[j][0].key].update_mask(mask)
            out.append(spec.rand())
        return out


_MASK_KEY = ("observation", "action_mask")
_EMPTY = torch.Size(())


def make_hetero_group(
    group: str,
    names: list[str],
    act_spaces: list,
    act_per_agent: list[list[SpaceLeaf]],
    obs_per_agent: list[list[SpaceLeaf]],
    infos: dict,
    *,
    use_mask: bool,
    device,
) -> HeteroGroup:
    """The :class:`HeteroGroup` of agents whose leaves differ; its ``mask_source`` says
    where their action masks come from (``"observation"``, ``"info"`` or ``None``)."""
    has_obs_mask = any(leaf.key == _MASK_KEY for leaves in obs_per_agent for leaf in leaves)
    obs_per_agent = [[leaf for leaf in leaves if leaf.key != _MASK_KEY] for leaves in obs_per_agent]
    info_keys = [
        sorted(
            k
            for k, v in infos.get(a, {}).items()
            if k != "action_mask" and info_value(v) is not None
        )
        for a in names
    ]
    has_info_mask = any("action_mask" in infos.get(a, {}) for a in names)
    source = "observation" if has_obs_mask else ("info" if has_info_mask else None)
    het = HeteroGroup(
        group, names, obs_per_agent, act_per_agent, act_spaces, info_keys, infos,
        has_action_mask=source is not None, use_mask=use_mask, device=device,
    )  # fmt: skip
    het.mask_source = source
    return het


def agent_rows(rows: list[dict], shared: dict, device) -> LazyStackedTensorDict:
    """The group's lazy stack: one TensorDict per agent, with its row of each entry the
    agents share (``shared``: ``{key: [n_agents, ...] tensor}``)."""
    tds = []
    for j, row in enumerate(rows):
        entries = dict(row)
        for key, value in shared.items():
            entries[key] = value[j]
        tds.append(nested_td(entries, _EMPTY, device))
    return LazyStackedTensorDict(*tds, stack_dim=0)


def set_agent_entries(tensordict: TensorDictBase, group: str, values: list[TensorDictBase]):
    """Writes each agent's entries into ``tensordict[group]`` (made a lazy stack if needed)."""
    sub = tensordict.get(group, None)
    if sub is None:
        tensordict.set(group, LazyStackedTensorDict(*values, stack_dim=0))
        return tensordict
    if not isinstance(sub, LazyStackedTensorDict) or sub.stack_dim != 0:
        sub = LazyStackedTensorDict(*sub.unbind(0), stack_dim=0)
        tensordict.set(group, sub)
    for agent_td, value in zip(sub.tensordicts, values):
        agent_td.update(value)
    return tensordict
