"""PettingZooEnv / PettingZooWrapper: parallel and AEC APIs, grouping, masks, seeding."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from tensordict import LazyStackedTensorDict

import rl.envs
from rl.core import Bounded, Categorical, OneHot, StackedComposite
from rl.envs import MarlGroupMapType, check_env_specs, step_mdp

pytest.importorskip("pettingzoo")

from gymnasium import spaces  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402
from pettingzoo.classic import rps_v2, tictactoe_v3  # noqa: E402

from rl.envs.libs import pettingzoo as pz_lib  # noqa: E402
from rl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


class RaceEnv(ParallelEnv):
    """Two runners that advance by ``1 + action`` until their goal, and a coach.

    A runner terminates (and leaves ``agents``) when it reaches its goal; everyone is
    truncated after ``max_cycles`` steps. Start positions come from the reset seed.
    """

    metadata = {"name": "race_v0"}

    def __init__(self, goals=(2.0, 5.0), max_cycles=6):
        self.possible_agents = ["runner_0", "runner_1", "coach"]
        self.goals = dict(zip(self.possible_agents[:2], goals))
        self.max_cycles = max_cycles
        self.state_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def observation_space(self, agent):
        if agent == "coach":
            return spaces.Box(0.0, 100.0, (3,), np.float32)
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        if agent == "coach":
            return spaces.Discrete(3)
        return spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self, agent):
        if agent == "coach":
            return np.array([*self.pos.values(), self.t], dtype=np.float32)
        return np.array([self.pos[agent], self.goals[agent]], dtype=np.float32)

    def state(self):
        return np.array([*self.pos.values(), self.t], dtype=np.float32)

    def reset(self, seed=None, options=None):
        rng = np.random.default_rng(seed)
        self.pos = {a: float(rng.uniform(0.0, 0.5)) for a in self.possible_agents[:2]}
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {"speed": 0.0} for a in self.agents}

    def step(self, actions):
        self.t += 1
        rewards, terms, truncs, infos = {}, {}, {}, {}
        for agent in self.agents:
            if agent == "coach":
                rewards[agent] = float(actions[agent])
                speed = 0.0
            else:
                speed = 1.0 + float(np.asarray(actions[agent]).reshape(()))
                self.pos[agent] += speed
                rewards[agent] = speed
            terms[agent] = agent != "coach" and self.pos[agent] >= self.goals[agent]
            truncs[agent] = self.t >= self.max_cycles
            infos[agent] = {"speed": speed}
        obs = {a: self._obs(a) for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos


def race(**kwargs):
    env_kwargs = {k: kwargs.pop(k) for k in ("goals", "max_cycles") if k in kwargs}
    kwargs.setdefault("seed", 0)
    return PettingZooWrapper(RaceEnv(**env_kwargs), **kwargs)


class TestParallel:
    def test_rps_layout_and_specs(self):
        env = PettingZooEnv("rps_v2", parallel=True, seed=0)
        assert env.parallel and env.done_on_any
        assert env.group_map == {"player": ["player_0", "player_1"]}
        assert isinstance(env.full_observation_spec["player", "observation"], OneHot)
        assert env.full_observation_spec["player", "observation"].shape == (2, 4)
        assert isinstance(env.full_action_spec["player", "action"], Categorical)
        assert env.full_action_spec["player", "action"].shape == (2,)
        assert env.full_reward_spec["player", "reward"].shape == (2, 1)
        assert env.done_keys == [
            "done",
            "terminated",
            "truncated",
            ("player", "done"),
            ("player", "terminated"),
            ("player", "truncated"),
        ]
        assert env.reset_keys == ["_reset", ("player", "_reset")]
        check_env_specs(env, seed=0)

    def test_rps_values_match_pettingzoo(self):
        actions = torch.tensor([[0, 1], [2, 1], [1, 1]])  # rock/paper, scissors/paper, tie
        env = PettingZooEnv("rps_v2", parallel=True, seed=0, max_cycles=10)
        td = env.reset()
        raw = rps_v2.parallel_env(max_cycles=10)
        raw.reset(seed=0)
        for t in range(3):
            td["player", "action"] = actions[t]
            td = env.step(td)
            obs, rew, term, trunc, _ = raw.step(
                {"player_0": int(actions[t, 0]), "player_1": int(actions[t, 1])}
            )
            expected_rew = torch.tensor([[rew["player_0"]], [rew["player_1"]]], dtype=torch.float32)
            torch.testing.assert_close(td["next", "player", "reward"], expected_rew)
            one_hot = torch.nn.functional.one_hot(
                torch.tensor([int(obs["player_0"]), int(obs["player_1"])]), 4
            )
            assert torch.equal(td["next", "player", "observation"], one_hot)
            td = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys)
        assert td["player", "observation"].shape == (2, 4)

    def test_one_hot_actions(self):
        env = PettingZooEnv("rps_v2", parallel=True, seed=0, categorical_actions=False)
        spec = env.full_action_spec["player", "action"]
        assert isinstance(spec, OneHot) and spec.shape == (2, 3)
        td = env.reset()
        td["player", "action"] = torch.tensor([[1, 0, 0], [0, 1, 0]])  # rock vs paper
        rewards = env.step(td)["next", "player", "reward"].flatten().tolist()
        assert rewards == [-1.0, 1.0]

    def test_custom_env_groups_info_state(self):
        env = race(return_state=True)
        assert env.group_map == {"runner": ["runner_0", "runner_1"], "coach": ["coach"]}
        assert isinstance(env.full_action_spec["runner", "action"], Bounded)
        assert env.full_action_spec["runner", "action"].shape == (2, 1)
        assert env.full_observation_spec["runner", "info", "speed"].shape == (2,)
        assert env.full_observation_spec["state"].shape == (3,)
        td = env.reset()
        td["runner", "action"] = torch.tensor([[0.5], [-0.5]])
        td["coach", "action"] = torch.tensor([2])
        nxt = env.step(td)["next"]
        torch.testing.assert_close(nxt["runner", "reward"], torch.tensor([[1.5], [0.5]]))
        torch.testing.assert_close(nxt["runner", "info", "speed"], torch.tensor([1.5, 0.5]))
        torch.testing.assert_close(nxt["coach", "reward"], torch.tensor([[2.0]]))
        torch.testing.assert_close(nxt["state"], torch.as_tensor(env._env.state()))
        torch.testing.assert_close(nxt["coach", "observation"][0, :2], nxt["state"][:2])

    def test_dead_agents_with_mask(self):
        env = race(use_mask=True, goals=(1.5, 10.0))
        td = env.reset()
        assert td["runner", "mask"].tolist() == [True, True]
        td["runner", "action"] = torch.ones(2, 1)  # runner_0 reaches 1.5 at once
        td["coach", "action"] = torch.tensor([0])
        td = env.step(td)
        nxt = td["next"]
        assert nxt["runner", "terminated"].flatten().tolist() == [True, False]
        assert nxt["runner", "mask"].tolist() == [False, True]
        assert bool(nxt["done"]) and bool(nxt["terminated"]) and not bool(nxt["truncated"])
        td = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys)
        td["runner", "action"] = torch.zeros(2, 1)
        td["coach", "action"] = torch.tensor([0])
        nxt = env.step(td)["next"]  # the dead runner: zeros, done
        assert nxt["runner", "observation"][0].abs().sum() == 0
        assert nxt["runner", "done"].flatten().tolist() == [True, False]

    def test_done_on_all(self):
        env = race(use_mask=True, goals=(1.5, 10.0), done_on_any=False, max_cycles=3)
        td = env.rollout(10, break_when_any_done=True)
        # one runner ends at step 1, the others are truncated at step 3: done when all are;
        # a dead agent counts as terminated and truncated (TorchRL), so all are truncated
        assert td.batch_size == (3,)
        assert td["next", "done"].flatten().tolist() == [False, False, True]
        assert td["next", "truncated"].flatten().tolist() == [False, False, True]
        assert td["next", "terminated"].flatten().tolist() == [False, False, False]
        check_env_specs(env, seed=1)

    def test_dead_agent_without_mask(self):
        env = race(goals=(1.5, 10.0))
        td = env.reset()
        td["runner", "action"] = torch.ones(2, 1)
        td["coach", "action"] = torch.tensor([0])
        td = step_mdp(env.step(td), reward_keys=env.reward_keys, action_keys=env.action_keys)
        td["runner", "action"] = torch.ones(2, 1)
        td["coach", "action"] = torch.tensor([0])
        with pytest.raises(ValueError, match="agent 'runner_0' is dead .* set use_mask=True"):
            env.step(td)

    def test_seeding(self):
        env = race()
        env.set_seed(3)
        a = env.reset()["runner", "observation"]
        env.set_seed(3)
        b = env.reset()["runner", "observation"]
        env.set_seed(4)
        c = env.reset()["runner", "observation"]
        torch.testing.assert_close(a, b)
        assert not torch.equal(a, c)
        first = race(seed=7).reset()["runner", "observation"]
        torch.testing.assert_close(first, race(seed=7).reset()["runner", "observation"])

    def test_heterogeneous_group_is_lazy(self):
        # the coach differs from the runners: one lazily stacked group (as TorchRL), with
        # dead agents, infos and masks (test_libs_pettingzoo_hetero.py has the rest)
        env = race(group_map=MarlGroupMapType.ALL_IN_ONE_GROUP, use_mask=True, goals=(1.5, 9.0))
        assert isinstance(env.full_observation_spec["agents"], StackedComposite)
        td = env.reset()
        agents = td["agents"]
        assert isinstance(agents, LazyStackedTensorDict) and agents.batch_size == (3,)
        assert [a["observation"].shape for a in agents.tensordicts] == [(2,), (2,), (3,)]
        agents.tensordicts[0]["action"] = torch.ones(1)  # runner_0 reaches 1.5 at once
        agents.tensordicts[1]["action"] = torch.zeros(1)
        agents.tensordicts[2]["action"] = torch.tensor(2)
        nxt = env.step(td)["next", "agents"]
        assert nxt["mask"].tolist() == [False, True, True]
        assert nxt["terminated"].flatten().tolist() == [True, False, False]
        torch.testing.assert_close(nxt["reward"], torch.tensor([[2.0], [1.0], [2.0]]))
        torch.testing.assert_close(nxt["info", "speed"], torch.tensor([2.0, 1.0, 0.0]))
        coach = nxt.tensordicts[2]["observation"]
        torch.testing.assert_close(coach, torch.as_tensor(env._env._obs("coach")))
        check_env_specs(env, seed=0)

    def test_one_group_per_agent(self):
        env = race(group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT, goals=(10.0, 10.0))
        assert list(env.group_map) == ["runner_0", "runner_1", "coach"]
        td = env.rollout(3)  # no runner reaches its goal in 3 steps
        assert td["next", "runner_1"].batch_size == (3, 1)
        assert td["next", "runner_1", "reward"].shape == (3, 1, 1)
        check_env_specs(env, seed=0)


def _acting_moves_allowed(td) -> bool:
    for player in ("player_1", "player_2"):
        acting = td[player, "mask"][:, 0]
        action = td[player, "action"][:, 0]
        allowed = td[player, "action_mask"][:, 0].gather(-1, action.unsqueeze(-1)).squeeze(-1)
        if not bool(allowed[acting].all()):
            return False
    return True


class TestAEC:
    def test_state_read_past_forwarding_wrappers_but_not_past_overriding_ones(self):
        from pettingzoo.utils.wrappers import BaseWrapper

        class DoubleRewards(BaseWrapper):
            @property
            def rewards(self):
                return {agent: 2 * r for agent, r in self.env.rewards.items()}

        plain = PettingZooWrapper(rps_v2.env(), use_mask=True, seed=0)
        assert type(plain._aec_state().holder).__name__ == "raw_env"  # past 2 wrappers
        doubled = PettingZooWrapper(DoubleRewards(rps_v2.env()), use_mask=True, seed=0)
        assert isinstance(doubled._aec_state().holder, DoubleRewards)
        torch.manual_seed(0)
        a = plain.rollout(10, break_when_any_done=False)
        torch.manual_seed(0)
        b = doubled.rollout(10, break_when_any_done=False)
        for group in plain.group_map:
            reward = a["next", group, "reward"]
            assert reward.abs().sum() > 0
            torch.testing.assert_close(b["next", group, "reward"], 2 * reward)

    def test_state_a_wrapper_assigns_in_step_is_read(self):
        # a wrapper that sets its own rewards / terminations in step() (PettingZoo's
        # TerminateIllegalWrapper did): read as getattr reads it, after the first reset too
        from pettingzoo.utils.wrappers import BaseWrapper

        class EndsAtStep3(BaseWrapper):
            def reset(self, seed=None, options=None):
                super().reset(seed=seed, options=options)
                self.__dict__.pop("rewards", None)
                self.__dict__.pop("terminations", None)
                self.t = 0

            def step(self, action):
                super().step(action)
                self.t += 1
                self.rewards = {a: -100.0 * self.t for a in self.env.rewards}
                if self.t >= 3:
                    self.terminations = dict.fromkeys(self.env.terminations, True)

        env = PettingZooWrapper(EndsAtStep3(rps_v2.env()), use_mask=True, seed=0)
        td = env.rollout(10)
        assert td.shape == (3,)  # the wrapper's terminations end the episode
        for group in env.group_map:
            assert td["next", group, "reward"].flatten().tolist() == [-100.0, -200.0, -300.0]
            assert td["next", group, "terminated"].flatten().tolist() == [False, False, True]
        assert env._env.rewards == env._aec_state().get("rewards")  # as getattr reads

    def test_tictactoe_layout(self):
        env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True, seed=0)
        assert not env.parallel and not env.done_on_any
        assert env.group_map == {"player_1": ["player_1"], "player_2": ["player_2"]}
        obs = env.full_observation_spec
        assert obs["player_1", "observation", "observation"].shape == (1, 3, 3, 2)
        assert obs["player_1", "observation", "observation"].dtype == torch.int8
        assert obs["player_1", "action_mask"].shape == (1, 9)
        assert obs["player_1", "mask"].shape == (1,)
        assert "action_mask" not in obs["player_1", "observation"].keys()
        assert env.full_action_spec["player_2", "action"].shape == (1,)
        assert env.has_action_mask == {"player_1": True, "player_2": True}
        check_env_specs(env, seed=0, max_steps=12)  # goes through a game end and a reset

    def test_turns_and_action_masks(self):
        env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True, seed=0)
        td = env.reset()
        assert td["player_1", "mask"].tolist() == [True] and td["player_2", "mask"].tolist() == [
            False
        ]
        assert td["player_1", "action_mask"].all()
        td["player_1", "action"] = torch.tensor([4])
        td["player_2", "action"] = torch.tensor([4])  # not its turn: ignored
        nxt = env.step(td)["next"]
        assert nxt["player_2", "mask"].tolist() == [True]
        expected = torch.ones(1, 9, dtype=torch.bool)
        expected[0, 4] = False
        assert torch.equal(nxt["player_2", "action_mask"], expected)
        assert nxt["player_1", "action_mask"].all()  # not acting: all allowed
        board = nxt["player_2", "observation", "observation"][0]
        assert board[1, 1].tolist() == [0, 1]  # player_2's view: the opponent's mark on cell 4

    def test_random_actions_respect_masks(self):
        env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True, seed=0)
        torch.manual_seed(0)
        td = env.rollout(40, break_when_any_done=False)
        assert _acting_moves_allowed(td)
        assert td["next", "done"].any()
        # a finished game gives +1/-1 or 0/0, never the -1 of an illegal move to both
        ends = td["next", "done"].flatten()
        r1 = td["next", "player_1", "reward"].flatten()[ends]
        r2 = td["next", "player_2", "reward"].flatten()[ends]
        assert torch.all(r1 + r2 == 0)

    def test_all_in_one_group(self):
        env = PettingZooEnv(
            "tictactoe_v3",
            parallel=False,
            use_mask=True,
            seed=0,
            group_map=MarlGroupMapType.ALL_IN_ONE_GROUP,
        )
        assert env.group_map == {"agents": ["player_1", "player_2"]}
        td = env.reset()
        assert td["agents"].batch_size == (2,)
        assert td["agents", "mask"].tolist() == [True, False]
        assert td["agents", "action_mask"].shape == (2, 9)
        td["agents", "action"] = torch.tensor([0, 8])
        nxt = env.step(td)["next"]
        assert nxt["agents", "mask"].tolist() == [False, True]
        assert nxt["agents", "action_mask"][1, 0].item() is False
        check_env_specs(env, seed=0, max_steps=12)

    def test_seeding_reproduces(self):
        env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True)

        def run(seed):
            env.set_seed(seed)
            torch.manual_seed(seed)
            return env.rollout(9)

        a, b = run(1), run(1)
        assert torch.equal(a["player_1", "action"], b["player_1", "action"])
        assert torch.equal(a["next", "player_2", "reward"], b["next", "player_2", "reward"])


class InPlaceRaceEnv(RaceEnv):
    """RaceEnv whose observations, infos and state are arrays it keeps and overwrites."""

    def _obs(self, agent):
        buf = self.__dict__.setdefault("_bufs", {}).setdefault(agent, None)
        value = super()._obs(agent)
        if buf is None:
            self._bufs[agent] = buf = value
        buf[...] = value
        return buf

    def state(self):
        buf = self.__dict__.setdefault("_state_buf", np.zeros(3, dtype=np.float32))
        buf[...] = super().state()
        return buf


class TestStepOutputs:
    """The output TensorDicts: built from constants derived once, owning their memory."""

    def test_aec_group_sends_the_selected_agents_row(self):
        """In one AEC group, the action of the selected agent is its own row of the group."""
        env = PettingZooEnv(
            "tictactoe_v3",
            parallel=False,
            use_mask=True,
            seed=0,
            group_map=MarlGroupMapType.ALL_IN_ONE_GROUP,
        )
        raw = tictactoe_v3.env()
        raw.reset(seed=0)
        td = env.reset()
        # rows: (player_1, player_2); the row of the agent whose turn it is not is an
        # occupied cell, which would end the game as an illegal move if it were sent
        for moves in ([4, 0], [4, 0], [8, 0], [8, 2]):
            td["agents", "action"] = torch.tensor(moves)
            selected = raw.agent_selection
            raw.step(moves[0] if selected == "player_1" else moves[1])
            td = env.step(td)["next"]
            for j, agent in enumerate(("player_1", "player_2")):
                board = torch.as_tensor(raw.observe(agent)["observation"])
                assert torch.equal(td["agents", "observation", "observation"][j], board)
            assert not td["done"].item()

    def test_outputs_own_their_memory(self):
        """The env overwrites its arrays at every step: earlier outputs keep their values."""
        env = PettingZooWrapper(InPlaceRaceEnv(), return_state=True, seed=0)
        td = env.reset()
        first_obs = td["runner", "observation"].clone()
        first_state = td["state"].clone()
        td["runner", "action"] = torch.full((2, 1), 0.5)
        td["coach", "action"] = torch.tensor([1])
        out = env.step(td)
        assert torch.equal(out["runner", "observation"], first_obs)
        assert torch.equal(out["state"], first_state)
        assert not torch.equal(out["next", "runner", "observation"], first_obs)
        nxt = out["next"]
        assert_values = nxt["runner", "observation"].clone()
        env.step(step_mdp(out))
        assert torch.equal(nxt["runner", "observation"], assert_values)
        # the flags are separate tensors: writing one leaves the others
        nxt["runner", "done"][0] = True
        assert not nxt["runner", "terminated"][0].item()
        assert not nxt["runner", "truncated"][0].item()

    def test_flag_and_reward_entries_follow_the_specs(self):
        env = race(use_mask=True, goals=(1.0, 50.0))
        td = env.reset()
        td["runner", "action"] = torch.ones(2, 1)
        td["coach", "action"] = torch.tensor([2])
        nxt = env.step(td)["next"]
        for group in ("runner", "coach"):
            for key, spec in env.full_done_spec[group].items():
                assert nxt[group, key].dtype == spec.dtype and nxt[group, key].shape == spec.shape
            reward_spec = env.full_reward_spec[group, "reward"]
            assert nxt[group, "reward"].dtype == reward_spec.dtype
        assert nxt["runner", "terminated"].flatten().tolist() == [True, False]
        assert nxt["runner", "reward"].flatten().tolist() == [2.0, 2.0]
        assert nxt["coach", "reward"].flatten().tolist() == [2.0]
        assert nxt["runner", "info", "speed"].flatten().tolist() == [2.0, 2.0]
        assert nxt["done"].tolist() == [True]  # done_on_any for parallel envs

    def test_device(self):
        env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True, seed=0, device="cpu")
        td = env.rollout(3)
        assert td.device == torch.device("cpu")
        assert td["next", "player_1"].device == torch.device("cpu")
        check_env_specs(env, seed=0)

    def test_rand_action_leaves_the_action_spec_unmasked(self):
        env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True, seed=0)
        torch.manual_seed(0)
        td = env.reset()
        for _ in range(5):
            td = env.rand_action(td)
            group = "player_1" if td["player_1", "mask"].item() else "player_2"
            action = td[group, "action"].item()
            assert td[group, "action_mask"][0, action].item()
            td = step_mdp(env.step(td))
        assert env.full_action_spec["player_1", "action"].mask is None
        assert env.full_action_spec["player_2", "action"].mask is None


class TestErrors:
    def test_aec_needs_mask(self):
        with pytest.raises(ValueError, match="set use_mask=True"):
            PettingZooWrapper(tictactoe_v3.env())

    def test_wrapper_checks(self):
        with pytest.raises(TypeError, match="wraps a pettingzoo ParallelEnv or AECEnv, got object"):
            PettingZooWrapper(object())
        with pytest.raises(ValueError, match=r"batch_size must be \[\], got \[2\]"):
            PettingZooWrapper(rps_v2.parallel_env(), batch_size=[2])
        with pytest.raises(ValueError, match="agent 'player_1' is in no group"):
            PettingZooWrapper(rps_v2.parallel_env(), group_map={"player": ["player_0"]})

    def test_missing_action_names_key(self):
        env = PettingZooEnv("rps_v2", parallel=True, seed=0)
        with pytest.raises(KeyError, match="needs the action key .*player.*action"):
            env.step(env.reset())

    def test_bad_action_with_type_checks(self):
        env = PettingZooEnv("rps_v2", parallel=True, seed=0, run_type_checks=True)
        td = env.reset()
        td["player", "action"] = torch.tensor([0, 5])
        with pytest.raises(ValueError, match=r"(?s)action \('player', 'action'\) = .* is outside"):
            env.step(td)

    def test_unknown_task(self):
        with pytest.raises(ValueError, match="unknown PettingZoo task 'nope_v1'"):
            PettingZooEnv("nope_v1", parallel=True)
        with pytest.raises(ValueError, match="has no parallel API"):
            PettingZooEnv("classic/tictactoe_v3", parallel=True)

    @pytest.mark.skipif(importlib.util.find_spec("pymunk") is not None, reason="pymunk installed")
    def test_missing_family_dependency(self):
        with pytest.raises(ImportError, match="needs 'pymunk'"):
            PettingZooEnv("pistonball_v6", parallel=True)

    def test_missing_library(self, monkeypatch):
        monkeypatch.setattr(pz_lib, "_has_pettingzoo", False)
        with pytest.raises(ImportError, match=r"rl-envs\[pettingzoo\]"):
            PettingZooEnv("rps_v2", parallel=True)
        assert PettingZooEnv.available_envs == []

    def test_exports(self):
        assert (
            rl.envs.PettingZooEnv is PettingZooEnv
            and rl.envs.PettingZooWrapper is PettingZooWrapper
        )
        assert {"tictactoe_v3", "rps_v2", "pistonball_v6"} <= set(PettingZooEnv.available_envs)
