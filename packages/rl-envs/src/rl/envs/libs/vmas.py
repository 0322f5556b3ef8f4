"""VMAS (vectorised multi-agent simulator) environments: :class:`VmasWrapper` and
:class:`VmasEnv`.

VMAS simulates ``num_envs`` copies of a multi-agent scenario in one batch of torch
tensors, so the env has ``batch_size=[num_envs]``. The agents are grouped (see
:class:`~rl.envs.MarlGroupMapType`): the data of a group lives under its name with batch
size ``[num_envs, n_agents_in_group]`` (``("agents", "observation")``,
``("agents", "action")``, ``("agents", "reward")``, ``("agents", "info", ...)``); the
``"done"`` / ``"terminated"`` flags are shared by all agents of a sub-env and sit at the
root, as in TorchRL.

GitHub: https://github.com/proroklab/VectorizedMultiAgentSimulator
Paper: https://arxiv.org/abs/2207.03530
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from rl.core import (
    Categorical,
    Composite,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from rl.envs._env_base import EnvBase
from rl.envs._marl import MarlGroupMapType, check_marl_grouping

from ._common import ClassProperty, ForwardsEnvAttributes
from ._vmas_specs import (
    agent_values,
    as_column,
    column,
    one_hot_index,
    same_layout,
    space_to_spec,
    stack_dense,
    stack_values,
)

__all__ = ["VmasEnv", "VmasWrapper"]

_has_vmas = importlib.util.find_spec("vmas") is not None
_INSTALL = 'pip install "rl-envs[vmas]"'
# arguments of EnvBase that VmasEnv takes next to the scenario's keyword arguments
_ENV_KWARGS = ("device", "batch_size", "run_type_checks", "allow_done_after_reset")


def _import_vmas():
    if not _has_vmas:
        raise ImportError(f"VMAS is not installed: {_INSTALL} to use VmasEnv / VmasWrapper")
    import vmas

    return vmas


class VmasWrapper(ForwardsEnvAttributes, EnvBase):
    """Wraps a VMAS ``Environment`` (``vmas.make_env(...)``) as an :class:`~rl.envs.EnvBase`.

    The env has ``batch_size=[env.num_envs]``. Each group of agents (``group_map``) writes
    ``(group, "observation")``, ``(group, "reward")`` and, when the scenario reports
    them, ``(group, "info", name)`` entries of batch ``[num_envs, n_agents_in_group]``,
    and reads ``(group, "action")``. ``"done"`` and ``"terminated"`` (``[num_envs, 1]``)
    sit at the root: VMAS has one done flag per sub-env. A group whose agents have
    different observation or action layouts is a lazy stack
    (``LazyStackedTensorDict``) with a ``StackedComposite`` spec (``het_specs_map``).

    A VMAS env made with ``terminated_truncated=True`` also writes ``"truncated"`` (set by
    ``max_steps``) and ``done = terminated | truncated``; ``dict_spaces=True`` envs are
    read by agent name (the layout is the same).

    Partial resets go through a ``"_reset"`` mask of shape ``[num_envs, 1]``: only the
    masked sub-envs are reset (``env.reset_at``). :meth:`set_seed` seeds VMAS's own
    random state, so a seeded env reproduces its resets and dynamics.

    Args:
        env: the ``vmas.simulator.environment.Environment`` to wrap (made with
            ``wrapper=None``).
        categorical_actions: discrete actions as integers (``Categorical``) rather than
            one-hot (``OneHot``); ignored for continuous actions.
        group_map: a :class:`~rl.envs.MarlGroupMapType` or a dict
            ``{group: [agent names]}``. ``None``: agents named ``"<name>_<int>"`` are
            grouped by ``"<name>"`` (a single ``"agent"`` group is named ``"agents"``);
            if any name does not follow that pattern, all agents go in ``"agents"``.
        device: must be the VMAS env's device (``None``: taken from the env).
        batch_size: must be ``[env.num_envs]`` when given.
        run_type_checks: debug mode, check every action against ``action_spec``.

    Attributes:
        group_map (dict[str, list[str]]): the groups of agents.
        agent_names (list[str]): the names of the agents, in VMAS order.
        agent_names_to_indices_map (dict[str, int]): each agent's index in VMAS.
        het_specs (bool): whether any group is heterogeneous (lazily stacked).
        het_specs_map (dict[str, bool]): per group, whether it is heterogeneous.
        full_action_spec_unbatched, full_observation_spec_unbatched,
        full_reward_spec_unbatched, full_done_spec_unbatched: the specs without the
            ``num_envs`` dim.

    Examples:
        >>> import vmas
        >>> from rl.envs import VmasWrapper
        >>> env = VmasWrapper(vmas.make_env("navigation", num_envs=4, seed=0, n_agents=2))
        >>> td = env.rollout(5)
        >>> td["next", "agents", "observation"].shape
        torch.Size([4, 5, 2, 18])
        >>> td["next", "agents", "reward"].shape
        torch.Size([4, 5, 2, 1])
        >>> td["next", "done"].shape
        torch.Size([4, 5, 1])
    """

    _step_reads_observations = False  # steps from the action alone

    git_url = "https://github.com/proroklab/VectorizedMultiAgentSimulator"
    libname = "vmas"
    # VMAS returns the current state of the sub-envs a partial reset leaves alone
    _reset_keeps_unmasked = True

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = None,
        *,
        device=None,
        batch_size=None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = True,
        from_pixels: bool = False,
        pixels_only: bool = False,
    ) -> None:
        vmas = _import_vmas()
        if env is None:
            raise TypeError("VmasWrapper needs a VMAS env: VmasWrapper(vmas.make_env(...))")
        if not isinstance(env, vmas.simulator.environment.Environment):
            raise TypeError(
                "VmasWrapper wraps a vmas.simulator.environment.Environment (vmas.make_env with "
                f"wrapper=None), got {type(env).__name__}"
            )
        if from_pixels or pixels_only:
            raise NotImplementedError(
                "VmasWrapper does not render pixels (from_pixels / pixels_only): build it "
                "with from_pixels=False and render frames with the VMAS env's "
                "render(mode='rgb_array')"
            )
        env_device = torch.device(env.device)
        if device is not None and torch.device(device) != env_device:
            raise TypeError(
                f"device={device!r} differs from the VMAS env's device {str(env_device)!r}"
            )
        if batch_size is not None and tuple(torch.Size(batch_size)) != (env.num_envs,):
            raise TypeError(
                f"batch_size must be [{env.num_envs}] (the VMAS num_envs), got {list(batch_size)}"
            )
        super().__init__(
            device=env_device,
            batch_size=(env.num_envs,),
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
        )
        self._env = env
        self._dict_spaces = bool(getattr(env, "dict_spaces", False))
        self._terminated_truncated = bool(getattr(env, "terminated_truncated", False))
        self.categorical_actions = categorical_actions
        self.continuous_actions = bool(env.continuous_actions)
        self.from_pixels = False
        self.pixels_only = False
        self._make_specs(env, group_map)

    # ------------------------------------------------------------------------ attributes
    @property
    def lib(self):
        """The ``vmas`` module."""
        return _import_vmas()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The names of the VMAS scenarios (``[]`` when VMAS is not installed)."""
        if not _has_vmas:
            return []
        import vmas

        return list(vmas.scenarios + vmas.mpe_scenarios + vmas.debug_scenarios)

    @property
    def num_envs(self) -> int:
        return self._env.num_envs

    @property
    def n_agents(self) -> int:
        return self._env.n_agents

    @property
    def agents(self) -> list:
        return self._env.agents

    @property
    def scenario(self):
        return self._env.scenario

    # ---------------------------------------------------------------------------- specs
    def _default_group_map(self, agent_names: list[str]) -> dict[str, list[str]]:
        group_map: dict[str, list[str]] = {}
        for name in agent_names:
            prefix, _, index = name.rpartition("_")
            if not prefix or not index.isdigit():
                return MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(agent_names)
            group_map.setdefault(prefix, []).append(name)
        if list(group_map) == ["agent"]:  # TorchRL's name for a single group of "agent_i"
            group_map = {"agents": group_map["agent"]}
        return group_map

    def _make_specs(self, env, group_map) -> None:
        self.agent_names = [agent.name for agent in env.agents]
        self.agent_names_to_indices_map = {name: i for i, name in enumerate(self.agent_names)}
        if group_map is None:
            group_map = self._default_group_map(self.agent_names)
        elif isinstance(group_map, MarlGroupMapType):
            group_map = group_map.get_group_map(self.agent_names)
        check_marl_grouping(group_map, self.agent_names)
        self.group_map = {group: list(names) for group, names in group_map.items()}
        self._groups = [
            (group, [self.agent_names_to_indices_map[name] for name in names])
            for group, names in self.group_map.items()
        ]
        device = self.device
        n = env.num_envs
        infos = [env.scenario.info(agent) for agent in env.agents]
        actions = Composite(device=device)
        observations = Composite(device=device)
        rewards = Composite(device=device)
        self.het_specs_map = {}
        self._info_keys = {}
        for group, indices in self._groups:
            act = [
                space_to_spec(
                    self._agent_space(env.action_space, i), device, self.categorical_actions
                )
                for i in indices
            ]
            obs = [
                space_to_spec(self._agent_space(env.observation_space, i), device, True)
                for i in indices
            ]
            info = [
                Composite(
                    {
                        key: Unbounded(
                            shape=as_column(value, n).shape[1:], device=device, dtype=torch.float32
                        )
                        for key, value in infos[i].items()
                    },
                    device=device,
                )
                for i in indices
            ]
            het = not (same_layout(act) and same_layout(obs) and same_layout(info))
            self.het_specs_map[group] = het
            agent_specs = [
                (
                    Composite(action=a, device=device),
                    Composite(observation=o, **({"info": i} if len(i.keys()) else {})),
                    Composite(reward=Unbounded(shape=(1,), device=device)),
                )
                for a, o, i in zip(act, obs, info)
            ]
            stack = torch.stack if het else stack_dense
            actions[group] = stack([s[0] for s in agent_specs], 0)
            observations[group] = stack([s[1] for s in agent_specs], 0)
            rewards[group] = stack([s[2] for s in agent_specs], 0)
            self._info_keys[group] = list(info[0].keys()) if not het else None
        self.het_specs = any(self.het_specs_map.values())
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        done = Composite(done=flag, terminated=flag.clone(), device=device)
        if self._terminated_truncated:
            done["truncated"] = flag.clone()
        self.full_action_spec_unbatched = actions
        self.full_observation_spec_unbatched = observations
        self.full_reward_spec_unbatched = rewards
        self.full_done_spec_unbatched = done  # each setter expands to the batch (n,)
        # one-hot (and multi-one-hot) actions go to VMAS as indices
        self._to_index = {}
        for group, _ in self._groups:
            spec = actions[group, "action"] if not self.het_specs_map[group] else None
            if isinstance(spec, OneHot):
                self._to_index[group] = one_hot_index
            elif isinstance(spec, MultiOneHot):
                self._to_index[group] = spec.to_categorical
            elif isinstance(spec, Categorical):
                self._to_index[group] = column

    # ------------------------------------------------------------------------- stepping
    def _actions(self, tensordict: TensorDictBase) -> list[torch.Tensor]:
        actions: list = [None] * len(self.agent_names)
        for group, indices in self._groups:
            if self.het_specs_map[group]:
                group_td = tensordict[group]
                for j, i in enumerate(indices):
                    actions[i] = self._het_action(group_td[:, j].get("action"), group, j)
                continue
            action = tensordict[group, "action"]
            convert = self._to_index.get(group)
            if convert is not None:
                action = convert(action)
            for j, value in enumerate(action.unbind(1)):
                actions[indices[j]] = value
        return actions

    def _het_action(self, action: torch.Tensor, group: str, j: int) -> torch.Tensor:
        spec = self.full_action_spec_unbatched[group][j]["action"]
        if isinstance(spec, OneHot):
            return one_hot_index(action)
        if isinstance(spec, MultiOneHot):
            return spec.to_categorical(action)
        if isinstance(spec, Categorical):
            return column(action)
        return action

    def _group_data(self, obs, rews, infos) -> dict:
        n = self.num_envs
        out = {}
        for group, indices in self._groups:
            size = len(indices)
            if self.het_specs_map[group]:
                agents = []
                for i in indices:
                    data = {"observation": agent_values(obs[i], n)}
                    if rews is not None:
                        data["reward"] = as_column(rews[i], n)
                    if infos[i]:
                        data["info"] = TensorDict(
                            {k: as_column(v, n).to(torch.float32) for k, v in infos[i].items()},
                            batch_size=(n,),
                        )
                    agents.append(TensorDict(data, batch_size=(n,), device=self.device))
                out[group] = LazyStackedTensorDict.maybe_dense_stack(agents, dim=1)
                continue
            # the shapes were checked against the specs when they were built: the group
            # tensordicts are assembled without per-step validation
            batch = torch.Size((n, size))
            data = {"observation": stack_values([obs[i] for i in indices], n, size)}
            if rews is not None:
                data["reward"] = torch.stack([rews[i] for i in indices], 1).unsqueeze(-1)
            keys = self._info_keys[group]
            if keys:
                data["info"] = TensorDict._new_unsafe(
                    {
                        key: torch.stack([as_column(infos[i][key], n) for i in indices], 1).to(
                            torch.float32
                        )
                        for key in keys
                    },
                    batch_size=batch,
                    device=self.device,
                    nested=False,
                )
            out[group] = TensorDict._new_unsafe(
                data, batch_size=batch, device=self.device, nested=False
            )
        return out

    def _agent_space(self, space: Any, index: int) -> Any:
        if self._dict_spaces:  # a Dict space keyed by agent name
            return space[self.agent_names[index]]
        return space[index]

    def _by_index(self, values: Any) -> Any:
        """VMAS's per-agent values as a list in agent order (``dict_spaces`` envs give dicts)."""
        if isinstance(values, dict):
            return [values[name] for name in self.agent_names]
        return values

    def _output(self, obs, rews, flags, infos) -> TensorDict:
        n = self.num_envs
        source = self._group_data(self._by_index(obs), self._by_index(rews), self._by_index(infos))
        if self._terminated_truncated:
            terminated, truncated = (flag.reshape(n, 1) for flag in flags)
            source["done"] = terminated | truncated
            source["terminated"] = terminated
            source["truncated"] = truncated
        else:
            done = flags[0].reshape(n, 1)
            source["done"] = done
            source["terminated"] = done.clone()
        return TensorDict._new_unsafe(
            source, batch_size=self.batch_size, device=self.device, nested=False
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs, rews, *flags, infos = self._env.step(self._actions(tensordict))
        return self._output(obs, rews, flags, infos)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None or bool(mask.all()):
            self._env.reset(return_observations=False)
        else:
            for index in mask.reshape(self.num_envs).nonzero().flatten().tolist():
                self._env.reset_at(index, return_observations=False)
        obs, *flags, infos = self._env.get_from_scenario(
            get_observations=True,
            get_infos=True,
            get_rewards=False,
            get_dones=True,
            dict_agent_names=False,
        )
        return self._output(obs, None, flags, infos)

    def _set_seed(self, seed: int | None) -> None:
        self._env.seed(seed)

    def to(self, *args, **kwargs) -> VmasWrapper:
        device, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:
            self._env.to(device)
        return super().to(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, n_agents={self.n_agents}, "
            f"batch_size={self.batch_size}, device={self.device})"
        )


class VmasEnv(VmasWrapper):
    """A VMAS scenario built by name (``vmas.make_env``) as an :class:`~rl.envs.EnvBase`.

    See :class:`VmasWrapper` for the layout of the data, the grouping of the agents and
    the partial resets.

    Args:
        scenario: the scenario name (one of :attr:`available_envs`, e.g.
            ``"navigation"``, ``"balance"``) or a ``vmas`` ``BaseScenario`` instance.
        num_envs: the number of sub-envs simulated in one batch (the env's batch size).
        continuous_actions: continuous (``Bounded``) actions, else discrete ones.
        max_steps: the horizon: VMAS sets ``done`` (and here ``terminated``) after this
            many steps; ``None`` for none. No ``truncated`` entry is written (use a
            :class:`~rl.envs.transforms.StepCounter` for one), as in TorchRL.
        categorical_actions: discrete actions as integers (``Categorical``) rather than
            one-hot (``OneHot``).
        seed: the seed VMAS is made with.
        group_map: how to group the agents, see :class:`VmasWrapper`.
        scenario_kwargs: the scenario's arguments as a dict (``kwargs`` win on clashes).
        device: the device VMAS simulates on (``None``: torch's default device).
        **kwargs: the scenario's arguments (``n_agents=3``...), and the env arguments
            ``batch_size`` / ``run_type_checks``.

    Examples:
        >>> from rl.envs import VmasEnv, check_env_specs
        >>> env = VmasEnv("balance", num_envs=8, max_steps=100, seed=0, n_agents=3)
        >>> env.group_map
        {'agents': ['agent_0', 'agent_1', 'agent_2']}
        >>> check_env_specs(env)
        >>> env.full_action_spec["agents", "action"].shape
        torch.Size([8, 3, 2])
    """

    def __init__(
        self,
        scenario: Any,
        *,
        num_envs: int,
        continuous_actions: bool = True,
        max_steps: int | None = None,
        categorical_actions: bool = True,
        seed: int | None = None,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = None,
        scenario_kwargs: dict | None = None,
        **kwargs,
    ) -> None:
        vmas = _import_vmas()
        if isinstance(scenario, str) and scenario not in self.available_envs:
            raise ValueError(
                f"unknown VMAS scenario {scenario!r}: expected one of {sorted(self.available_envs)}"
            )
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        env_kwargs = {key: kwargs.pop(key) for key in _ENV_KWARGS if key in kwargs}
        from_pixels = kwargs.pop("from_pixels", False)
        pixels_only = kwargs.pop("pixels_only", False)
        device = env_kwargs.pop("device", None)
        if device is None:
            device = torch.get_default_device()
        env = vmas.make_env(
            scenario=scenario,
            num_envs=num_envs,
            device=device,
            continuous_actions=continuous_actions,
            max_steps=max_steps,
            seed=seed,
            wrapper=None,
            **{**(scenario_kwargs or {}), **kwargs},
        )
        super().__init__(
            env,
            categorical_actions=categorical_actions,
            group_map=group_map,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            **env_kwargs,
        )
        self.scenario_name = scenario

    def __repr__(self) -> str:
        return f"{super().__repr__()} (scenario={self.scenario_name})"
