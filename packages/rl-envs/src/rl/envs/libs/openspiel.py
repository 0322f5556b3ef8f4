"""``OpenSpielWrapper`` and ``OpenSpielEnv``: the games of DeepMind's OpenSpiel.

Each player is an agent named ``"player_<i>"``; the agents are grouped (a
:class:`~rl.envs.MarlGroupMapType` or a dict, all in ``"agents"`` by default) and the data
of a group is stacked along its group dim, as for the other multi-agent wrappers. Chance
nodes (dice, card deals) are resolved inside :meth:`reset` and :meth:`step` with the
env's random generator (:meth:`set_seed`), so the agents only see states where someone
acts.

OpenSpiel (https://github.com/google-deepmind/open_spiel, paper:
https://arxiv.org/abs/1908.09453) is imported on first use;
``pip install "rl-envs[open_spiel]"`` installs it.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Categorical, Composite, NonTensor, OneHot, Unbounded
from rl.envs._env_base import EnvBase
from rl.envs._marl import MarlGroupMapType, check_marl_grouping

from ._common import ClassProperty

__all__ = ["OpenSpielEnv", "OpenSpielWrapper"]

_has_pyspiel = importlib.util.find_spec("pyspiel") is not None
_INSTALL = 'pip install "rl-envs[open_spiel]"'


def _import_pyspiel() -> ModuleType:
    if not _has_pyspiel:
        raise ImportError(f"open_spiel is not installed: {_INSTALL} to use OpenSpielEnv")
    import pyspiel

    return pyspiel


class OpenSpielWrapper(EnvBase):
    """Wraps an OpenSpiel game state (``pyspiel.load_game(name).new_initial_state()``).

    The env has ``batch_size=[]``. Each group (``group_map``) has batch size
    ``[n_agents_in_group]`` and holds, per agent:

    - ``(group, "observation")`` (float32, ``game.observation_tensor_shape()``) when the
      game provides an observation tensor, ``(group, "information_state")`` when it
      provides an information-state tensor;
    - ``(group, "action")``: one-hot (``OneHot``, ``[n, num_distinct_actions]``) or an
      index (``Categorical``, ``[n]``) with ``categorical_actions=True``;
    - ``(group, "action_mask")`` (bool, ``[n, num_distinct_actions]``): the legal actions
      of the agents acting now; an agent that does not act may only play action 0, which
      OpenSpiel expects from the idle players of a simultaneous game. The group's action
      spec carries the same mask (``spec.update_mask``), so ``env.rand_action()`` and
      ``env.full_action_spec.rand()`` draw legal actions;
    - ``(group, "reward")`` (float32, ``[n, 1]``): what each player's return changed by
      during the step (chance outcomes included), so that the rewards of an episode sum
      to OpenSpiel's ``returns()``.

    The root holds ``"current_player"`` (int32: the acting player, ``-2`` at a
    simultaneous node, ``-4`` once the game is over), ``"done"`` and ``"terminated"``
    (``[1]``, set at the end of the game) and, with ``return_state=True``, ``"state"``
    (the state's ``serialize()`` string). :meth:`reset` given a tensordict with a
    ``"state"`` entry restores that state instead of starting a new game.

    A sequential game is stepped with the action of the current player only; a
    simultaneous node with every player's action. An illegal action is refused before
    OpenSpiel sees it. Stepping a finished game leaves it as it is (``done``, zero
    rewards) until :meth:`reset`, as in TorchRL.

    Args:
        env: the ``pyspiel.State`` to wrap (its game is read from it).
        group_map: a :class:`~rl.envs.MarlGroupMapType` or ``{group: [agent names]}``
            (``None``: one group per agent). Defaults to ``ALL_IN_ONE_GROUP``.
        categorical_actions: actions as indices rather than one-hot.
        return_state: add the serialized state as ``"state"``.
        chance_sampler: ``f(outcomes, probabilities) -> outcome`` that picks chance
            outcomes; ``None`` draws them from the env's generator (:meth:`set_seed`).
        device: the device of the output tensors.
        batch_size: must be ``[]`` (use :class:`~rl.envs.SerialEnv` /
            :class:`~rl.envs.ParallelEnv` for several games).
        allow_done_after_reset: ignored; a reset may restore a finished game, so a done
            reset is always allowed (as in TorchRL).
        run_type_checks: debug mode, check every action against ``action_spec``.

    Raises:
        TypeError: ``env`` is not a ``pyspiel.State``.
        ValueError: a non-empty ``batch_size`` or a bad ``group_map``.
        RuntimeError: the game is a mean-field game.

    Examples:
        >>> import pyspiel
        >>> from rl.envs import OpenSpielWrapper
        >>> env = OpenSpielWrapper(pyspiel.load_game("tic_tac_toe").new_initial_state())
        >>> td = env.reset()
        >>> td["agents", "observation"].shape, td["agents", "action_mask"].shape
        (torch.Size([2, 3, 3, 3]), torch.Size([2, 9]))
        >>> int(td["current_player"])
        0
    """

    git_url = "https://github.com/google-deepmind/open_spiel"
    libname = "pyspiel"

    def __init__(
        self,
        env: Any = None,
        *,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = (
            MarlGroupMapType.ALL_IN_ONE_GROUP
        ),
        categorical_actions: bool = False,
        return_state: bool = False,
        chance_sampler: Callable[[list, list], int] | None = None,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = True,
        run_type_checks: bool = False,
    ) -> None:
        pyspiel = _import_pyspiel()
        if batch_size is not None and len(torch.Size(batch_size)):
            raise ValueError(
                "OpenSpielWrapper only supports single-environment mode (batch_size=[]), got "
                f"batch_size={list(batch_size)}; wrap several envs in SerialEnv or ParallelEnv"
            )
        if not isinstance(env, pyspiel.State):
            raise TypeError(
                "OpenSpielWrapper wraps a pyspiel.State "
                f"(pyspiel.load_game(name).new_initial_state()), got {type(env).__name__}"
            )
        game = env.get_game()
        game_type = game.get_type()
        if game_type.dynamics == pyspiel.GameType.Dynamics.MEAN_FIELD:
            raise RuntimeError(
                f"mean-field games such as {game_type.short_name!r} are not supported"
            )
        super().__init__(device=device, batch_size=(), run_type_checks=run_type_checks)
        self._allow_done_after_reset = True  # reset may restore a finished game
        self._env = env
        self._game = game
        self.categorical_actions = categorical_actions
        self.return_state = return_state
        self._rng = np.random.default_rng()
        self._chance_sampler = chance_sampler
        self.parallel = game_type.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
        self.has_observation = bool(game_type.provides_observation_tensor)
        self.has_information_state = bool(game_type.provides_information_state_tensor)
        self.num_actions = int(game.num_distinct_actions())
        self._make_specs(group_map)
        # as TorchRL: the wrapped state is moved past its chance nodes at once
        self._resolve_chance_nodes()
        self._returns = np.asarray(env.returns(), dtype=np.float64)

    # ------------------------------------------------------------------------ attributes
    @ClassProperty
    def lib(cls) -> ModuleType:
        """The ``pyspiel`` module (read from the class too: ``OpenSpielWrapper.lib``)."""
        return _import_pyspiel()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The short names of OpenSpiel's registered games (``[]`` without it)."""
        if not _has_pyspiel:
            return []
        return [game.short_name for game in _import_pyspiel().registered_games()]

    @property
    def env(self) -> Any:
        """The current ``pyspiel.State`` (a new one after each :meth:`reset`)."""
        return self._env

    @property
    def num_players(self) -> int:
        return int(self._game.num_players())

    def current_player(self) -> int:
        """OpenSpiel's ``current_player()`` of the current state."""
        return int(self._env.current_player())

    # ---------------------------------------------------------------------------- specs
    def _make_specs(self, group_map) -> None:
        self.agent_names = [f"player_{i}" for i in range(self.num_players)]
        if group_map is None:
            group_map = MarlGroupMapType.ONE_GROUP_PER_AGENT
        if isinstance(group_map, MarlGroupMapType):
            group_map = group_map.get_group_map(self.agent_names)
        check_marl_grouping(group_map, self.agent_names)
        self.group_map = {group: list(names) for group, names in group_map.items()}
        # (group, row) of each player, and each group's players in row order
        self._rows = {
            group: [int(name.rpartition("_")[2]) for name in names]
            for group, names in self.group_map.items()
        }
        self._group_of = {p: group for group, players in self._rows.items() for p in players}
        dev = self.device
        game = self._game
        obs_spec = Composite(device=dev)
        act_spec = Composite(device=dev)
        rew_spec = Composite(device=dev)
        a = self.num_actions
        for group, names in self.group_map.items():
            n = len(names)
            obs = Composite(shape=(n,), device=dev)
            if self.has_observation:
                obs["observation"] = Unbounded(
                    shape=(n, *game.observation_tensor_shape()), device=dev
                )
            if self.has_information_state:
                obs["information_state"] = Unbounded(
                    shape=(n, *game.information_state_tensor_shape()), device=dev
                )
            obs["action_mask"] = Categorical(2, shape=(n, a), dtype=torch.bool, device=dev)
            obs_spec[group] = obs
            if self.categorical_actions:
                action = Categorical(a, shape=(n,), dtype=torch.int64, device=dev)
            else:
                action = OneHot(a, shape=(n, a), dtype=torch.int64, device=dev)
            act_spec[group] = Composite(action=action, shape=(n,), device=dev)
            rew_spec[group] = Composite(
                reward=Unbounded(shape=(n, 1), device=dev), shape=(n,), device=dev
            )
        if self.return_state:
            obs_spec["state"] = NonTensor(shape=(), example_data="", device=dev)
        obs_spec["current_player"] = Unbounded(shape=(), dtype=torch.int32, device=dev)
        self.full_observation_spec = obs_spec
        self.full_action_spec = act_spec
        self.full_reward_spec = rew_spec
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=dev)
        self.full_done_spec = Composite(done=flag, terminated=flag.clone(), device=dev)

    # ------------------------------------------------------------------------- stepping
    def _set_seed(self, seed: int | None) -> None:
        """Seeds the generator that draws the chance outcomes."""
        self._rng = np.random.default_rng(seed)

    def _draws_actions_per_step(self) -> bool:
        return True  # random actions follow the legal-action masks of each step

    def _sample_chance(self, outcomes: list, probabilities: list) -> int:
        if self._chance_sampler is not None:
            return int(self._chance_sampler(outcomes, probabilities))
        return int(self._rng.choice(outcomes, p=probabilities))

    def _resolve_chance_nodes(self) -> None:
        state = self._env
        while state.is_chance_node():
            outcomes = state.chance_outcomes()
            if not outcomes:
                break
            actions, probabilities = zip(*outcomes)
            state.apply_action(self._sample_chance(list(actions), list(probabilities)))

    def _acting(self) -> list[int]:
        """The players who act at the current state."""
        state = self._env
        if state.is_terminal():
            return []
        if state.is_simultaneous_node():
            return list(range(self.num_players))
        return [int(state.current_player())]

    def _masks(self) -> dict[str, torch.Tensor]:
        """Each group's legal-action mask ``[n, num_actions]`` (idle players: action 0)."""
        state = self._env
        acting = set(self._acting())
        masks = {}
        for group, players in self._rows.items():
            mask = np.zeros((len(players), self.num_actions), dtype=bool)
            for row, player in enumerate(players):
                if player in acting:
                    mask[row, state.legal_actions(player)] = True
                else:
                    mask[row, 0] = True
            masks[group] = torch.from_numpy(mask)
        return masks

    def _output(self, with_reward: bool) -> TensorDictBase:
        state = self._env
        game = self._game
        dev = self.device
        done = torch.tensor([state.is_terminal()], dtype=torch.bool)
        out = TensorDict(
            {
                "done": done,
                "terminated": done.clone(),
                "current_player": torch.tensor(state.current_player(), dtype=torch.int32),
            },
            batch_size=(),
        )
        returns = np.asarray(state.returns(), dtype=np.float64)
        step_rewards = returns - self._returns
        self._returns = returns
        masks = self._masks()
        for group, players in self._rows.items():
            n = len(players)
            entries: dict[str, torch.Tensor] = {"action_mask": masks[group]}
            if self.has_observation:
                shape = (n, *game.observation_tensor_shape())
                values = [state.observation_tensor(p) for p in players]
                entries["observation"] = torch.tensor(values, dtype=torch.float32).reshape(shape)
            if self.has_information_state:
                shape = (n, *game.information_state_tensor_shape())
                values = [state.information_state_tensor(p) for p in players]
                entries["information_state"] = torch.tensor(values, dtype=torch.float32).reshape(
                    shape
                )
            if with_reward:
                entries["reward"] = torch.tensor(
                    step_rewards[players], dtype=torch.float32
                ).reshape(n, 1)
            out[group] = TensorDict(entries, batch_size=(n,))
            spec = self.full_action_spec[group, "action"]
            spec.update_mask(masks[group].to(spec.device) if spec.device else masks[group])
        if self.return_state:
            out.set_non_tensor("state", state.serialize())
        return out if dev is None else out.to(dev)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        saved = None
        if tensordict is not None and "state" in tensordict.keys():
            saved = tensordict.get_non_tensor("state")
        if saved is not None:
            try:
                self._env = self._game.deserialize_state(saved)
            except (_import_pyspiel().SpielError, ValueError, RuntimeError) as err:
                raise ValueError(
                    f"'state' must be a serialized state of {self._game}, got {saved!r}: {err}"
                ) from err
        else:
            self._env = self._game.new_initial_state()
        self._resolve_chance_nodes()
        # a restored state's past returns are not this episode's rewards
        self._returns = np.asarray(self._env.returns(), dtype=np.float64)
        return self._output(with_reward=False)

    def _player_action(self, tensordict: TensorDictBase, player: int) -> int:
        group = self._group_of[player]
        row = self._rows[group].index(player)
        value = tensordict.get((group, "action"), None)
        if value is None:
            raise KeyError((group, "action"))  # EnvBase.step names the key and the spec
        value = value[row]
        action = int(value if self.categorical_actions else value.argmax(-1))
        return action

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        state = self._env
        if state.is_terminal():
            # as TorchRL: a finished game stays as it is (done, zero rewards) until reset
            return self._output(with_reward=True)
        acting = self._acting()
        actions = [0] * self.num_players
        for player in acting:
            actions[player] = self._player_action(tensordict, player)
            legal = state.legal_actions(player)
            if actions[player] not in legal:
                raise ValueError(
                    f"player_{player} played action {actions[player]}, which is not legal "
                    f"in this state; its legal actions are {legal}"
                )
        if state.is_simultaneous_node():
            state.apply_actions(actions)
        else:
            state.apply_action(actions[acting[0]])
        self._resolve_chance_nodes()
        return self._output(with_reward=True)

    def close(self, *, raise_if_closed: bool = True) -> None:
        super().close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._game}, batch_size={self.batch_size})"


class OpenSpielEnv(OpenSpielWrapper):
    """An OpenSpiel game by name: ``OpenSpielEnv("tic_tac_toe")``.

    Args:
        game_string: a game of :attr:`available_envs` (``"chess"``, ``"kuhn_poker"``...).
        parameters: the game's parameters (``{"players": 3}``), passed to
            ``pyspiel.load_game``.
        group_map, categorical_actions, return_state, chance_sampler, device, batch_size,
        allow_done_after_reset, run_type_checks: as in :class:`OpenSpielWrapper`.

    Raises:
        ValueError: ``game_string`` is not an OpenSpiel game (the message lists close
            names).

    Examples:
        >>> from rl.envs import OpenSpielEnv, check_env_specs
        >>> env = OpenSpielEnv("kuhn_poker", categorical_actions=True)
        >>> check_env_specs(env, seed=0)
        >>> td = env.reset()
        >>> td["agents", "information_state"].shape
        torch.Size([2, 11])
    """

    def __init__(
        self,
        game_string: str,
        *,
        parameters: dict[str, Any] | None = None,
        group_map: MarlGroupMapType | dict[str, list[str]] | None = (
            MarlGroupMapType.ALL_IN_ONE_GROUP
        ),
        categorical_actions: bool = False,
        return_state: bool = False,
        chance_sampler: Callable[[list, list], int] | None = None,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = True,
        run_type_checks: bool = False,
    ) -> None:
        pyspiel = _import_pyspiel()
        games = self.available_envs
        if game_string not in games:
            close = difflib.get_close_matches(str(game_string), games, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"game_string {game_string!r} is not an OpenSpiel game{hint}")
        self.game_string = game_string
        self.parameters = dict(parameters or {})
        if self.parameters:
            game = pyspiel.load_game(game_string, self.parameters)
        else:
            game = pyspiel.load_game(game_string)
        super().__init__(
            game.new_initial_state(),
            group_map=group_map,
            categorical_actions=categorical_actions,
            return_state=return_state,
            chance_sampler=chance_sampler,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.game_string}, batch_size={self.batch_size}, "
            f"device={self.device})"
        )
