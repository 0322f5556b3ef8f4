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

from rl.core import Categorical, Composite, OneHot, Unbounded
from rl.envs._common import EnvBase
from rl.envs._gym_spaces import assemble, space_leaves
from rl.envs._marl import MarlGroupMapType, check_marl_grouping
from rl.envs._rollout import rollout_generic

from ._common import ClassProperty, ForwardsEnvAttributes
from ._pz_hetero import HeteroGroup, agent_rows, make_hetero_group, same_layout, set_agent_entries
from ._pz_specs import GroupLeaf, group_leaves, info_value, shared_group_specs
from ._pz_tasks import available_tasks, load_task

__all__ = ["PettingZooEnv", "PettingZooWrapper"]

_has_pettingzoo = importlib.util.find_spec("pettingzoo") is not None
_ROWS = "_agent_rows"  # the per-agent entries of a heterogeneous group, before stacking
_MASK_KEY = ("observation", "action_mask")
_INSTALL = 'pip install "rl-envs[pettingzoo]"'


def _import_pettingzoo():
    if not _has_pettingzoo:
        raise ImportError(
            f"PettingZoo is not installed: {_INSTALL} to use PettingZooEnv / PettingZooWrapper"
        )
    import pettingzoo
    import pettingzoo.utils.env

    return pettingzoo


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
        self._obs_leaves: dict[str, list[GroupLeaf]] = {}
        self._het: dict[str, HeteroGroup] = {}
        self._act_leaves: dict[str, list[GroupLeaf]] = {}
        self._info_keys: dict[str, list[str]] = {}
        self.has_action_mask: dict[str, bool] = {}
        self._mask_source: dict[str, str | None] = {}
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

    def _make_group_specs(
        self, group: str, names: list[str], infos: dict
    ) -> tuple[Composite, Composite, Composite, Composite]:
        """The observation, action, reward and done specs of one group (shape ``[n]``)."""
        env = self._env
        device = self.device
        n = len(names)
        shape = (n,)
        act_spaces = [env.action_space(a) for a in names]
        act_per_agent = [
            space_leaves(space, (), self.categorical_actions, ("action",)) for space in act_spaces
        ]
        obs_per_agent = [
            space_leaves(env.observation_space(a), (), False, ("observation",)) for a in names
        ]
        group_rew, group_done = shared_group_specs(n, device)
        if not (same_layout(act_per_agent) and same_layout(obs_per_agent)):
            het = self._make_hetero_group(
                group, names, act_spaces, act_per_agent, obs_per_agent, infos
            )
            return het.obs_spec, het.act_spec, group_rew, group_done
        act = group_leaves(act_per_agent)
        obs = group_leaves(obs_per_agent)
        mask_leaf = [leaf for leaf in obs if leaf.key == _MASK_KEY]
        obs = [leaf for leaf in obs if leaf.key != _MASK_KEY]
        info_keys = sorted(
            set.intersection(
                *(
                    {k for k, v in infos.get(a, {}).items() if info_value(v) is not None}
                    for a in names
                )
            )
        )
        mask_source = "observation" if mask_leaf else None
        if "action_mask" in info_keys:
            info_keys.remove("action_mask")
            mask_source = mask_source or "info"
        self._obs_leaves[group] = obs
        self._act_leaves[group] = act
        self._info_keys[group] = info_keys
        self._mask_source[group] = mask_source
        self.has_action_mask[group] = mask_source is not None
        group_obs = Composite(shape=shape, device=device)
        for leaf in obs:
            group_obs[leaf.key] = leaf.spec
        if mask_source is not None:
            action = act[0].spec
            n_actions = action.n if isinstance(action, Categorical | OneHot) else None
            if n_actions is None:
                raise ValueError(
                    f"group {group!r} has an action mask but a non-discrete action spec {action!r}"
                )
            group_obs["action_mask"] = Categorical(
                2, shape=(n, n_actions), dtype=torch.bool, device=device
            )
        if self.use_mask:
            group_obs["mask"] = Categorical(2, shape=shape, dtype=torch.bool, device=device)
        if info_keys:
            group_obs["info"] = Composite(
                {
                    key: Unbounded(
                        shape=(n, *info_value(infos[names[0]][key]).shape),
                        dtype=torch.float32,
                        device=device,
                    )
                    for key in info_keys
                },
                shape=shape,
            )
        group_act = Composite(shape=shape, device=device)
        for leaf in act:
            group_act[leaf.key] = leaf.spec
        return group_obs, group_act, group_rew, group_done

    def _make_hetero_group(self, group, names, act_spaces, act_per_agent, obs_per_agent, infos):
        """A group whose agents differ in layout: lazily stacked, as in TorchRL."""
        het = make_hetero_group(
            group, names, act_spaces, act_per_agent, obs_per_agent, infos,
            use_mask=self.use_mask, device=self.device,
        )  # fmt: skip
        self._het[group] = het
        self._obs_leaves[group], self._act_leaves[group], self._info_keys[group] = [], [], []
        self._mask_source[group] = het.mask_source
        self.has_action_mask[group] = het.mask_source is not None
        return het

    # ------------------------------------------------------------------------- stepping
    def _reset_env(self) -> tuple[dict, dict]:
        seed, self._next_seed = self._next_seed, None
        if self.parallel:
            observations, infos = self._env.reset(seed=seed)
            return observations, infos
        self._env.reset(seed=seed)
        return self._aec_observations(), dict(self._env.infos)

    def _aec_observations(self) -> dict:
        env = self._env
        live = set(env.agents)
        return {agent: env.observe(agent) for agent in self.possible_agents if agent in live}

    def _acting(self) -> set[str]:
        if self.parallel:
            return set(self._env.agents)
        return {self._env.agent_selection}

    def _group_outputs(self, out: dict, observations: dict, infos: dict) -> None:
        acting = self._acting()
        for group, names in self.group_map.items():
            data = out.setdefault(group, {})
            het = self._het.get(group)
            if het is not None:
                data[_ROWS] = het.rows(observations, infos, acting, self._mask_source[group])
                if self.use_mask:
                    data[("mask",)] = torch.tensor([a in acting for a in names], dtype=torch.bool)
                continue
            values = [observations.get(a) for a in names]
            for leaf in self._obs_leaves[group]:
                data[leaf.key] = leaf.encode(values)
            source = self._mask_source[group]
            if source is not None:
                spec = self.full_observation_spec[group, "action_mask"]
                mask = torch.ones(spec.shape, dtype=torch.bool)
                for j, agent in enumerate(names):
                    if agent not in acting:
                        continue
                    holder = (
                        observations.get(agent) if source == "observation" else infos.get(agent)
                    )
                    if holder is not None and "action_mask" in holder:
                        mask[j] = torch.as_tensor(np.asarray(holder["action_mask"]).astype(bool))
                data[("action_mask",)] = mask
            if self.use_mask:
                data[("mask",)] = torch.tensor([a in acting for a in names], dtype=torch.bool)
            for key in self._info_keys[group]:
                spec = self.full_observation_spec[group, "info", key]
                rows = [
                    info_value(infos[a][key]) if a in infos and key in infos[a] else None
                    for a in names
                ]
                data[("info", key)] = torch.stack(
                    [
                        torch.zeros(spec.shape[1:])
                        if row is None
                        else torch.as_tensor(row, dtype=torch.float32).reshape(spec.shape[1:])
                        for row in rows
                    ]
                )

    def _build(self, out: dict, root: dict) -> TensorDict:
        source = dict(root)
        for group, entries in out.items():
            n = len(self.group_map[group])
            entries = dict(entries)
            rows = entries.pop(_ROWS, None)
            if rows is not None:  # a heterogeneous group: one TensorDict per agent
                source[group] = agent_rows(rows, entries, self.device)
            else:
                source[group] = TensorDict(entries, batch_size=(n,))
        if self.return_state:
            state_spec = self.full_observation_spec["state"]
            source["state"] = (
                torch.as_tensor(np.asarray(self._env.state()))
                .to(state_spec.dtype)
                .reshape(state_spec.shape)
            )
        return TensorDict(source, batch_size=(), device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        first = self.__dict__.pop("_first_reset", None)
        if first is not None and self._next_seed is None:
            observations, infos = first  # the reset that built the specs
        else:
            observations, infos = self._reset_env()
        out: dict = {}
        self._group_outputs(out, observations, infos)
        for group, names in self.group_map.items():
            false = torch.zeros(len(names), 1, dtype=torch.bool)
            out[group].update(
                {("done",): false, ("terminated",): false.clone(), ("truncated",): false.clone()}
            )
        flag = torch.zeros(1, dtype=torch.bool)
        return self._build(
            out, {"done": flag, "terminated": flag.clone(), "truncated": flag.clone()}
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.parallel:
            actions = {}
            for group, names in self.group_map.items():
                for j, value in enumerate(self._group_actions(tensordict, group)):
                    actions[names[j]] = value
            live = set(self._env.agents)
            actions = {agent: a for agent, a in actions.items() if agent in live}
            observations, rewards, terminations, truncations, infos = self._env.step(actions)
        else:
            env = self._env
            agent = env.agent_selection
            if env.terminations.get(agent, False) or env.truncations.get(agent, False):
                action = None  # PettingZoo steps a done agent with None (removing it)
            else:
                group = next(g for g, names in self.group_map.items() if agent in names)
                action = self._group_actions(tensordict, group)[self.group_map[group].index(agent)]
            env.step(action)
            observations = self._aec_observations()
            rewards, terminations = dict(env.rewards), dict(env.terminations)
            truncations, infos = dict(env.truncations), dict(env.infos)
        out: dict = {}
        self._group_outputs(out, observations, infos)
        flags = {"done": [], "terminated": [], "truncated": []}
        for group, names in self.group_map.items():
            reward = torch.zeros(len(names), 1)
            term = torch.zeros(len(names), 1, dtype=torch.bool)
            trunc = torch.zeros(len(names), 1, dtype=torch.bool)
            for j, agent in enumerate(names):
                if agent in observations:
                    reward[j] = float(rewards.get(agent, 0.0))
                    term[j] = bool(terminations.get(agent, False))
                    trunc[j] = bool(truncations.get(agent, False))
                elif self.use_mask:  # a dead agent: zeros, done
                    term[j] = bool(terminations.get(agent, True))
                    trunc[j] = bool(truncations.get(agent, True))
                else:
                    raise ValueError(
                        f"agent {agent!r} is dead (not in the step's observations): set "
                        "use_mask=True for envs whose agents can die"
                    )
            done = term | trunc
            out[group].update(
                {("reward",): reward, ("done",): done, ("terminated",): term, ("truncated",): trunc}
            )
            flags["done"].append(done)
            flags["terminated"].append(term)
            flags["truncated"].append(trunc)
        reduce = torch.any if self.done_on_any else torch.all
        root = {name: reduce(torch.cat(values)).reshape(1) for name, values in flags.items()}
        return self._build(out, root)

    def _group_actions(self, tensordict: TensorDictBase, group: str) -> list:
        """Each agent's PettingZoo action, from the group's action entries."""
        het = self._het.get(group)
        if het is not None:
            return het.actions(tensordict.get(group))
        leaves = self._act_leaves[group]
        names = self.group_map[group]
        if len(leaves) == 1 and leaves[0].key == ("action",):
            leaf = leaves[0]
            value = tensordict[group, "action"].detach().cpu().numpy()
            return [leaf.to_gym[j](value[j]) for j in range(len(names))]
        # Dict / Tuple action spaces: (group, "action", ...) entries, assembled per agent
        values = [tensordict[(group, *leaf.key)].detach().cpu().numpy() for leaf in leaves]
        return [
            assemble(
                self._env.action_space(agent),
                {leaf.paths[j]: leaf.to_gym[j](v[j]) for leaf, v in zip(leaves, values)},
            )
            for j, agent in enumerate(names)
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
        for group in self.group_map:
            het = self._het.get(group)
            if het is not None:
                set_agent_entries(tensordict, group, het.rand(tensordict.get(group, None)))
                continue
            spec = self.full_action_spec[group, "action"]
            mask = tensordict.get((group, "action_mask"), None)
            if mask is not None and self.has_action_mask[group]:
                spec = spec.clone()
                spec.update_mask(mask)
            tensordict.set((group, "action"), spec.rand())
        return tensordict

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

    def _rollout_fast(self, max_steps, tensordict, *, break_when_any_done, break_when_all_done):
        # random actions are drawn at each step (rather than for all steps at once) so that
        # they respect the current action masks
        return rollout_generic(
            self,
            max_steps,
            tensordict,
            policy=self.rand_action,
            callback=None,
            break_when_any_done=break_when_any_done,
            break_when_all_done=break_when_all_done,
        )

    def close(self) -> None:
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
