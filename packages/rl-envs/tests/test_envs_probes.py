"""Probe environments: specs, rewards, episode lengths and their stated answers."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.envs import (
    PROBES,
    ActionRewardProbe,
    ConstantRewardProbe,
    DiscountingProbe,
    ObservationActionRewardProbe,
    ObservationRewardProbe,
    SignProbe,
    check_env_specs,
)

VARIANTS = [
    {},
    {"categorical_action_encoding": True},
    {"continuous": True},
]


def _act(env, td, action):
    """Writes the action ``action`` (index for discrete, value for continuous) into td."""
    action = torch.as_tensor(action)
    if env.continuous:
        td["action"] = action.to(torch.float32).reshape(*env.batch_size, 1)
    elif env.categorical_action_encoding:
        td["action"] = action.to(torch.int64).expand(env.batch_size).clone()
    else:
        td["action"] = torch.nn.functional.one_hot(
            action.to(torch.int64).expand(env.batch_size), 2
        ).to(env.action_spec.dtype)
    return td


class TestProbeSpecs:
    @pytest.mark.parametrize("cls", PROBES)
    @pytest.mark.parametrize("kwargs", VARIANTS)
    @pytest.mark.parametrize("batch_size", [(), (5,)])
    def test_check_env_specs(self, cls, kwargs, batch_size):
        env = cls(batch_size=batch_size, **kwargs)
        env.set_seed(0)
        check_env_specs(env)

    @pytest.mark.parametrize("kwargs", VARIANTS)
    def test_action_spec(self, kwargs):
        spec = ActionRewardProbe(batch_size=[3], **kwargs).action_spec
        if kwargs.get("continuous"):
            assert spec.shape == (3, 1)
            assert spec.space.low.min() == -2.0 and spec.space.high.max() == 2.0
        elif kwargs.get("categorical_action_encoding"):
            assert spec.shape == (3,) and spec.n == 2
        else:
            assert spec.shape == (3, 2)

    def test_wrong_action_shape_raises(self):
        env = ActionRewardProbe(batch_size=[3])
        td = env.reset()
        td["action"] = torch.zeros(3, 5)
        with pytest.raises(ValueError, match=r"action has shape \(3, 5\), expected \(3, 2\)"):
            env.step(td)


class TestProbeEpisodes:
    @pytest.mark.parametrize("cls", PROBES)
    def test_episode_length(self, cls):
        env = cls(batch_size=[4])
        td = env.rollout(6, break_when_any_done=False)
        terminated = td["next", "terminated"].squeeze(-1)
        horizon = 2 if cls is DiscountingProbe else 1
        expected = torch.zeros(6, dtype=torch.bool)
        expected[horizon - 1 :: horizon] = True
        assert (terminated == expected).all()
        assert not td["next", "truncated"].any()

    def test_constant_reward(self):
        td = ConstantRewardProbe(batch_size=[4]).rollout(3, break_when_any_done=False)
        assert (td["next", "reward"] == 1).all()
        assert (td["observation"] == 0).all()

    def test_observation_reward_is_the_observation(self):
        env = ObservationRewardProbe(batch_size=[64])
        env.set_seed(1)
        td = env.rollout(4, break_when_any_done=False)
        obs = td["observation"]
        assert set(obs.unique().tolist()) == {-1.0, 1.0}
        assert (td["next", "reward"] == obs).all()

    def test_discounting_rewards_second_step_only(self):
        td = DiscountingProbe(batch_size=[2]).rollout(4, break_when_any_done=False)
        assert td["observation"][0].squeeze(-1).tolist() == [0.0, 1.0, 0.0, 1.0]
        assert td["next", "reward"][0].squeeze(-1).tolist() == [0.0, 1.0, 0.0, 1.0]

    @pytest.mark.parametrize("kwargs", VARIANTS[:2])
    def test_discrete_action_rewards(self, kwargs):
        env = ActionRewardProbe(batch_size=[2], **kwargs)
        for action, reward in [(1, 1.0), (0, -1.0)]:
            td = env.step(_act(env, env.reset(), action))
            assert (td["next", "reward"] == reward).all()

    def test_continuous_action_reward_peaks_at_1_5(self):
        env = ActionRewardProbe(batch_size=[3], continuous=True)
        td = env.reset()
        td["action"] = torch.tensor([[1.5], [1.0], [-2.0]])
        reward = env.step(td)["next", "reward"].squeeze(-1)
        torch.testing.assert_close(reward, torch.tensor([1.0, 0.75, 1.0 - 3.5**2]))

    @pytest.mark.parametrize("kwargs", VARIANTS)
    def test_optimal_action_is_rewarded(self, kwargs):
        env = ObservationActionRewardProbe(batch_size=[64], **kwargs)
        env.set_seed(3)
        td = env.reset()
        best = env.optimal_action(td["observation"])
        if env.continuous:
            assert best.shape == (64, 1)
            td["action"] = best
        elif env.categorical_action_encoding:
            td["action"] = best
        else:
            td["action"] = torch.nn.functional.one_hot(best, 2).to(env.action_spec.dtype)
        assert (env.step(td)["next", "reward"] == 1).all()
        if not env.continuous:
            wrong = td.clone()
            wrong["action"] = (
                1 - best
                if env.categorical_action_encoding
                else torch.nn.functional.one_hot(1 - best, 2).to(env.action_spec.dtype)
            )
            assert (env.step(wrong)["next", "reward"] == -1).all()


def test_docstring_examples():
    import doctest

    import rl.envs._probes as probes

    result = doctest.testmod(probes, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


class TestProbeAnswers:
    def test_expected_values(self):
        obs = torch.tensor([[-1.0], [0.0], [1.0]])
        torch.testing.assert_close(
            ObservationRewardProbe().expected_value(obs), torch.tensor([[-1.0], [0.0], [1.0]])
        )
        torch.testing.assert_close(
            DiscountingProbe().expected_value(torch.tensor([[0.0], [1.0]]), gamma=0.9),
            torch.tensor([[0.9], [1.0]]),
        )
        assert ConstantRewardProbe().optimal_action(obs) is None

    def test_discounted_return_matches_expected_value(self):
        """The stated V(s0) = γ is the discounted return of the rewards the env gives."""
        env = DiscountingProbe(batch_size=[1])
        td = env.rollout(2)
        gamma = 0.9
        ret = td["next", "reward"][0, 0] + gamma * td["next", "reward"][0, 1]
        torch.testing.assert_close(ret, env.expected_value(td["observation"][0, :1], gamma)[0])

    def test_partial_reset_keeps_other_envs(self):
        env = DiscountingProbe(batch_size=[2])
        td = env.reset()
        td = env.step(_act(env, td, 0))
        nxt = td["next"].clone()
        nxt["_reset"] = torch.tensor([[True], [False]])
        out = env.reset(nxt)
        assert out["observation"].squeeze(-1).tolist() == [0.0, 1.0]

    def test_seeding_reproduces_observations(self):
        def obs(seed):
            env = ObservationActionRewardProbe(batch_size=[16])
            env.set_seed(seed)
            return env.rollout(5, break_when_any_done=False)["observation"]

        assert torch.equal(obs(7), obs(7))
        assert not torch.equal(obs(7), obs(8))

    def test_reset_input_tensordict(self):
        env = ConstantRewardProbe(batch_size=[2])
        out = env.reset(TensorDict({}, batch_size=[2]))
        assert out["observation"].shape == (2, 1)


class TestSignProbe:
    @pytest.mark.parametrize("continuous", [False, True])
    @pytest.mark.parametrize("batch_size", [(), (5,), 3])
    def test_check_env_specs(self, continuous, batch_size):
        env = SignProbe(batch_size, n_agents=3, max_steps=2, continuous=continuous)
        env.set_seed(0)
        check_env_specs(env)

    def test_layout_as_vmas(self):
        env = SignProbe(batch_size=[4], n_agents=3, max_steps=2)
        td = env.rollout(2)
        assert td["agents"].batch_size == (4, 2, 3)
        assert td["agents", "observation"].shape == (4, 2, 3, 1)
        assert td["next", "agents", "reward"].shape == (4, 2, 3, 1)
        assert td["agents", "action"].shape == (4, 2, 3) and env.action_spec.n == 3
        # one done / terminated per environment at the root, no truncated
        assert set(env.done_keys) == {"done", "terminated"}
        assert td["next", "done"].shape == (4, 2, 1)
        assert set(td["agents", "observation"].unique().tolist()) == {-1.0, 1.0}

    def test_continuous_action_spec(self):
        spec = SignProbe(batch_size=[2], n_agents=3, continuous=True).action_spec
        assert spec.shape == (2, 3, 1)
        assert spec.space.low.min() == -1.0 and spec.space.high.max() == 1.0

    def test_episode_length(self):
        env = SignProbe(batch_size=[2], max_steps=3)
        td = env.rollout(7, break_when_any_done=False)
        done = td["next", "done"][0].squeeze(-1).tolist()
        assert done == [False, False, True, False, False, True, False]
        assert torch.equal(td["next", "done"], td["next", "terminated"])

    def test_continuous_rewards(self):
        env = SignProbe(batch_size=[1], n_agents=3, continuous=True)
        td = env.reset()
        sign = td["agents", "observation"]
        td["agents", "action"] = torch.stack(
            [sign[:, 0] / 2, torch.zeros_like(sign[:, 1]), -sign[:, 2]], 1
        )
        reward = env.step(td)["next", "agents", "reward"].flatten().tolist()
        # -4 (a - s/2)^2: best 0, answering 0 costs 1, the opposite sign costs 9
        assert reward == [0.0, -1.0, -9.0]

    def test_discrete_rewards(self):
        env = SignProbe(batch_size=[64], n_agents=2)
        env.set_seed(1)
        for answer, reward in [("best", 1.0), ("other sign", 0.0), ("zero", 0.0)]:
            td = env.reset()  # a new sign is drawn at every step: answer the one shown
            best = env.optimal_action(td["agents", "observation"])
            assert best.shape == (64, 2) and set(best.unique().tolist()) == {0, 2}
            action = {"best": best, "other sign": 2 - best, "zero": torch.ones_like(best)}
            td["agents", "action"] = action[answer]
            assert (env.step(td)["next", "agents", "reward"] == reward).all(), answer

    def test_each_agent_answers_its_own_sign(self):
        # agent 0 right, agent 1 wrong: the rewards are per agent, not shared
        env = SignProbe(batch_size=[8], n_agents=2)
        td = env.reset()
        best = env.optimal_action(td["agents", "observation"])
        td["agents", "action"] = torch.stack([best[:, 0], 2 - best[:, 1]], -1)
        reward = env.step(td)["next", "agents", "reward"].squeeze(-1)
        assert reward[:, 0].tolist() == [1.0] * 8 and reward[:, 1].tolist() == [0.0] * 8

    def test_partial_reset_keeps_other_envs(self):
        env = SignProbe(batch_size=[64], max_steps=5)
        env.set_seed(2)
        td = env.rand_step(env.reset())
        nxt = td["next"].clone()
        nxt["_reset"] = torch.zeros(64, 1, dtype=torch.bool)
        nxt["_reset"][:32] = True
        shown = nxt["agents", "observation"].clone()
        out = env.reset(nxt)
        # the envs not reset keep the sign they were shown (their next reward is for it)
        torch.testing.assert_close(out["agents", "observation"][32:], shown[32:])
        assert not torch.equal(out["agents", "observation"][:32], shown[:32])
        assert env._t.tolist() == [0] * 32 + [1] * 32

    def test_seeding_reproduces_signs(self):
        def signs(seed):
            env = SignProbe(batch_size=[16], n_agents=3)
            env.set_seed(seed)
            return env.rollout(5, break_when_any_done=False)["agents", "observation"]

        assert torch.equal(signs(7), signs(7))
        assert not torch.equal(signs(7), signs(8))

    def test_bad_arguments_and_actions_raise(self):
        with pytest.raises(ValueError, match="n_agents >= 1 and max_steps >= 1, got n_agents=0"):
            SignProbe(batch_size=[2], n_agents=0)
        env = SignProbe(batch_size=[2], n_agents=3)
        td = env.reset()
        td["agents", "action"] = torch.zeros(2, 3, 1, dtype=torch.int64)  # continuous layout
        with pytest.raises(
            ValueError, match=r"\('agents', 'action'\) has shape \(2, 3, 1\), expected \(2, 3\)"
        ):
            env.step(td)
