"""PettingZoo environments: :class:`PettingZooWrapper` and :class:`PettingZooEnv`.

Both PettingZoo APIs are wrapped: a ``ParallelEnv`` steps all its live agents at once, an
``AECEnv`` steps only the agent whose turn it is (``agent_selection``). The agents are
grouped (see :class:`~rl.envs.MarlGroupMapType`): the data of a group lives under its
name, stacked along a group dim (``("player", "observation")`` of shape
``[n_agents_in_group, ...]``), with per-agent ``reward``, ``done``, ``terminated`` and
``truncated`` entries; the root carries the aggregated ``done`` / ``terminated`` /
``truncated`` flags, as in TorchRL.

GitHub: https://github.com/Farama-Foundation/PettingZoo
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Categorical, Composite, Unbounded
from rl.envs._env_base import EnvBase
from rl.envs._gym_spaces import assemble, space_leaves
from rl.envs._marl import MarlGroupMapType, check_marl_grouping

from ._common import ClassProperty, ForwardsEnvAttributes
from ._pz_hetero import HeteroGroup, make_hetero_group, same_layout, set_agent_entries
from ._pz_outputs import GroupOutput, StepOutputs
from ._pz_specs import DenseGroup, shared_group_specs
from ._pz_state import AECState
from ._pz_tasks import available_tasks, load_task

__all__ = ["PettingZooEnv", "PettingZooWrapper"]

_has_pettingzoo = importlib.util.find_spec("pettingzoo") is not None
_INSTALL = 'pip install "rl-envs[pettingzoo]"'


def _import_pettingzoo():
    if not _has_pettingzoo:
        raise ImportError(
            f"PettingZoo is not installed: {_INSTALL} to use PettingZooEnv / PettingZooWrapper"
        )
    import pettingzoo
    import pettingzoo.utils.env

    return pettingzoo


def _action_array(tensordict: TensorDictBase, key: tuple[str, ...]) -> np.ndarray:
    value = tensordict.get(key, None)
    if value is None:
        raise KeyError(key)  # EnvBase.step names the missing action key and the action spec
    return value.detach().cpu().numpy()


class PettingZooWrapper(ForwardsEnvAttributes, EnvBase):
    """Wraps a PettingZoo ``ParallelEnv`` or ``AECEnv`` as an :class:`~rl.envs.EnvBase`.

    The env has ``batch_size=[]``. Each group of agents (``group_map``) has batch size
    ``[n_agents_in_group]`` and holds ``(group, "observation")`` (a Dict observation
    space nests: tic-tac-toe's board is ``(group, "observation", "observation")``),
    ``(group, "action")``, ``(group, "reward")``, ``(group, "done")``,
    ``(group, "terminated")``, ``(group, "truncated")`` (``[n, 1]``) and, when the env
    reports them, ``(group, "info", name)`` entries. The root holds ``done`` /
    ``terminated`` / ``truncated`` (``[1]``): the ``any()`` of the agents' flags when
    ``done_on_any`` (default for parallel envs), else their ``all()`` (default for AEC
    envs). ``return_state=True`` adds the global ``"state"``.

    Action masks: when an agent's observation (a Dict with ``"action_mask"``) or info
    holds an action mask, the group gets an ``(group, "action_mask")`` entry (boolean,
    ``[n, n_actions]``; all ``True`` for agents that are not acting) and the mask leaves
    the observation. :meth:`rand_action` and :meth:`rollout` without a policy draw
    actions among the allowed ones; a policy reads the mask from the data.

    Agents of one group with different observation or action layouts (keys, shapes,
    dtypes) are stacked lazily, as in TorchRL: the group's observation and action specs
    are a ``StackedComposite`` of one ``Composite`` per agent and its data a
    ``LazyStackedTensorDict`` (``td["agents"][j]["observation"]``); the entries the agents
    share (``reward``, ``done``, ``mask``) still read as ``[n, ...]`` tensors. Such data
    flows through ``step_mdp``, ``rollout``, ``SerialEnv(..., use_buffers=False)``,
    collectors and a ``LazyStackStorage`` replay buffer. A Dict action space nests under
    ``(group, "action", name)``, a Tuple one as in :class:`~rl.envs.GymWrapper`.

    ``use_mask=True`` adds ``(group, "mask")`` (``[n]``): ``True`` for the agents acting
    at this step (the live agents of a parallel env, the selected agent of an AEC env).
    It is required for AEC envs and for parallel envs whose agents can die; dead agents
    get zeros and ``done=True``. An AEC env is stepped with the action of the selected
    agent only (``None`` when that agent is already done, as PettingZoo requires).

    Args:
        env: the ``pettingzoo.ParallelEnv`` or ``pettingzoo.AECEnv`` to wrap.
        return_state: add the env's global ``state()`` as ``"state"``.
        group_map: a :class:`~rl.envs.MarlGroupMapType` or a dict
            ``{group: [agent names]}``. ``None``: one group per agent for AEC envs; for
            parallel envs, agents named ``"<name>_<int>"`` are grouped by ``"<name>"``
            and the others each get their own group.
        use_mask: add the ``"mask"`` entries (required for AEC envs).
        categorical_actions: discrete actions as integers (``Categorical``) rather than
            one-hot (``OneHot``).
        seed: the seed of the first reset (:meth:`set_seed` sets the next one).
        done_on_any: aggregate the agents' done flags with ``any()`` (``True``) or
            ``all()`` (``False``); ``None``: ``any()`` for parallel envs, ``all()`` for AEC.
        device: the device of the output tensors.
        batch_size: must be ``[]`` (PettingZoo envs are not batched).
        run_type_checks: debug mode, check every action against ``action_spec``.

    Raises:
        ValueError: an AEC env without ``use_mask=True``, a non-empty ``batch_size`` or a
            bad ``group_map``.

    Examples:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> from rl.envs import PettingZooWrapper
        >>> env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True, seed=0)
        >>> env.group_map
        {'player_1': ['player_1'], 'player_2': ['player_2']}
        >>> td = env.reset()
        >>> td["player_1", "observation", "observation"].shape, td["player_1", "action_mask"].shape
        (torch.Size([1, 3, 3, 2]), torch.Size([1, 9]))
        >>> td["player_1", "mask"], td["player_2", "mask"]
        (tensor([True]), tensor([False]))
    """

    _step_reads_observations = False  # steps from the action alone

    git_url = "https://github.com/Farama-Foundation/PettingZoo"
    libname = "pettingzoo"

    def __init__(
        self,
        env: Any = None,
        return_state: bool = False,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        *,
        device=None,
        batch_size=None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = True,
    ) -> None:
        pettingzoo = _import_pettingzoo()
        if env is None:
            raise TypeError("PettingZooWrapper needs a PettingZoo env: PettingZooWrapper(env)")
        base = pettingzoo.utils.env
        if not isinstance(env, base.ParallelEnv | base.AECEnv):
            raise TypeError(
                "PettingZooWrapper wraps a pettingzoo ParallelEnv or AECEnv, got "
                f"{type(env).__name__}"
            )
        parallel = isinstance(env, base.ParallelEnv)
        if not parallel and not use_mask:
            raise ValueError(
                "an AEC PettingZoo env steps one agent at a time: set use_mask=True so that "
                "each group's 'mask' says which agent acts"
            )
        if batch_size is not None and len(torch.Size(batch_size)):
            raise ValueError(
                f"PettingZoo envs are not batched: batch_size must be [], got {list(batch_size)}"
            )
        super().__init__(
            device=device,
            batch_size=(),
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
        )
        self._env = env
        self.parallel = parallel
        self.return_state = return_state
        self.use_mask = use_mask
        self.categorical_actions = categorical_actions
        self.done_on_any = parallel if done_on_any is None else bool(done_on_any)
        self.seed = seed
        self._next_seed = seed
        self._make_specs(group_map)

    # ------------------------------------------------------------------------ attributes
    @property
    def lib(self):
        """The ``pettingzoo`` module."""
        return _import_pettingzoo()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The PettingZoo task names (``[]`` when PettingZoo is not installed)."""
        if not _has_pettingzoo:
            return []
        return available_tasks()

    @property
    def possible_agents(self) -> list[str]:
        return list(self._env.possible_agents)

    @property
    def agents(self) -> list[str]:
        """The agents alive now (PettingZoo's ``env.agents``)."""
        return list(self._env.agents)

    # ---------------------------------------------------------------------------- specs
    def _default_group_map(self, agent_names: list[str]) -> dict[str, list[str]]:
        if not self.parallel:
            return MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(agent_names)
        group_map: dict[str, list[str]] = {}
        for name in agent_names:
            prefix, _, index = name.rpartition("_")
            group = prefix if prefix and index.isdigit() else name
            group_map.setdefault(group, []).append(name)
        return group_map

    def _make_specs(self, group_map) -> None:
        env = self._env
        agent_names = self.possible_agents
        if group_map is None:
            group_map = self._default_group_map(agent_names)
        elif isinstance(group_map, MarlGroupMapType):
            group_map = group_map.get_group_map(agent_names)
        check_marl_grouping(group_map, agent_names)
        self.group_map = {group: list(names) for group, names in group_map.items()}
        # infos (and action masks kept there) are only known after a reset
        observations, infos = self._reset_env()
        device = self.device
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        obs_spec = Composite(device=device)
        act_spec = Composite(device=device)
        rew_spec = Composite(device=device)
        done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone())
        self._dense: dict[str, DenseGroup] = {}
        self._het: dict[str, HeteroGroup] = {}
        self.has_action_mask: dict[str, bool] = {}
        for group, names in self.group_map.items():
            specs = self._make_group_specs(group, names, infos)
            obs_spec[group], act_spec[group], rew_spec[group], done_spec[group] = specs
        if self.return_state:
            state_space = getattr(env, "state_space", None)
            if state_space is not None:
                (state_leaf,) = space_leaves(state_space, (), False, ("state",))
                obs_spec["state"] = state_leaf.spec
            else:
                example = torch.as_tensor(np.asarray(env.state()))
                obs_spec["state"] = Unbounded(
                    shape=example.shape, dtype=example.dtype, device=device
                )
        self.full_observation_spec = obs_spec
        self.full_action_spec = act_spec
        self.full_reward_spec = rew_spec
        self.full_done_spec = done_spec
        self._first_reset = (observations, infos)
        self._make_outputs(obs_spec)

    def _make_outputs(self, obs_spec: Composite) -> None:
        """What a step needs from the specs, derived once: each agent's group and row, the
        shapes of the masks and info entries (:class:`StepOutputs`)."""
        self._agent_slot = {
            agent: (group, j)
            for group, names in self.group_map.items()
            for j, agent in enumerate(names)
        }
        self._act_spaces = {
            group: [self._env.action_space(agent) for agent in names]
            for group, names in self.group_map.items()
        }
        groups = []
        for group, names in self.group_map.items():
            het, dense = self._het.get(group), self._dense.get(group)
            groups.append(
                GroupOutput(
                    group,
                    names,
                    dense.obs_leaves if dense is not None else [],
                    het,
                    het.mask_source if het is not None else dense.mask_source,
                    dense.n_actions if dense is not None else None,
                    dense.info_shapes if dense is not None else [],
                    self.use_mask,
                )
            )
        state = obs_spec["state"] if self.return_state else None
        self._outputs = StepOutputs(
            groups,
            use_mask=self.use_mask,
            done_on_any=self.done_on_any,
            state=None if state is None else (state.shape, state.dtype),
            reward_dtype=self.full_reward_spec[next(iter(self.group_map)), "reward"].dtype,
        )

    def _make_group_specs(
        self, group: str, names: list[str], infos: dict
    ) -> tuple[Composite, Composite, Composite, Composite]:
        """The observation, action, reward and done specs of one group (shape ``[n]``)."""
        env = self._env
        act_spaces = [env.action_space(a) for a in names]
        act_per_agent = [
            space_leaves(space, (), self.categorical_actions, ("action",)) for space in act_spaces
        ]
        obs_per_agent = [
            space_leaves(env.observation_space(a), (), False, ("observation",)) for a in names
        ]
        group_rew, group_done = shared_group_specs(len(names), self.device)
        if same_layout(act_per_agent) and same_layout(obs_per_agent):
            built = DenseGroup(
                group, names, act_per_agent, obs_per_agent, infos,
                use_mask=self.use_mask, device=self.device,
            )  # fmt: skip
            self._dense[group] = built
        else:  # agents that differ in layout: lazily stacked, as in TorchRL
            built = make_hetero_group(
                group, names, act_spaces, act_per_agent, obs_per_agent, infos,
                use_mask=self.use_mask, device=self.device,
            )  # fmt: skip
            self._het[group] = built
        self.has_action_mask[group] = built.mask_source is not None
        return built.obs_spec, built.act_spec, group_rew, group_done

    # ------------------------------------------------------------------------- stepping
    def _reset_env(self) -> tuple[dict, dict]:
        seed, self._next_seed = self._next_seed, None
        if self.parallel:
            observations, infos = self._env.reset(seed=seed)
            return observations, infos
        self._env.reset(seed=seed)
        self.__dict__["_aec_reader"] = AECState(self._env)
        return self._aec_observations(), dict(self._aec_state().get("infos"))

    def _aec_observations(self) -> dict:
        env = self._env
        agents = self._aec_state().get("agents")
        return {agent: env.observe(agent) for agent in agents}  # the live agents

    def _aec_state(self) -> AECState:
        """Reads the AEC env's state (``agent_selection``, ``rewards``, ``terminations``,
        ``truncations``, ``infos``, ``agents``) as ``getattr(self._env, name)`` does,
        without the ``__getattr__`` hop of each PettingZoo wrapper (see ``AECState``);
        built again at every reset, in case the wrapper chain changed."""
        state = self.__dict__.get("_aec_reader")
        if state is None:
            state = self.__dict__["_aec_reader"] = AECState(self._env)
        return state

    def _acting(self) -> set[str]:
        if self.parallel:
            return set(self._env.agents)
        return {self._aec_state().get("agent_selection")}

    def _state(self) -> Any:
        return self._env.state() if self.return_state else None

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        first = self.__dict__.pop("_first_reset", None)
        if first is not None and self._next_seed is None:
            observations, infos = first  # the reset that built the specs
        else:
            observations, infos = self._reset_env()
        return self._outputs.reset(
            observations, infos, self._acting(), self._state(), self.__dict__["_device"]
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        if self.parallel:
            live = set(env.agents)
            actions = {}
            for group, names in self.group_map.items():
                for agent, value in zip(names, self._group_actions(tensordict, group)):
                    if agent in live:
                        actions[agent] = value
            observations, rewards, terminations, truncations, infos = env.step(actions)
            acting = set(env.agents)
        else:
            state = self._aec_state()
            agent = state.get("agent_selection")
            if state.get("terminations").get(agent, False) or state.get("truncations").get(
                agent, False
            ):
                action = None  # PettingZoo steps a done agent with None (removing it)
            else:
                group, j = self._agent_slot[agent]
                action = self._group_actions(tensordict, group, j)[0]
            env.step(action)
            observations = self._aec_observations()
            rewards, terminations = dict(state.get("rewards")), dict(state.get("terminations"))
            truncations, infos = dict(state.get("truncations")), dict(state.get("infos"))
            acting = {state.get("agent_selection")}
        return self._outputs.step(
            observations,
            rewards,
            terminations,
            truncations,
            infos,
            acting,
            self._state(),
            self.__dict__["_device"],
        )

    def _group_actions(
        self, tensordict: TensorDictBase, group: str, only: int | None = None
    ) -> list:
        """Each agent's PettingZoo action (only agent ``only``'s, when given), from the
        group's action entries."""
        het = self._het.get(group)
        if het is not None:
            actions = het.actions(tensordict.get(group))
            return actions if only is None else [actions[only]]
        leaves = self._dense[group].act_leaves
        rows = range(len(self.group_map[group])) if only is None else (only,)
        if len(leaves) == 1 and leaves[0].key == ("action",):
            to_gym = leaves[0].to_gym
            value = _action_array(tensordict, (group, "action"))
            return [to_gym[j](value[j]) for j in rows]
        # Dict / Tuple action spaces: (group, "action", ...) entries, assembled per agent
        values = [_action_array(tensordict, (group, *leaf.key)) for leaf in leaves]
        spaces = self._act_spaces[group]
        return [
            assemble(
                spaces[j], {leaf.paths[j]: leaf.to_gym[j](v[j]) for leaf, v in zip(leaves, values)}
            )
            for j in rows
        ]

    def _set_seed(self, seed: int | None) -> None:
        self.seed = seed
        self._next_seed = seed
        self.__dict__.pop("_first_reset", None)

    # ------------------------------------------------------------------- action masks
    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Uniformly random actions, drawn among those each group's ``"action_mask"`` allows."""
        if tensordict is None:
            tensordict = TensorDict({}, batch_size=self.batch_size, device=self.device)
        specs = self.full_action_spec
        for group in self.group_map:
            het = self._het.get(group)
            if het is not None:
                set_agent_entries(tensordict, group, het.rand(tensordict.get(group, None)))
                continue
            spec = specs[group, "action"]
            mask = (
                tensordict.get((group, "action_mask"), None)
                if self.has_action_mask[group]
                else None
            )
            if mask is not None:
                spec = self._masked_spec(group, spec)
                spec.update_mask(mask)
            tensordict.set((group, "action"), spec.rand())
        return tensordict

    def _masked_spec(self, group: str, spec):
        """A copy of the group's action spec that takes the step's mask (made once per spec
        object, so that the action spec itself keeps no mask)."""
        cache = self.__dict__.setdefault("_masked_specs", {})
        found = cache.get(group)
        if found is None or found[0] is not spec:
            found = cache[group] = (spec, spec.clone())
        return found[1]

    def check_action(self, tensordict: TensorDictBase) -> None:
        """Raises if an action entry is missing or outside its spec (per agent in a
        heterogeneous group)."""
        for group, het in self._het.items():
            het.check_actions(group, tensordict.get(group, None))
        for key in self.action_keys:
            if isinstance(key, tuple) and key[0] in self._het:
                continue
            value = tensordict.get(key, None)
            spec = self.full_action_spec[key]
            if value is None:
                raise KeyError(
                    f"step() needs the action key {key!r} (action_spec {spec!r}) but the "
                    f"tensordict has keys {sorted(map(str, tensordict.keys(True, True)))}"
                )
            if value.shape != spec.shape or not spec.is_in(value):
                raise ValueError(f"action {key!r} = {value} is outside action_spec {spec!r}")

    def _draws_actions_per_step(self) -> bool:
        # random actions are drawn at each step (rather than for all steps at once) so that
        # they respect the current action masks
        return True

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self._env.close()
        super().close()

    def __repr__(self) -> str:
        kind = "parallel" if self.parallel else "AEC"
        return f"{type(self).__name__}({kind}, group_map={self.group_map}, device={self.device})"


class PettingZooEnv(PettingZooWrapper):
    """A PettingZoo task built by name as an :class:`~rl.envs.EnvBase`.

    See :class:`PettingZooWrapper` for the layout of the data, the grouping of the agents
    and the masks. Tasks are found by module name (``"tictactoe_v3"`` or
    ``"classic/tictactoe_v3"``) and imported alone, so a family whose dependency is
    missing (Atari, Butterfly, SISL, MPE) does not break the others; building a task of
    such a family raises an ImportError naming the missing package.

    Args:
        task: the task name, ``"<task>"`` or ``"<family>/<task>"``.
        parallel: build the ``ParallelEnv`` version (``task.parallel_env``) rather than the
            ``AECEnv`` one (``task.env``).
        return_state, group_map, use_mask, categorical_actions, seed, done_on_any: see
            :class:`PettingZooWrapper`.
        device, batch_size, run_type_checks: the env arguments.
        **kwargs: the task's own arguments (``max_cycles=...``).

    Examples:
        >>> from rl.envs import PettingZooEnv, check_env_specs
        >>> env = PettingZooEnv("rps_v2", parallel=True, seed=0)
        >>> env.group_map
        {'player': ['player_0', 'player_1']}
        >>> td = env.rollout(3)
        >>> td["next", "player", "reward"].shape
        torch.Size([3, 2, 1])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        task: str,
        parallel: bool,
        return_state: bool = False,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        *,
        device=None,
        batch_size=None,
        run_type_checks: bool = False,
        **kwargs,
    ) -> None:
        _import_pettingzoo()
        module = load_task(task)
        if parallel and not hasattr(module, "parallel_env"):
            raise ValueError(f"PettingZoo task {task!r} has no parallel API: use parallel=False")
        env = module.parallel_env(**kwargs) if parallel else module.env(**kwargs)
        super().__init__(
            env,
            return_state=return_state,
            group_map=group_map,
            use_mask=use_mask,
            categorical_actions=categorical_actions,
            seed=seed,
            done_on_any=done_on_any,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
        )
        self.task_name = task

    def __repr__(self) -> str:
        return f"{super().__repr__()} (task={self.task_name})"
