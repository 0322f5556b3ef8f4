import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rl.data import LazyTensorStorage, MultiStep, TensorDictReplayBuffer


def _rollout(done: torch.Tensor, reward: torch.Tensor) -> TensorDict:
    """A [B, T] rollout: observation t, next observation t + 1 (per env)."""
    B, T = done.shape
    obs = torch.arange(T, dtype=torch.float32).expand(B, T).unsqueeze(-1)
    return TensorDict(
        {
            "observation": obs.clone(),
            "next": {
                "observation": obs + 1,
                "reward": reward.unsqueeze(-1),
                "done": done.unsqueeze(-1),
                "terminated": done.unsqueeze(-1).clone(),
            },
        },
        batch_size=[B, T],
    )


def _reference(done, reward, gamma, n):
    """Plain python loops over envs and steps."""
    B, T = done.shape
    ret = torch.zeros(B, T)
    steps = torch.zeros(B, T, dtype=torch.int64)
    last = torch.zeros(B, T, dtype=torch.int64)
    for b in range(B):
        for t in range(T):
            g, k = 0.0, 0
            while k < n and t + k < T:
                g += gamma**k * reward[b, t + k].item()
                k += 1
                if done[b, t + k - 1]:
                    break
            ret[b, t], steps[b, t], last[b, t] = g, k, t + k - 1
    return ret, steps, last


class TestMultiStep:
    def test_literal_values(self):
        done = torch.tensor([[False, False, True, False, False]])
        reward = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
        out = MultiStep(gamma=0.5, n_steps=2)(_rollout(done, reward))
        torch.testing.assert_close(
            out["next", "reward"].squeeze(-1), torch.tensor([[2.0, 3.5, 3.0, 6.5, 5.0]])
        )
        assert out["steps_to_next_obs"].tolist() == [[2, 2, 1, 2, 1]]
        assert out["next", "observation"].squeeze(-1).tolist() == [[2.0, 3.0, 3.0, 5.0, 5.0]]
        # done flags stay those of step t (as TorchRL's MultiStep leaves them)
        assert out["next", "done"].squeeze(-1).tolist() == [[False, False, True, False, False]]
        assert out["nonterminal"].tolist() == [[True, True, False, True, False]]
        torch.testing.assert_close(out["gamma"], torch.tensor([[0.25, 0.25, 0.5, 0.25, 0.5]]))
        torch.testing.assert_close(out["next", "original_reward"].squeeze(-1), reward)
        assert out["observation"].squeeze(-1).tolist() == [[0.0, 1.0, 2.0, 3.0, 4.0]]

    @settings(max_examples=30, deadline=None)
    @given(
        st.integers(1, 3),
        st.integers(1, 9),
        st.integers(1, 5),
        st.floats(0.1, 1.0),
        st.integers(0, 2**16),
    )
    def test_matches_reference_loop(self, B, T, n, gamma, seed):
        g = torch.Generator().manual_seed(seed)
        done = torch.rand(B, T, generator=g) < 0.3
        reward = torch.randn(B, T, generator=g)
        out = MultiStep(gamma=gamma, n_steps=n)(_rollout(done, reward))
        ret, steps, last = _reference(done, reward, gamma, n)
        torch.testing.assert_close(out["next", "reward"].squeeze(-1), ret)
        torch.testing.assert_close(out["steps_to_next_obs"], steps)
        torch.testing.assert_close(out["next", "observation"].squeeze(-1), (last + 1).float())
        torch.testing.assert_close(out["next", "terminated"].squeeze(-1), done)
        assert out["nonterminal"].tolist() == (steps != 1).tolist()

    def test_one_step_is_identity_on_rewards(self):
        done = torch.tensor([[False, True, False]])
        reward = torch.tensor([[1.0, 2.0, 3.0]])
        td = _rollout(done, reward)
        out = MultiStep(gamma=0.9, n_steps=1)(td.clone())
        torch.testing.assert_close(out["next", "reward"], td["next", "reward"])
        torch.testing.assert_close(out["next", "observation"], td["next", "observation"])

    def test_feeds_a_replay_buffer(self):
        done = torch.zeros(2, 6, dtype=torch.bool)
        td = MultiStep(gamma=0.99, n_steps=3)(_rollout(done, torch.ones(2, 6)))
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
        rb.extend(td.reshape(-1))
        assert len(rb) == 12
        assert {"steps_to_next_obs", "gamma"} <= set(rb.sample(4).keys())

    def test_errors(self):
        with pytest.raises(ValueError, match=r"gamma must be in \(0, 1\], got 1.5"):
            MultiStep(gamma=1.5, n_steps=2)
        with pytest.raises(ValueError, match="n_steps must be an int >= 1, got 0"):
            MultiStep(gamma=0.9, n_steps=0)
        with pytest.raises(KeyError, match=r"needs the key \('next', 'reward'\)"):
            MultiStep(0.9, 2)(TensorDict({("next", "done"): torch.zeros(3, 1)}, [3]))
        with pytest.raises(ValueError, match="reward_key must be a key under 'next', got 'reward'"):
            MultiStep(0.9, 2, reward_key="reward")
        with pytest.raises(ValueError, match="needs a batch with a time dimension"):
            MultiStep(0.9, 2)(TensorDict({}, []))

    def test_done_with_trailing_dims_is_per_agent(self):
        # done of shape [B, T, A]: each of the A agents is its own trajectory (the agent dim
        # joins the batch, time stays the time), as TorchRL's MultiStep does
        g = torch.Generator().manual_seed(3)
        B, T, A, n, gamma = 2, 7, 3, 3, 0.5
        done = torch.rand(B, T, A, generator=g) < 0.3
        reward = torch.randn(B, T, A, generator=g)
        obs = torch.arange(T, dtype=torch.float32)[:, None].expand(B, T, A)
        td = TensorDict(
            {
                "observation": obs.clone(),
                "next": {"observation": obs + 1, "reward": reward, "done": done},
            },
            batch_size=[B, T],
        )
        out = MultiStep(gamma=gamma, n_steps=n)(td)
        assert out.batch_size == (B, T)
        per_agent = lambda x: x.permute(0, 2, 1).reshape(B * A, T)  # noqa: E731
        ret, steps, last = _reference(per_agent(done), per_agent(reward), gamma, n)
        torch.testing.assert_close(per_agent(out["next", "reward"]), ret)
        torch.testing.assert_close(per_agent(out["steps_to_next_obs"]), steps)
        torch.testing.assert_close(per_agent(out["next", "observation"]), (last + 1).float())
        assert out["steps_to_next_obs"].shape == (B, T, A)

    def test_done_shape_incompatible_with_an_entry(self):
        # an action of shape [B, T, A] cannot take the batch [B, T, A, 1] of a done flag
        td = TensorDict(
            {
                "action": torch.zeros(2, 5, 3),
                "next": {
                    "reward": torch.zeros(2, 5, 3, 1),
                    "done": torch.zeros(2, 5, 3, 1, dtype=torch.bool),
                },
            },
            batch_size=[2, 5],
        )
        with pytest.raises(RuntimeError, match=r"compatible with the done's shape.*\(2, 5, 3, 1\)"):
            MultiStep(0.9, 2)(td)
