"""RewardSum: default in_keys from the env, reset keys checked at reset, sums on stored data."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Composite, Unbounded
from rl.envs import EnvBase, PendulumEnv, check_env_specs
from rl.envs._done import default_done_spec
from rl.envs.transforms import Compose, RewardSum, TransformedEnv


class TwoRewardEnv(EnvBase):
    """Rewards 1 under ``"reward"`` and 2 under ``("extra", "bonus")`` at every step."""

    def __init__(self):
        super().__init__(batch_size=(2,))
        bs = self.batch_size
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Unbounded(shape=(*bs, 1))
        self.full_reward_spec = Composite(
            reward=Unbounded(shape=(*bs, 1)),
            extra=Composite(bonus=Unbounded(shape=(*bs, 1)), shape=bs),
            shape=bs,
        )
        self.full_done_spec = default_done_spec(bs)

    def _reset(self, tensordict):
        out = self.full_done_spec.zero()
        out["observation"] = torch.zeros(*self.batch_size, 1)
        return out

    def _step(self, tensordict):
        out = self.full_done_spec.zero()
        out["observation"] = torch.zeros(*self.batch_size, 1)
        out["reward"] = torch.ones(*self.batch_size, 1)
        out["extra", "bonus"] = torch.full((*self.batch_size, 1), 2.0)
        return out

    def _set_seed(self, seed):
        pass


class TestRewardSumKeys:
    def test_default_in_keys_are_the_env_reward_keys(self):
        env = TransformedEnv(TwoRewardEnv(), RewardSum())
        t = env.transform
        obs_keys = env.observation_spec.keys(True, True)
        assert "episode_reward" in obs_keys and ("extra", "episode_bonus") in obs_keys
        assert sorted(map(str, t.in_keys)) == sorted(map(str, ["reward", ("extra", "bonus")]))
        r = env.rollout(3)
        torch.testing.assert_close(
            r["next", "episode_reward"][0].squeeze(-1), torch.tensor([1.0, 2.0, 3.0])
        )
        torch.testing.assert_close(
            r["next", "extra", "episode_bonus"][0].squeeze(-1), torch.tensor([2.0, 4.0, 6.0])
        )
        check_env_specs(env)

    def test_outside_an_env_the_default_is_reward(self):
        t = RewardSum()
        assert t.in_keys == ["reward"] and t.out_keys == ["episode_reward"]

    def test_in_out_length_mismatch(self):
        with pytest.raises(
            ValueError, match="RewardSum expects the same number of input and output keys"
        ):
            RewardSum(in_keys=["a"], out_keys=["b", "c"])

    def test_reset_keys_length_checked_at_reset(self):
        t = RewardSum(in_keys=["r1", "r2"], reset_keys=["_reset"])  # built as TorchRL's
        td = TensorDict({"_reset": torch.tensor([True, False])}, [2])
        with pytest.raises(
            ValueError,
            match=r"Could not match the env reset_keys \['_reset'\] with the in_keys \['r1', 'r2'\]",
        ):
            t._reset(td, td.empty())

    def test_reset_outside_an_env_needs_reset_keys(self):
        td = TensorDict(
            {"episode_reward": torch.tensor([[3.0], [4.0]]), "_reset": torch.tensor([True, False])},
            [2],
        )
        t = RewardSum()
        with pytest.raises(TypeError, match="reset_keys not provided but parent env not found"):
            t._reset(td, td.empty())
        with pytest.raises(TypeError, match="reset_keys not provided"):
            t.reset_keys  # noqa: B018
        t.reset_keys = ["_reset"]
        out = t._reset(td, td.empty())
        torch.testing.assert_close(out["episode_reward"], torch.tensor([[0.0], [4.0]]))

    def test_reset_keys_in_an_env(self):
        env = TransformedEnv(PendulumEnv(), RewardSum())
        assert env.transform.reset_keys == ["_reset"]


class TestRewardSumOnData:
    def _data(self, names=None):
        reward = torch.ones(2, 4, 1)
        done = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.bool).unsqueeze(-1)
        return TensorDict({"next": {"reward": reward, "done": done}}, [2, 4], names=names)

    @pytest.mark.parametrize("names", [None, [None, "time"]])
    def test_per_episode_cumsum_over_time(self, names):
        td = self._data(names)
        RewardSum(in_keys=[("next", "reward")], out_keys=[("next", "episode_reward")])(td)
        # a plain loop: the sum restarts after each done
        expected = torch.zeros(2, 4)
        for b in range(2):
            total = 0.0
            for t in range(4):
                total = (0.0 if t and td["next", "done"][b, t - 1] else total) + 1.0
                expected[b, t] = total
        torch.testing.assert_close(td["next", "episode_reward"].squeeze(-1), expected)

    def test_time_dim_named_first(self):
        td = self._data().transpose(0, 1)  # [T, B]
        td.names = ["time", None]
        RewardSum(in_keys=[("next", "reward")], out_keys=[("some", "sum")])(td)
        assert td["some", "sum"].shape == torch.Size([4, 2, 1])
        torch.testing.assert_close(
            td["some", "sum"][:, 0].squeeze(-1), torch.tensor([1.0, 2.0, 1.0, 2.0])
        )
        torch.testing.assert_close(
            td["some", "sum"][:, 1].squeeze(-1), torch.tensor([1.0, 2.0, 3.0, 4.0])
        )

    def test_no_time_dim(self):
        td = TensorDict({("next", "reward"): torch.randn(10)}, [])
        with pytest.raises(
            ValueError, match="At least one dimension of the tensordict must be named 'time'"
        ):
            Compose(RewardSum())(td)

    def test_in_keys_are_read_as_given(self):
        td = self._data()
        with pytest.raises(KeyError, match="RewardSum expected in_key .{1,3}reward"):
            RewardSum()(td)

    def test_matches_the_env_sums(self):
        env = TransformedEnv(PendulumEnv(), RewardSum())
        data = env.rollout(6)
        stripped = data.exclude(("next", "episode_reward"))
        RewardSum(in_keys=[("next", "reward")], out_keys=[("next", "episode_reward")])(stripped)
        torch.testing.assert_close(
            stripped["next", "episode_reward"], data["next", "episode_reward"]
        )
