"""The TensorDicts that :class:`~rl.envs.PettingZooWrapper` returns from a reset or a step.

PettingZoo hands back per-agent dicts (``{agent: observation}``, ``{agent: reward}``...).
:class:`StepOutputs` turns them into the wrapper's grouped layout: one sub-TensorDict per
group with its agents' rows stacked, plus the root's aggregated done flags. Everything the
specs fix (each agent's row in its group, the shapes of the action masks and of the info
entries, the state's dtype) is derived once, when the specs are built; a step only
converts the values PettingZoo returned and assembles the TensorDicts without per-entry
validation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from ._pz_hetero import HeteroGroup, agent_rows
from ._pz_specs import GroupLeaf, info_value, nested_td, numpy_dtype

__all__ = ["GroupOutput", "StepOutputs"]

_EMPTY = torch.Size(())


class GroupOutput:
    """The constants of one group's entries and the conversion of its agents' values.

    Args:
        name: the group's name.
        names: its agents, in row order.
        obs_leaves: its stacked observation leaves (empty for a heterogeneous group).
        het: the :class:`HeteroGroup` of a group whose agents differ in layout, else ``None``.
        mask_source: where action masks come from (``"observation"``, ``"info"`` or ``None``).
        n_actions: the number of actions (rows of an ``"action_mask"``), ``None`` without mask.
        info_shapes: ``(name, shape of one agent's value)`` of the numeric info entries.
        use_mask: the group has a ``"mask"`` entry (which agents act).
    """

    def __init__(
        self,
        name: str,
        names: list[str],
        obs_leaves: list[GroupLeaf],
        het: HeteroGroup | None,
        mask_source: str | None,
        n_actions: int | None,
        info_shapes: list[tuple[str, tuple[int, ...]]],
        use_mask: bool,
    ) -> None:
        self.name = name
        self.names = list(names)
        self.n = len(self.names)
        self.batch_size = torch.Size((self.n,))
        self.index = {agent: j for j, agent in enumerate(self.names)}
        self.obs_leaves = obs_leaves
        self.het = het
        self.mask_source = mask_source
        has_mask = het is None and mask_source is not None
        self.mask_shape = (self.n, n_actions) if has_mask else None
        self.info_shapes = info_shapes
        self.use_mask = use_mask

    def acting_mask(self, acting: set[str]) -> torch.Tensor:
        """The ``"mask"`` entry: ``True`` for the agents acting at this step."""
        return torch.from_numpy(np.array([agent in acting for agent in self.names], dtype=bool))

    def action_mask(self, observations: dict, infos: dict, acting: set[str]) -> torch.Tensor:
        """The ``"action_mask"`` entry (all ``True`` for the agents that do not act)."""
        mask = np.ones(self.mask_shape, dtype=bool)
        holders = observations if self.mask_source == "observation" else infos
        index = self.index
        for agent in acting:
            j = index.get(agent)
            if j is None:
                continue
            holder = holders.get(agent)
            if holder is not None and "action_mask" in holder:
                mask[j] = np.asarray(holder["action_mask"]).astype(bool)
        return torch.from_numpy(mask)

    def info(self, infos: dict, key: str, shape: tuple[int, ...]) -> torch.Tensor:
        """The ``("info", key)`` entry (zeros for agents without a numeric value)."""
        rows = []
        for agent in self.names:
            found = infos.get(agent)
            value = info_value(found[key]) if found is not None and key in found else None
            if value is None:
                rows.append(np.zeros(shape, dtype=np.float32))
            else:
                rows.append(np.asarray(value, dtype=np.float32).reshape(shape))
        return torch.from_numpy(np.stack(rows))

    def build(
        self, observations: dict, infos: dict, acting: set[str], flags: dict, device
    ) -> TensorDictBase:
        """The group's sub-TensorDict: observation-side entries, then ``flags``
        (``{key tuple: [n, 1] tensor}``: reward and done entries)."""
        if self.het is not None:  # one TensorDict per agent, lazily stacked
            rows = self.het.rows(observations, infos, acting, self.mask_source)
            shared = {("mask",): self.acting_mask(acting)} if self.use_mask else {}
            shared.update(flags)
            return agent_rows(rows, shared, device)
        entries: dict = {}
        values = [observations.get(agent) for agent in self.names]
        for leaf in self.obs_leaves:
            entries[leaf.key] = leaf.encode(values)
        if self.mask_shape is not None:
            entries[("action_mask",)] = self.action_mask(observations, infos, acting)
        if self.use_mask:
            entries[("mask",)] = self.acting_mask(acting)
        for key, shape in self.info_shapes:
            entries[("info", key)] = self.info(infos, key, shape)
        entries.update(flags)
        return nested_td(entries, self.batch_size, device)


class StepOutputs:
    """Builds the wrapper's output TensorDicts of a reset and of a step.

    Args:
        groups: each group's :class:`GroupOutput`, in ``group_map`` order.
        use_mask: dead agents (absent from the step's observations) get zeros and
            ``done=True``; without it they are an error.
        done_on_any: the root flags are the ``any()`` (else the ``all()``) of the agents'.
        state: ``(shape, dtype)`` of the ``"state"`` entry, ``None`` without one.
        reward_dtype: the dtype of the groups' ``"reward"`` entries.
    """

    def __init__(
        self,
        groups: list[GroupOutput],
        *,
        use_mask: bool,
        done_on_any: bool,
        state: tuple[torch.Size, torch.dtype] | None,
        reward_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.groups = groups
        self.use_mask = use_mask
        self.reduce = any if done_on_any else all
        self.state = state
        self.state_np_dtype = None if state is None else numpy_dtype(state[1])
        self.reward_dtype = numpy_dtype(reward_dtype)

    def reset(
        self, observations: dict, infos: dict, acting: set[str], state: Any, device
    ) -> TensorDictBase:
        """The output of a reset: observations, done flags all ``False``."""
        build_device = _build_device(device)
        roots = torch.from_numpy(np.zeros((3, 1), dtype=bool)).unbind(0)
        source: dict = dict(zip(("done", "terminated", "truncated"), roots))
        for group in self.groups:
            done, term, trunc = torch.from_numpy(np.zeros((3, group.n, 1), dtype=bool)).unbind(0)
            flags = {("done",): done, ("terminated",): term, ("truncated",): trunc}
            source[group.name] = group.build(observations, infos, acting, flags, build_device)
        return self._root(source, state, device, build_device)

    def step(
        self,
        observations: dict,
        rewards: dict,
        terminations: dict,
        truncations: dict,
        infos: dict,
        acting: set[str],
        state: Any,
        device,
    ) -> TensorDictBase:
        """The output of a step: observations, per-agent rewards and done flags, root flags.

        Raises:
            ValueError: an agent is absent from ``observations`` (dead) without ``use_mask``.
        """
        build_device = _build_device(device)
        groups: dict = {}
        all_done, all_term, all_trunc = [], [], []
        for group in self.groups:
            reward, term, trunc = self._agent_flags(
                group, observations, rewards, terminations, truncations
            )
            done = [a or b for a, b in zip(term, trunc)]
            all_done += done
            all_term += term
            all_trunc += trunc
            # one array for the three flags, a tensor on each of its rows (from_numpy on a
            # numpy view costs less than torch's unbind)
            done_t, term_t, trunc_t = _rows(
                np.array((done, term, trunc), dtype=bool).reshape(3, group.n, 1)
            )
            flags = {
                ("reward",): torch.from_numpy(
                    np.array(reward, dtype=self.reward_dtype).reshape(group.n, 1)
                ),
                ("done",): done_t,
                ("terminated",): term_t,
                ("truncated",): trunc_t,
            }
            groups[group.name] = group.build(observations, infos, acting, flags, build_device)
        reduce = self.reduce
        roots = _rows(
            np.array([[reduce(all_done)], [reduce(all_term)], [reduce(all_trunc)]], dtype=bool)
        )
        source: dict = dict(zip(("done", "terminated", "truncated"), roots))
        source.update(groups)
        return self._root(source, state, device, build_device)

    def _agent_flags(
        self, group: GroupOutput, observations, rewards, terminations, truncations
    ) -> tuple[list[float], list[bool], list[bool]]:
        reward, term, trunc = [], [], []
        for agent in group.names:
            if agent in observations:
                reward.append(float(rewards.get(agent, 0.0)))
                term.append(bool(terminations.get(agent, False)))
                trunc.append(bool(truncations.get(agent, False)))
            elif self.use_mask:  # a dead agent: zeros, done
                reward.append(0.0)
                term.append(bool(terminations.get(agent, True)))
                trunc.append(bool(truncations.get(agent, True)))
            else:
                raise ValueError(
                    f"agent {agent!r} is dead (not in the step's observations): set "
                    "use_mask=True for envs whose agents can die"
                )
        return reward, term, trunc

    def _root(self, source: dict, state: Any, device, build_device) -> TensorDictBase:
        if self.state is not None:
            shape, dtype = self.state
            np_dtype = self.state_np_dtype
            source["state"] = (
                torch.from_numpy(np.array(state, dtype=np_dtype).reshape(shape))
                if np_dtype is not None
                else torch.as_tensor(np.asarray(state)).to(dtype).reshape(shape)
            )
        td = TensorDict._new_unsafe(source, batch_size=_EMPTY, device=build_device, nested=False)
        return td if build_device is device else td.to(device)


def _rows(array: np.ndarray) -> tuple[torch.Tensor, ...]:
    """A tensor sharing each row of ``array``."""
    return tuple(torch.from_numpy(row) for row in array)


def _build_device(device):
    """The device the TensorDicts are assembled on: the tensors are made on the CPU, so an
    accelerator's TensorDict is built without device and moved once at the end."""
    return device if device is None or device.type == "cpu" else None
