"""Grouping the agents of a multi-agent env: :class:`MarlGroupMapType` and
:func:`check_marl_grouping`.

A multi-agent env writes the data of each group of agents under the group's name
(``("agents", "observation")``), stacked along a group dim: a group sub-tensordict has
batch size ``[*env_batch, n_agents_in_group]``. The group map ``{group: [agent names]}``
says which agents share a group; agents of one group can go through one (vectorised)
network.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

__all__ = ["MarlGroupMapType", "check_marl_grouping"]


class MarlGroupMapType(Enum):
    """Premade ways to group the agents of a multi-agent env (TorchRL's names).

    - ``ALL_IN_ONE_GROUP``: every agent in one group named ``"agents"``; the data of
      agents ``["agent_0", "agent_1"]`` is stacked under ``("agents", ...)`` with a group
      dim of size 2.
    - ``ONE_GROUP_PER_AGENT``: each agent alone in a group named after it
      (``("agent_0", ...)``, ``("agent_1", ...)``), with a group dim of size 1.

    Pass one of them (or a dict ``{group: [agent names]}``) as the ``group_map`` of
    :class:`~rl.envs.VmasEnv` or :class:`~rl.envs.PettingZooEnv`.

    Examples:
        >>> from rl.envs import MarlGroupMapType
        >>> MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["agent_0", "agent_1"])
        {'agents': ['agent_0', 'agent_1']}
        >>> MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(["agent_0", "agent_1"])
        {'agent_0': ['agent_0'], 'agent_1': ['agent_1']}
    """

    ALL_IN_ONE_GROUP = 1
    ONE_GROUP_PER_AGENT = 2

    def get_group_map(self, agent_names: Sequence[str]) -> dict[str, list[str]]:
        """The group map ``{group: [agent names]}`` of this grouping for ``agent_names``."""
        agent_names = list(agent_names)
        if self is MarlGroupMapType.ALL_IN_ONE_GROUP:
            return {"agents": agent_names}
        return {name: [name] for name in agent_names}


def check_marl_grouping(group_map: dict[str, list[str]], agent_names: Sequence[str]) -> None:
    """Checks that ``group_map`` puts every agent of ``agent_names`` in exactly one group.

    Args:
        group_map: ``{group name: [agent names]}``.
        agent_names: the names of all the agents of the env.

    Raises:
        ValueError: there are no agents, two agents share a name, there are more groups
            than agents, a group is empty, a group names an agent the env does not have,
            an agent is in two groups or an agent is in no group.

    Examples:
        >>> from rl.envs import MarlGroupMapType, check_marl_grouping
        >>> agents = ["agent_0", "agent_1", "agent_2"]
        >>> check_marl_grouping(MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(agents), agents)
        >>> check_marl_grouping({"agents": ["agent_0", "agent_1"]}, agents)
        Traceback (most recent call last):
            ...
        ValueError: agent 'agent_2' is in no group of the group_map {'agents': ['agent_0', 'agent_1']}
    """
    agent_names = list(agent_names)
    n_agents = len(agent_names)
    if n_agents == 0:
        raise ValueError("check_marl_grouping got no agent names (the env has no agents)")
    if len(set(agent_names)) != n_agents:
        dupes = sorted({name for name in agent_names if agent_names.count(name) > 1})
        raise ValueError(f"there are agents with the same name: {dupes}")
    if not isinstance(group_map, dict):
        raise TypeError(
            f"group_map must be a dict {{group: [agent names]}} or a MarlGroupMapType, "
            f"got {group_map!r}"
        )
    if len(group_map) > n_agents:
        raise ValueError(
            f"the group_map has {len(group_map)} groups, more than the {n_agents} agents "
            f"{agent_names}"
        )
    group_of: dict[str, str] = {}
    known = set(agent_names)
    for group, members in group_map.items():
        if not isinstance(group, str):
            raise TypeError(f"group names must be strings, got {group!r} in {group_map}")
        if not len(members):
            raise ValueError(f"group {group!r} of the group_map is empty")
        for name in members:
            if name not in known:
                raise ValueError(
                    f"agent {name!r} of group {group!r} is not an agent of the env "
                    f"(agents: {agent_names})"
                )
            if name in group_of:
                raise ValueError(
                    f"agent {name!r} is in more than one group ({group_of[name]!r} and {group!r})"
                )
            group_of[name] = group
    for name in agent_names:
        if name not in group_of:
            raise ValueError(f"agent {name!r} is in no group of the group_map {group_map}")
