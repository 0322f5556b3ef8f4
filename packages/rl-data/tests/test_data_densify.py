"""DensifyReward: the reward-to-go of each step, against a plain loop and literal values."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import DensifyReward


def _batch(reward: torch.Tensor, done: torch.Tensor) -> TensorDict:
    return TensorDict({"next": {"reward": reward, "done": done}}, batch_size=reward.shape[:-1])


class TestDensifyReward:
    def test_sparse_rewards_fill_their_trajectory(self):
        reward = torch.zeros(10, 1)
        done = torch.zeros(10, 1, dtype=torch.bool)
        done[[3, 7]] = True
        reward[3], reward[7] = 3.0, 7.0
        td = _batch(reward, done)
        out = DensifyReward()(td)
        assert out is td  # in place, as TorchRL
        expected = [3.0] * 4 + [7.0] * 4 + [0.0] * 2
        assert out["next", "reward"].squeeze(-1).tolist() == expected

    @pytest.mark.parametrize("discount", [1.0, 0.9])
    def test_against_loop(self, discount):
        g = torch.Generator().manual_seed(0)
        reward = torch.randn(3, 8, 1, generator=g)
        done = torch.rand(3, 8, 1, generator=g) < 0.3
        out = DensifyReward(discount=discount, reward_key_out="dense")(_batch(reward, done))
        expected = torch.zeros(3, 8)
        for b in range(3):
            acc = 0.0
            for t in reversed(range(8)):
                acc = reward[b, t, 0].item() + (0.0 if done[b, t, 0] else discount * acc)
                expected[b, t] = acc
        torch.testing.assert_close(out["next", "dense"].squeeze(-1), expected)
        torch.testing.assert_close(out["next", "reward"], reward)  # left as it was

    def test_keys(self):
        module = DensifyReward(reward_key=("agents", "reward"), done_key=("agents", "done"))
        assert module.in_keys == [("agents", "reward"), ("agents", "done")]
        assert module.out_keys == [("agents", "reward")]

    def test_shape_mismatch(self):
        td = _batch(torch.zeros(4, 1), torch.zeros(4, 1, dtype=torch.bool))
        td["next", "reward"] = torch.zeros(4, 2)
        with pytest.raises(RuntimeError, match=r"same shape.*\(4, 2\).*\(4, 1\)"):
            DensifyReward()(td)
