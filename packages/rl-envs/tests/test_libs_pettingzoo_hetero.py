"""PettingZoo groups of agents with different spaces (lazy stacks, as TorchRL) and Dict /
Tuple action spaces.

The expected layouts are TorchRL 0.14.1's (``PettingZooWrapper`` over the same envs):
a group whose agents differ gets a ``StackedComposite`` observation / action spec and
its data is a ``LazyStackedTensorDict`` (TorchRL 0.14.1 itself fails to read entries
whose shapes differ, ``Failed to stack tensors within a tensordict``, on reset or step);
a Dict action space nests under ``(group, "action")``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rl.core import Bounded, Categorical, Composite, OneHot, Stacked, StackedComposite
from rl.envs import MarlGroupMapType, SerialEnv, check_env_specs, step_mdp

pytest.importorskip("pettingzoo")

from gymnasium import spaces  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402

from rl.envs.libs.pettingzoo import PettingZooWrapper  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

AGENTS = ["agent_0", "agent_1", "agent_2"]


def _box(*shape, low=-100.0, high=100.0):
    return spaces.Box(low, high, shape, np.float32)


class MixedEnv(ParallelEnv):
    """Three agents with the given spaces; observations are ``seed % 10 + t + agent index``
    (in every entry), and the actions received are kept in ``received``.

    ``masks``: each agent's observation is a Dict with an ``"action_mask"`` that allows
    only action ``t % n`` of its Discrete(n) action space.
    """

    metadata = {"name": "mixed_v0"}

    def __init__(self, obs, act, masks=False, max_cycles=4):
        self.possible_agents = list(AGENTS)
        self._obs_spaces = dict(zip(AGENTS, obs))
        self._act_spaces = dict(zip(AGENTS, act))
        self.masks = masks
        self.max_cycles = max_cycles
        self.received = []

    def observation_space(self, agent):
        return self._obs_spaces[agent]

    def action_space(self, agent):
        return self._act_spaces[agent]

    def _value(self, space, fill):
        if isinstance(space, spaces.Dict):
            return {k: self._value(sub, fill) for k, sub in space.spaces.items()}
        if isinstance(space, spaces.Discrete):
            return np.int64(int(fill) % space.n)
        return np.full(space.shape, fill, dtype=space.dtype)

    def _observe(self):
        out = {}
        for j, agent in enumerate(self.agents):
            value = self._value(self._obs_spaces[agent], self.seed + self.t + j)
            if self.masks:
                n = self._act_spaces[agent].n
                value["action_mask"] = (np.arange(n) == self.t % n).astype(np.int8)
            out[agent] = value
        return out

    def reset(self, seed=None, options=None):
        self.seed = 0 if seed is None else seed % 10  # inside the spaces' bounds
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        for agent, action in actions.items():
            assert self._act_spaces[agent].contains(action), (agent, action)
        self.received.append(actions)
        self.t += 1
        rewards = {a: float(j) for j, a in enumerate(self.agents)}
        terms = {a: False for a in self.agents}
        truncs = {a: self.t >= self.max_cycles for a in self.agents}
        return self._observe(), rewards, terms, truncs, {a: {} for a in self.agents}


def _masked_obs(n):
    return spaces.Dict({"observation": _box(2), "action_mask": spaces.MultiBinary(n)})


def mixed(obs, act, masks=False, **kwargs):
    kwargs.setdefault("group_map", MarlGroupMapType.ALL_IN_ONE_GROUP)
    return PettingZooWrapper(MixedEnv(obs, act, masks=masks), seed=0, **kwargs)


def shapes_env(**kwargs):
    """TorchRL's failing case: observations of sizes 3, 5, 3; Discrete(2/4/2) actions."""
    disc = [spaces.Discrete(2), spaces.Discrete(4), spaces.Discrete(2)]
    return mixed([_box(3), _box(5), _box(3)], disc, **kwargs)


class TestHeterogeneousGroup:
    def test_specs_and_data_are_lazily_stacked(self):
        env = shapes_env(categorical_actions=False)
        obs_spec = env.full_observation_spec["agents"]
        act_spec = env.full_action_spec["agents"]
        assert isinstance(obs_spec, StackedComposite) and obs_spec.shape == (3,)
        assert isinstance(act_spec, StackedComposite)
        assert isinstance(obs_spec["observation"], Stacked)
        assert obs_spec["observation"].shape == (3, -1)  # TorchRL's StackedBoundedContinuous
        assert [act_spec[j]["action"].shape for j in range(3)] == [(2,), (4,), (2,)]
        # entries the agents share stay dense
        assert env.full_reward_spec["agents", "reward"].shape == (3, 1)
        assert env.full_done_spec["agents", "done"].shape == (3, 1)
        td = env.reset()
        agents = td["agents"]
        assert isinstance(agents, LazyStackedTensorDict) and agents.batch_size == (3,)
        for j, size in enumerate((3, 5, 3)):  # values of the raw env: seed + t + j
            torch.testing.assert_close(agents[j]["observation"], torch.full((size,), float(j)))
        assert agents["done"].shape == (3, 1) and not agents["done"].any()
        check_env_specs(env, seed=0)

    def test_actions_reach_each_agent(self):
        env = shapes_env(categorical_actions=False)
        td = env.reset()
        for j, choice in enumerate((1, 3, 0)):
            n = (2, 4, 2)[j]
            td["agents"].tensordicts[j]["action"] = torch.eye(n, dtype=torch.int64)[choice]
        nxt = env.step(td)["next"]
        assert {a: int(v) for a, v in env._env.received[-1].items()} == dict(zip(AGENTS, (1, 3, 0)))
        torch.testing.assert_close(nxt["agents", "reward"], torch.tensor([[0.0], [1.0], [2.0]]))
        torch.testing.assert_close(nxt["agents"][1]["observation"], torch.full((5,), 2.0))

    def test_rollout_and_step_mdp(self):
        env = shapes_env(categorical_actions=False)
        torch.manual_seed(0)
        rollout = env.rollout(6, break_when_any_done=False)
        assert rollout.batch_size == (6,) and rollout["agents"].batch_size == (6, 3)
        obs = rollout["next", "agents"][:, 1]["observation"]
        # truncated at t = 4 and reset: seed + t + 1
        assert obs[:, 0].tolist() == [2.0, 3.0, 4.0, 5.0, 2.0, 3.0]
        assert rollout["next", "agents", "truncated"][:, :, 0].any(-1).tolist() == [
            False, False, False, True, False, False,
        ]  # fmt: skip
        sent = [int(d["agent_1"]) for d in env._env.received[-6:]]
        assert sent == rollout["agents"][:, 1]["action"].argmax(-1).tolist()
        td = env.rand_step(env.reset())
        nxt = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys)
        assert isinstance(nxt["agents"], LazyStackedTensorDict)
        assert [a["observation"].shape for a in nxt["agents"].tensordicts] == [(3,), (5,), (3,)]
        assert "reward" not in nxt["agents"].keys() and "action" not in nxt["agents"].keys()
        torch.testing.assert_close(
            nxt["agents"][1]["observation"], td["next", "agents"][1]["observation"]
        )

    def test_categorical_actions_of_one_shape_stay_dense(self):
        # TorchRL: a StackedCategorical spec, dense data (the observations match)
        disc = [spaces.Discrete(2), spaces.Discrete(4), spaces.Discrete(2)]
        env = mixed([_box(3)] * 3, disc)
        spec = env.full_action_spec["agents", "action"]
        assert isinstance(spec, Stacked) and [spec[j].n for j in range(3)] == [2, 4, 2]
        td = env.reset()
        assert isinstance(td["agents"], TensorDict)
        td["agents", "action"] = torch.tensor([1, 3, 0])
        env.step(td)
        assert [int(a) for a in env._env.received[-1].values()] == [1, 3, 0]
        check_env_specs(env, seed=0)

    def test_dict_observations_with_different_keys(self):
        # TorchRL: a StackedComposite whose member 1 has the exclusive entry "b" (its
        # reset then drops "b"); here every agent keeps its own entries
        obs = [
            spaces.Dict({"a": _box(3)}),
            spaces.Dict({"a": _box(3), "b": _box(2)}),
            spaces.Dict({"a": _box(3)}),
        ]
        env = mixed(obs, [spaces.Discrete(2)] * 3)
        spec = env.full_observation_spec["agents"]
        assert isinstance(spec, StackedComposite)
        assert ("observation", "b") in spec[1].keys(True, True)
        assert ("observation", "b") not in spec[0].keys(True, True)
        agents = env.reset()["agents"]
        torch.testing.assert_close(
            agents["observation", "a"], torch.tensor([[0.0] * 3, [1.0] * 3, [2.0] * 3])
        )
        torch.testing.assert_close(agents[1]["observation", "b"], torch.ones(2))
        check_env_specs(env, seed=0)

    def test_action_masks_per_agent(self):
        obs = [_masked_obs(2), _masked_obs(3), _masked_obs(2)]
        act = [spaces.Discrete(2), spaces.Discrete(3), spaces.Discrete(2)]
        env = mixed(obs, act, masks=True, categorical_actions=False)
        assert env.has_action_mask == {"agents": True}
        td = env.reset()
        masks = [a["action_mask"].tolist() for a in td["agents"].tensordicts]
        assert masks == [[True, False], [True, False, False], [True, False]]
        assert "action_mask" not in td["agents"][0]["observation"].keys()
        rollout = env.rollout(4, break_when_any_done=False)  # random actions obey the masks
        for j in range(3):
            agent = rollout["agents"][:, j]
            allowed = (agent["action"].bool() & agent["action_mask"]).any(-1)
            assert bool(allowed.all()), j
        check_env_specs(env, seed=0)

    def test_serial_env_without_buffers(self):
        env = SerialEnv(2, lambda: shapes_env(categorical_actions=False), use_buffers=False)
        rollout = env.rollout(3, break_when_any_done=False)
        assert rollout.batch_size == (2, 3)
        assert rollout["next", "agents"].batch_size == (2, 3, 3)
        assert rollout["next", "agents"][:, :, 1]["observation"].shape == (2, 3, 5)
        check_env_specs(env, seed=0)
        env.close()

    def test_collector_and_replay_buffer(self):
        from rl.collectors import Collector
        from rl.data import LazyStackStorage, ReplayBuffer

        collector = Collector(
            lambda: shapes_env(categorical_actions=False), None, frames_per_batch=4, total_frames=8
        )
        buffer = ReplayBuffer(storage=LazyStackStorage(100), batch_size=5)
        for batch in collector:
            assert batch.batch_size == (4,)
            assert batch["next", "agents"][:, 1]["observation"].shape == (4, 5)
            buffer.extend(batch)
        collector.shutdown()
        assert len(buffer) == 8
        sample = buffer.sample()
        assert sample["agents"][:, 1]["observation"].shape == (5, 5)
        assert sample["next", "agents", "reward"].shape == (5, 3, 1)


class TestStructuredActions:
    def test_dict_actions_as_torchrl(self):
        move = spaces.Dict({"move": _box(2), "fire": spaces.Discrete(3)})
        env = mixed([_box(3)] * 3, [move] * 3)
        spec = env.full_action_spec
        # TorchRL 0.14.1: (agents, action, fire) Categorical [3], (agents, action, move) [3, 2]
        assert isinstance(spec["agents", "action", "fire"], Categorical)
        assert spec["agents", "action", "fire"].shape == (3,)
        assert isinstance(spec["agents", "action", "move"], Bounded)
        assert spec["agents", "action", "move"].shape == (3, 2)
        td = env.reset()
        td["agents", "action", "fire"] = torch.tensor([2, 0, 1])
        td["agents", "action", "move"] = torch.tensor([[0.5, -0.5], [0.0, 0.25], [1.0, -1.0]])
        env.step(td)
        got = env._env.received[-1]
        assert [int(got[a]["fire"]) for a in AGENTS] == [2, 0, 1]
        np.testing.assert_allclose(got["agent_1"]["move"], [0.0, 0.25])
        check_env_specs(env, seed=0)

    def test_tuple_actions(self):
        same = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3)))
        mixed_tuple = spaces.Tuple((_box(1), spaces.Discrete(3)))
        env = mixed([_box(3)] * 3, [same] * 3, categorical_actions=False)
        # items of one kind stack (TorchRL's torch.stack): one-hot [3 agents, 2 items, 3]
        assert isinstance(env.full_action_spec["agents", "action"], OneHot)
        assert env.full_action_spec["agents", "action"].shape == (3, 2, 3)
        td = env.reset()
        td["agents", "action"] = torch.eye(3, dtype=torch.int64)[
            torch.tensor([[0, 1], [2, 2], [1, 0]])
        ]
        env.step(td)
        got = env._env.received[-1]
        assert [tuple(int(x) for x in got[a]) for a in AGENTS] == [(0, 1), (2, 2), (1, 0)]
        # mixed items (TorchRL raises) nest under "0", "1"
        env = mixed([_box(3)] * 3, [mixed_tuple] * 3)
        assert set(env.full_action_spec["agents", "action"].keys()) == {"0", "1"}
        td = env.reset()
        td["agents", "action", "0"] = torch.tensor([[0.5], [0.0], [-0.5]])
        td["agents", "action", "1"] = torch.tensor([2, 1, 0])
        env.step(td)
        got = env._env.received[-1]["agent_2"]
        assert isinstance(got, tuple) and got[0].tolist() == [-0.5] and int(got[1]) == 0
        check_env_specs(env, seed=0)

    def test_dict_actions_in_a_heterogeneous_group(self):
        act = [
            spaces.Dict({"move": _box(2)}),
            spaces.Dict({"move": _box(2), "fire": spaces.Discrete(2)}),
            spaces.Dict({"move": _box(2)}),
        ]
        env = mixed([_box(3)] * 3, act)
        assert isinstance(env.full_action_spec["agents"], StackedComposite)
        td = env.rand_action(env.reset())
        assert ("action", "fire") in td["agents"][1].keys(True, True)
        env.step(td)
        got = env._env.received[-1]
        assert set(got["agent_1"]) == {"move", "fire"} and set(got["agent_0"]) == {"move"}
        assert isinstance(env.full_observation_spec["agents"], Composite)
        check_env_specs(env, seed=0)


class TestHeterogeneousErrors:
    def test_bad_or_missing_agent_action(self):
        env = shapes_env(categorical_actions=False, run_type_checks=True)
        td = env.reset()
        with pytest.raises(KeyError, match=r"action \('agents', 'action'\) of agent 'agent_0'"):
            env.check_action(td)
        for j, n in enumerate((2, 4, 2)):
            td["agents"].tensordicts[j]["action"] = torch.zeros(n, dtype=torch.int64)
        with pytest.raises(ValueError, match=r"of agent 'agent_0' = .* is outside its spec OneHot"):
            env.check_action(td)  # all-zero one-hot rows
        td = env.rand_action(td)
        td["agents"].tensordicts[1]["action"] = torch.ones(2, dtype=torch.int64)
        with pytest.raises(ValueError, match="agent 'agent_1' = tensor\\(\\[1, 1\\]\\)"):
            env.step(td)

    def test_action_mask_needs_discrete_actions(self):
        obs = [_masked_obs(2), spaces.Dict({"observation": _box(3)}), _masked_obs(2)]
        act = [spaces.Discrete(2), _box(2), spaces.Discrete(2)]
        with pytest.raises(
            ValueError, match="agent 'agent_1' of group 'agents' has an action mask"
        ):
            mixed(obs, act)

    def test_check_env_specs_names_the_member(self):
        env = shapes_env(categorical_actions=False)
        spec = env.full_observation_spec["agents", "observation"]
        env.full_observation_spec["agents", "observation"][1].space.high.fill_(0.5)
        assert spec[1].space.high.max() == 0.5
        with pytest.raises(AssertionError, match=r"'observation'\) of member 1 at step 0"):
            check_env_specs(env, seed=0)
