"""Episode-level transforms: StepCounter, InitTracker, TensorDictPrimer, NoopResetEnv,
FrameSkipTransform, RewardSum, TargetReturn."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase, GymEnv, PendulumEnv, check_env_specs
from rl.envs._done import default_done_spec
from rl.envs.transforms import (
    Compose,
    FrameSkipTransform,
    InitTracker,
    NoopResetEnv,
    RewardSum,
    StepCounter,
    TargetReturn,
    TensorDictPrimer,
    TransformedEnv,
)


class ConstEnv(EnvBase):
    """Reward 1 per step; sub-env ``i`` terminates after ``lengths[i]`` steps."""

    def __init__(self, lengths=(3,)):
        super().__init__(batch_size=(len(lengths),))
        bs = self.batch_size
        self.lengths = torch.tensor(lengths).reshape(*bs, 1)
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.full_done_spec = default_done_spec(bs, truncated=True)  # it truncates
        self.t = torch.zeros(*bs, 1, dtype=torch.int64)
        self.n_steps = 0

    def _reset(self, tensordict):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        self.t = torch.zeros_like(self.t) if mask is None else torch.where(mask, 0, self.t)
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=self.t.float(),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        self.n_steps += 1
        self.t = self.t + 1
        term = self.t >= self.lengths
        return TensorDict(
            observation=self.t.float(),
            reward=torch.ones(*self.batch_size, 1),
            done=term.clone(),
            terminated=term,
            truncated=torch.zeros_like(term),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


class TestStepCounter:
    def test_counts_and_truncates(self):
        env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=5))
        r = env.rollout(10)
        assert r.batch_size == torch.Size([5])
        torch.testing.assert_close(r["next", "step_count"].squeeze(-1), torch.arange(1, 6))
        assert r["next", "truncated"].squeeze(-1).tolist() == [False] * 4 + [True]
        assert r["next", "done"].squeeze(-1).tolist() == [False] * 4 + [True]
        assert r["next", "terminated"].sum() == 0

    def test_specs(self):
        env = TransformedEnv(PendulumEnv(batch_size=[3]), StepCounter(max_steps=7))
        spec = env.observation_spec["step_count"]
        assert spec.shape == torch.Size([3, 1]) and spec.dtype == torch.int64
        assert isinstance(spec, Bounded) and int(spec.high.max()) == 7
        assert "step_count" in env.state_spec.keys()
        check_env_specs(env)

    def test_partial_reset_in_batched_env(self):
        env = TransformedEnv(ConstEnv(lengths=(2, 3)), StepCounter())
        r = env.rollout(6, break_when_any_done=False)
        assert r["step_count"].squeeze(-1).tolist() == [[0, 1, 0, 1, 0, 1], [0, 1, 2, 0, 1, 2]]
        assert r["next", "step_count"].squeeze(-1).tolist() == [
            [1, 2, 1, 2, 1, 2],
            [1, 2, 3, 1, 2, 3],
        ]
        check_env_specs(env)

    def test_truncation_auto_resets_in_rollout(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2]), StepCounter(max_steps=3))
        r = env.rollout(7, break_when_any_done=False)
        assert r["step_count"][0].squeeze(-1).tolist() == [0, 1, 2, 0, 1, 2, 0]
        assert r["next", "truncated"][0].squeeze(-1).tolist() == [False, False, True] * 2 + [False]

    def test_on_data(self):
        td = TensorDict(
            {
                "step_count": torch.tensor([[2], [0]]),
                "next": TensorDict(
                    {
                        "truncated": torch.zeros(2, 1, dtype=torch.bool),
                        "done": torch.zeros(2, 1, dtype=torch.bool),
                    },
                    [2],
                ),
            },
            [2],
        )
        StepCounter(max_steps=3)(td)
        assert td["next", "step_count"].squeeze(-1).tolist() == [3, 1]
        assert td["next", "truncated"].squeeze(-1).tolist() == [True, False]
        assert td["next", "done"].squeeze(-1).tolist() == [True, False]
        with pytest.raises(NotImplementedError, match="StepCounter cannot be called independently"):
            StepCounter()(TensorDict({"step_count": torch.zeros(1)}, []))
        with pytest.raises(NotImplementedError, match="got int"):
            StepCounter()(5)

    @pytest.mark.parametrize("bad", [0, -3, 2.5, True])
    def test_bad_max_steps(self, bad):
        with pytest.raises(ValueError, match="max_steps must be a positive int or None"):
            StepCounter(max_steps=bad)


class TestInitTracker:
    def test_values_and_specs(self):
        env = TransformedEnv(ConstEnv(lengths=(2, 3)), InitTracker())
        r = env.rollout(5, break_when_any_done=False)
        assert r["is_init"].squeeze(-1).tolist() == [
            [True, False, True, False, True],
            [True, False, False, True, False],
        ]
        assert not r["next", "is_init"].any()
        spec = env.observation_spec["is_init"]
        assert spec.dtype == torch.bool and spec.shape == torch.Size([2, 1])
        check_env_specs(env)

    def test_on_stored_trajectory(self):
        done = torch.tensor([False, True, False, False, True, False]).unsqueeze(-1)
        td = TensorDict({"next": TensorDict({"done": done}, [6])}, [6])
        InitTracker()(td)
        assert td["is_init"].squeeze(-1).tolist() == [True, False, True, False, False, True]

    @pytest.mark.parametrize(
        "data",
        [None, TensorDict(), TensorDict({"reward": torch.zeros(3, 1)}, [3])],
        ids=["none", "no-time-dim", "no-done"],
    )
    def test_on_data_without_episode_flags(self, data):
        # without an env, episode starts are read from ("next", "done") only
        with pytest.raises(NotImplementedError, match="cannot be executed without a parent"):
            InitTracker()(data)


class TestRewardSum:
    def test_values_with_partial_resets(self):
        env = TransformedEnv(ConstEnv(lengths=(2, 3)), RewardSum())
        r = env.rollout(6, break_when_any_done=False)
        assert r["next", "episode_reward"].squeeze(-1).tolist() == [
            [1, 2, 1, 2, 1, 2],
            [1, 2, 3, 1, 2, 3],
        ]
        assert r["episode_reward"].squeeze(-1).tolist() == [[0, 1, 0, 1, 0, 1], [0, 1, 2, 0, 1, 2]]
        check_env_specs(env)

    def test_matches_reward_sum_on_pendulum(self):
        env = TransformedEnv(PendulumEnv(), RewardSum())
        r = env.rollout(20)
        torch.testing.assert_close(r["next", "episode_reward"], r["next", "reward"].cumsum(0))
        spec = env.observation_spec["episode_reward"]
        assert spec.shape == torch.Size([1]) and spec.dtype == torch.float32

    def test_on_stored_trajectory(self):
        reward = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).unsqueeze(-1)
        done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        td = TensorDict({"next": TensorDict({"reward": reward, "done": done}, [5])}, [5])
        RewardSum(in_keys=[("next", "reward")], out_keys=[("next", "episode_reward")])(td)
        assert td["next", "episode_reward"].squeeze(-1).tolist() == [1.0, 3.0, 3.0, 7.0, 12.0]

    def test_missing_reward_key(self):
        with pytest.raises(
            KeyError, match="RewardSum in_key 'bonus' is not in the env's reward spec"
        ):
            TransformedEnv(PendulumEnv(), RewardSum(in_keys=["bonus"]))


class TestTargetReturn:
    def test_reduce_and_constant(self):
        env = TransformedEnv(ConstEnv(lengths=(3,)), TargetReturn(10.0))
        r = env.rollout(5, break_when_any_done=False)
        assert r["target_return"].squeeze(-1).tolist() == [[10.0, 9.0, 8.0, 10.0, 9.0]]
        assert r["next", "target_return"].squeeze(-1).tolist() == [[9.0, 8.0, 7.0, 9.0, 8.0]]
        check_env_specs(env)
        env = TransformedEnv(ConstEnv(lengths=(3,)), TargetReturn(10.0, mode="constant"))
        r = env.rollout(3)
        assert (r["next", "target_return"] == 10.0).all()

    def test_on_data_and_errors(self):
        td = TensorDict(
            {
                "target_return": torch.tensor([5.0]),
                "next": TensorDict({"reward": torch.tensor([2.0])}, []),
            },
            [],
        )
        with pytest.raises(NotImplementedError, match="without a parent environment"):
            TargetReturn(5.0)(td)  # as TorchRL's: it counts down only in an env
        with pytest.raises(ValueError, match="mode must be 'reduce' or 'constant'"):
            TargetReturn(1.0, mode="sum")


class TestTensorDictPrimer:
    def test_reset_output_and_specs(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2]),
            TensorDictPrimer(hidden=Unbounded(shape=(4,)), default_value=0.5),
        )
        td = env.reset()
        assert td["hidden"].shape == torch.Size([2, 4])
        assert (td["hidden"] == 0.5).all()
        assert env.state_spec["hidden"].shape == torch.Size([2, 4])
        assert env.observation_spec["hidden"].shape == torch.Size([2, 4])
        check_env_specs(env)

    def test_carries_policy_state(self):
        env = TransformedEnv(PendulumEnv(), TensorDictPrimer({"h": Unbounded(shape=(2,))}))

        def policy(td):
            td["action"] = torch.zeros(1)
            td["next", "h"] = td["h"] + 1  # a recurrent policy writes its next state
            return td

        r = env.rollout(4, policy=policy)
        assert r["h"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
        td = env.reset()
        td["action"] = torch.zeros(1)
        out = env.step(td)
        torch.testing.assert_close(out["next", "h"], td["h"])  # carried when not written

    def test_random_primer_within_spec(self):
        env = TransformedEnv(
            PendulumEnv(), TensorDictPrimer(z=Bounded(-1.0, 1.0, shape=(3,)), random=True)
        )
        z = env.reset()["z"]
        assert z.shape == torch.Size([3]) and (z.abs() <= 1).all() and z.abs().sum() > 0

    def test_errors(self):
        with pytest.raises(TypeError, match="primer 'h' must be a spec"):
            TensorDictPrimer(h=3)

    def test_no_primers_is_a_no_op(self):
        # TorchRL: an empty primer adds nothing (and can be built, cloned, composed)
        env = TransformedEnv(PendulumEnv(), TensorDictPrimer())
        assert set(env.reset().keys()) == set(PendulumEnv().reset().keys())
        check_env_specs(env)

    def test_composite_value_adds_its_leaves_under_its_key(self):
        group = Composite(b=Bounded(-3.0, 3.0, shape=(4,)), c=Unbounded(shape=(2,)))
        env = TransformedEnv(PendulumEnv(), TensorDictPrimer(default_value=1.0, group=group))
        td = env.reset()
        torch.testing.assert_close(td["group", "b"], torch.ones(4))
        torch.testing.assert_close(td["group", "c"], torch.ones(2))
        assert env.observation_spec["group", "b"].shape == torch.Size([4])
        check_env_specs(env)

    def test_expand_specs_true_keeps_a_composites_declared_batch(self):
        base = ConstEnv(lengths=(5, 5))  # batch [2]
        declared = Composite(h=Unbounded(shape=(2, 4)), shape=(2,))
        env = TransformedEnv(base, TensorDictPrimer(declared, expand_specs=True))
        assert env.reset()["h"].shape == torch.Size([2, 4])  # already batched (TorchRL)
        env = TransformedEnv(
            ConstEnv(lengths=(5, 5)), TensorDictPrimer(h=Unbounded(shape=(2, 4)), expand_specs=True)
        )
        assert env.reset()["h"].shape == torch.Size([2, 2, 4])  # kwargs: no batch declared
        check_env_specs(env)

    def test_on_data(self):
        td = TransformedEnv(PendulumEnv(), TensorDictPrimer(h=Unbounded(shape=(2,)))).transform[0](
            TensorDict({}, [5])
        )
        assert td["h"].shape == torch.Size([5, 2])


class TestNoopResetEnv:
    def test_noops_advance_the_env(self):
        base = ConstEnv(lengths=(100,))
        env = TransformedEnv(base, NoopResetEnv(noops=4, random=False))
        td = env.reset()
        assert base.n_steps == 4
        assert td["observation"].item() == 4.0
        assert not td["done"].any()
        check_env_specs(env)

    def test_random_noops_bounded(self):
        base = ConstEnv(lengths=(100,))
        env = TransformedEnv(base, NoopResetEnv(noops=3))
        counts = set()
        for _ in range(30):
            counts.add(int(env.reset()["observation"].item()))
        assert counts <= {0, 1, 2} and len(counts) > 1

    def test_done_during_noops_restarts(self):
        with pytest.raises(RuntimeError, match="done within 5 random steps"):
            TransformedEnv(ConstEnv(lengths=(2,)), NoopResetEnv(noops=5, random=False)).reset()

    def test_bad_noops(self):
        with pytest.raises(ValueError, match="noops must be a non-negative int"):
            NoopResetEnv(-1)

    def test_batched_parent_refused(self):
        # TorchRL: one draw for a batch would start every sub-env after the same steps
        env = TransformedEnv(ConstEnv(lengths=(100, 100)), NoopResetEnv(noops=3))
        with pytest.raises(ValueError, match=r"batch-size is non-null \(batch_size=\(2,\)\)"):
            env.reset()


class TestFrameSkip:
    def test_sums_rewards_and_repeats(self):
        base = ConstEnv(lengths=(100,))
        env = TransformedEnv(base, FrameSkipTransform(3))
        r = env.rollout(4)
        assert base.n_steps == 12
        assert r["next", "reward"].squeeze(-1).tolist() == [[3.0, 3.0, 3.0, 3.0]]
        assert r["next", "observation"].squeeze(-1).tolist() == [[3.0, 6.0, 9.0, 12.0]]
        check_env_specs(env)

    def test_stops_at_done(self):
        env = TransformedEnv(ConstEnv(lengths=(4,)), FrameSkipTransform(3))
        r = env.rollout(5)
        assert r["next", "reward"].squeeze(-1).tolist() == [[3.0, 1.0]]
        assert bool(r["next", "done"][0, -1])

    def test_bad_frame_skip(self):
        with pytest.raises(ValueError, match="frame_skip must be an int >= 1"):
            FrameSkipTransform(0)

    def test_refused_on_data(self):
        with pytest.raises(RuntimeError, match="only be used when appended to a transformed env"):
            FrameSkipTransform(2)(TensorDict({"a": torch.zeros(3)}, [3]))


def test_gym_cartpole_episode_transforms_check_specs():
    env = TransformedEnv(
        GymEnv("CartPole-v1"), Compose(StepCounter(max_steps=20), InitTracker(), RewardSum())
    )
    check_env_specs(env, seed=0)
    r = env.rollout(50, break_when_any_done=False)
    steps = r["next", "step_count"].squeeze(-1)
    assert int(steps.max()) <= 20
    env.close()


class AgentsEnv(EnvBase):
    """``n_agents`` agents under ``"agents"`` with their own done flags ``[*B, A, 1]``
    (never set by the env), and root flags too when ``root_done``."""

    def __init__(self, n_agents=3, root_done=False, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.n_agents = n_agents
        agents = (*bs, n_agents)
        self.full_observation_spec = Composite(
            agents=Composite(observation=Unbounded(shape=(*agents, 1)), shape=agents), shape=bs
        )
        self.full_action_spec = Composite(
            agents=Composite(action=Unbounded(shape=(*agents, 1)), shape=agents), shape=bs
        )
        self.full_reward_spec = Composite(
            agents=Composite(reward=Unbounded(shape=(*agents, 1)), shape=agents), shape=bs
        )
        done = default_done_spec(agents)
        self.full_done_spec = (
            Composite(agents=done, **default_done_spec(bs), shape=bs)
            if root_done
            else Composite(agents=done, shape=bs)
        )
        self.root_done = root_done

    def _flags(self, td):
        agents = (*self.batch_size, self.n_agents, 1)
        td.set(("agents", "done"), torch.zeros(agents, dtype=torch.bool))
        td.set(("agents", "terminated"), torch.zeros(agents, dtype=torch.bool))
        if self.root_done:
            td.set("done", torch.zeros(*self.batch_size, 1, dtype=torch.bool))
            td.set("terminated", torch.zeros(*self.batch_size, 1, dtype=torch.bool))
        return td

    def _reset(self, tensordict):
        td = TensorDict(batch_size=self.batch_size)
        td.set(("agents", "observation"), torch.zeros(*self.batch_size, self.n_agents, 1))
        return self._flags(td)

    def _step(self, tensordict):
        td = TensorDict(batch_size=self.batch_size)
        obs = tensordict.get(("agents", "observation")) + 1
        td.set(("agents", "observation"), obs)
        td.set(("agents", "reward"), torch.ones_like(obs))
        return self._flags(td)

    def _set_seed(self, seed):
        pass


class TestStepCounterGroups:
    def test_nested_group_counted_in_its_own_shape(self):
        env = TransformedEnv(AgentsEnv(n_agents=3, batch_size=(2,)), StepCounter())
        counter = env.transform[0]
        assert counter.step_count_keys == [("agents", "step_count")]
        assert counter.truncated_keys == [("agents", "truncated")]
        assert counter.reset_keys == [("agents", "_reset")]
        check_env_specs(env)
        r = env.rollout(4)
        counts = r["next", "agents", "step_count"]
        assert counts.shape == (2, 4, 3, 1)
        expected = torch.arange(1, 5).reshape(1, 4, 1, 1).expand(2, 4, 3, 1)
        torch.testing.assert_close(counts, expected)
        torch.testing.assert_close(r["agents", "step_count"], expected - 1)

    def test_nested_partial_reset(self):
        env = TransformedEnv(AgentsEnv(n_agents=3), StepCounter())
        prev = torch.tensor([[5], [6], [7]])
        mask = torch.tensor([[True], [False], [True]])
        td = env.reset(TensorDict({("agents", "_reset"): mask, ("agents", "step_count"): prev}))
        assert td["agents", "step_count"].flatten().tolist() == [0, 6, 0]

    def test_nested_truncation(self):
        env = TransformedEnv(AgentsEnv(n_agents=2), StepCounter(max_steps=3))
        assert ("agents", "truncated") in env.full_done_spec.keys(True, True)
        r = env.rollout(10)
        assert r.shape == (3,)
        assert r["next", "agents", "truncated"].flatten(1).tolist() == [
            [False, False],
            [False, False],
            [True, True],
        ]

    def test_root_group_counts_and_spreads_truncation(self):
        env = TransformedEnv(AgentsEnv(n_agents=2, root_done=True), StepCounter(max_steps=3))
        counter = env.transform[0]
        assert counter.step_count_keys == ["step_count"]
        assert counter.done_keys == ["done"]
        assert sorted(map(str, counter.all_done_keys)) == ["('agents', 'done')", "done"]
        assert ("agents", "truncated") in counter.all_truncated_keys
        check_env_specs(env)
        r = env.rollout(10)
        assert r.shape == (3,)
        assert r["next", "step_count"].flatten().tolist() == [1, 2, 3]
        assert r["next", "done"].flatten().tolist() == [False, False, True]
        # the root truncation reaches every agent's done flag
        assert r["next", "agents", "done"].flatten(1).tolist() == [
            [False, False],
            [False, False],
            [True, True],
        ]

    def test_keys_without_env(self):
        counter = StepCounter(step_count_key="count")
        assert counter.step_count_keys == ["count"]
        assert counter.reset_keys == ["_reset"]
        assert counter.all_done_keys == ["done"]


class TestInitTrackerGroups:
    @pytest.mark.parametrize("root_done", [False, True])
    def test_init_keys(self, root_done):
        env = TransformedEnv(AgentsEnv(n_agents=3, root_done=root_done), InitTracker())
        expected = "is_init" if root_done else ("agents", "is_init")
        assert env.transform[0].init_keys == [expected]
        check_env_specs(env)
        r = env.rollout(3)
        shape = (3, 1) if root_done else (3, 3, 1)
        assert r[expected].shape == shape
        assert r[expected].reshape(3, -1).all(-1).tolist() == [True, False, False]
        assert not r["next", expected].any()

    def test_nested_partial_reset(self):
        env = TransformedEnv(AgentsEnv(n_agents=3), InitTracker())
        mask = torch.tensor([[True], [False], [True]])
        td = env.reset(TensorDict({("agents", "_reset"): mask}))
        assert td["agents", "is_init"].flatten().tolist() == [True, False, True]

    def test_keys_without_env(self):
        assert InitTracker(init_key="first").init_keys == ["first"]
