"""A centralised critic over several agent groups (heterogeneous or ad-hoc teams).

MAPPO's centralised critic (Yu et al., 2022, https://arxiv.org/abs/2103.01955) sees the
whole team; :class:`~rl.modules.MultiAgentMLP` can only centralise within one group.
:class:`CrossGroupCritic` encodes each group's observations to a common width, mixes
every agent of every group through one MLP trunk and writes one value per agent back
under each group's key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from tensordict.nn import TensorDictModule
from tensordict.utils import NestedKey
from torch import nn

from ._mlp import MLP

__all__ = ["CrossCriticGroupSpec", "CrossGroupCritic"]


@dataclasses.dataclass
class CrossCriticGroupSpec:
    """One agent group seen by :class:`CrossGroupCritic`.

    Args:
        obs_dim (int): size of one agent's observation vector.
        n_agents (int): agents in the group.
        obs_key (NestedKey): where the group's observations ``[*B, n_agents, obs_dim]``
            are read, e.g. ``("soldiers", "observation")``.
        value_key (NestedKey): where the group's values ``[*B, n_agents, 1]`` are
            written, e.g. ``("soldiers", "state_value")``.

    Examples:
        >>> spec = CrossCriticGroupSpec(4, 2, ("red", "observation"), ("red", "state_value"))
        >>> spec.n_agents
        2
    """

    obs_dim: int
    n_agents: int
    obs_key: NestedKey
    value_key: NestedKey


class _CrossGroupNet(nn.Module):
    """Group observations in (one tensor per group, in order), group values out."""

    def __init__(
        self,
        group_specs: dict[str, CrossCriticGroupSpec],
        d_model: int,
        trunk_depth: int,
        trunk_cells: int,
        activation_class: type[nn.Module],
        share_params: bool,
        detach_groups: Iterable[str] | None,
        device,
    ) -> None:
        super().__init__()
        if not group_specs:
            raise ValueError("CrossGroupCritic needs at least one group in group_map")
        self.names = list(group_specs)
        self.sizes = [spec.n_agents for spec in group_specs.values()]
        self.obs_dims = [spec.obs_dim for spec in group_specs.values()]
        self.detach_groups = frozenset(detach_groups or ())
        unknown = sorted(self.detach_groups - set(self.names))
        if unknown:
            raise ValueError(
                f"detach_groups names {unknown}, which are not groups of group_map {self.names}"
            )
        self.encoders = nn.ModuleDict(
            {
                name: nn.Sequential(
                    nn.Linear(spec.obs_dim, d_model, device=device), activation_class()
                )
                for name, spec in group_specs.items()
            }
        )
        width = sum(self.sizes) * d_model
        self.trunk = MLP(
            in_features=width,
            out_features=width,
            depth=trunk_depth,
            num_cells=trunk_cells,
            activation_class=activation_class,
            device=device,
        )
        if share_params:
            self.shared_head = nn.Linear(d_model, 1, device=device)
            self.group_heads = None
        else:
            self.shared_head = None
            self.group_heads = nn.ModuleDict(
                {name: nn.Linear(d_model, 1, device=device) for name in self.names}
            )

    def forward(self, *group_obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        embeddings = []
        for obs, name, n, dim in zip(group_obs, self.names, self.sizes, self.obs_dims):
            if tuple(obs.shape[-2:]) != (n, dim):
                raise ValueError(
                    f"group {name!r} observations have shape {tuple(obs.shape)}, expected "
                    f"[*B, n_agents={n}, obs_dim={dim}]"
                )
            emb = self.encoders[name](obs)
            # a group that does not learn still informs the team state, without gradients
            embeddings.append(emb.detach() if name in self.detach_groups else emb)
        team = torch.cat(embeddings, dim=-2)  # [*B, n_total, d_model]
        mixed = self.trunk(team.flatten(-2, -1)).unflatten(-1, team.shape[-2:])
        per_group = mixed.split(self.sizes, dim=-2)
        if self.shared_head is not None:
            return tuple(self.shared_head(x) for x in per_group)
        return tuple(self.group_heads[name](x) for name, x in zip(self.names, per_group))


class CrossGroupCritic(TensorDictModule):
    """A centralised critic that reads every group's observations and values each agent.

    Each group has its own encoder ``Linear(obs_dim -> d_model)`` (groups may observe
    vectors of different sizes); the encodings of all agents are concatenated, mixed by
    one MLP trunk (``[*B, n_total * d_model] -> [*B, n_total * d_model]``) and each agent's
    slice goes through a value head (one per group, or one shared with
    ``share_params=True``). Groups named in ``detach_groups`` (e.g. agents with a fixed
    policy) inform the values of the others without gradients reaching their encoder.

    It is a plain :class:`~tensordict.nn.TensorDictModule` (``in_keys`` the groups'
    ``obs_key``, ``out_keys`` their ``value_key``), so it is the ``critic_network`` of
    :class:`~rl.objectives.MAPPOLoss` as is.

    Args:
        group_map (dict[str, CrossCriticGroupSpec]): the groups, in the order their inputs
            and outputs are listed.

    Keyword Args:
        d_model (int): width of each agent's encoding. Defaults to ``64``.
        trunk_depth (int): hidden layers of the trunk. Defaults to ``2``.
        trunk_cells (int): width of the trunk's hidden layers. Defaults to ``256``.
        activation_class (type of nn.Module): activation of the encoders and the trunk.
            Defaults to :class:`torch.nn.Tanh`.
        share_params (bool): one value head for all groups. Defaults to ``False``.
        detach_groups (iterable of str, optional): groups whose encodings are detached.
        device (torch.device, optional): device of the parameters.

    Raises:
        ValueError: at construction for an empty ``group_map`` or a ``detach_groups``
            entry that is not a group; at call time when a group's observations do not
            end with ``(n_agents, obs_dim)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import CrossCriticGroupSpec, CrossGroupCritic
        >>> critic = CrossGroupCritic(
        ...     {
        ...         "red": CrossCriticGroupSpec(5, 3, ("red", "observation"), ("red", "state_value")),
        ...         "blue": CrossCriticGroupSpec(2, 2, ("blue", "observation"), ("blue", "state_value")),
        ...     },
        ...     d_model=8, trunk_depth=1, trunk_cells=16,
        ... )
        >>> td = TensorDict({"red": {"observation": torch.zeros(4, 3, 5)},
        ...                  "blue": {"observation": torch.zeros(4, 2, 2)}}, [4])
        >>> td = critic(td)
        >>> td["red", "state_value"].shape, td["blue", "state_value"].shape
        (torch.Size([4, 3, 1]), torch.Size([4, 2, 1]))
    """

    def __init__(
        self,
        group_map: dict[str, CrossCriticGroupSpec],
        *,
        d_model: int = 64,
        trunk_depth: int = 2,
        trunk_cells: int = 256,
        activation_class: type[nn.Module] = nn.Tanh,
        share_params: bool = False,
        detach_groups: Iterable[str] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        net = _CrossGroupNet(
            dict(group_map),
            d_model,
            trunk_depth,
            trunk_cells,
            activation_class,
            share_params,
            detach_groups,
            device,
        )
        super().__init__(
            net,
            in_keys=[spec.obs_key for spec in group_map.values()],
            out_keys=[spec.value_key for spec in group_map.values()],
        )
