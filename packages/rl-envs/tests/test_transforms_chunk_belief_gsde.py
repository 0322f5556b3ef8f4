"""ActionChunkTransform, gSDENoise and MeanActionSelector."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import ACTION_CHUNK_KEY
from rl.envs import (
    ActionChunkTransform,
    Compose,
    MeanActionSelector,
    PendulumEnv,
    TransformedEnv,
    check_env_specs,
    gSDENoise,
)


def _loop_chunks(action, done, horizon):
    """Chunks and pads of one row ``[T, A]`` by a plain loop over t and h."""
    length = action.shape[0]
    chunk = torch.empty(length, horizon, action.shape[1])
    pad = torch.empty(length, horizon, dtype=torch.bool)
    for t in range(length):
        last = t
        while last < length - 1 and not done[last]:
            last += 1
        for h in range(horizon):
            pad[t, h] = t + h > last
            chunk[t, h] = action[min(t + h, last)]
    return chunk, pad


class TestActionChunkTransform:
    @pytest.mark.parametrize("horizon", [1, 3, 7])
    @pytest.mark.parametrize("with_done", [False, True])
    def test_matches_a_plain_loop(self, horizon, with_done):
        torch.manual_seed(0)
        action = torch.randn(3, 6, 2)
        done = torch.rand(3, 6) < 0.3
        data = {"action": action}
        if with_done:
            data[("next", "done")] = done.unsqueeze(-1)
        out = ActionChunkTransform(horizon)(TensorDict(data, batch_size=[3, 6]))
        for row in range(3):
            row_done = done[row] if with_done else torch.zeros(6, dtype=torch.bool)
            chunk, pad = _loop_chunks(action[row], row_done, horizon)
            torch.testing.assert_close(out[ACTION_CHUNK_KEY][row], chunk)
            assert torch.equal(out["action_is_pad"][row], pad)

    def test_literal_values(self):
        out = ActionChunkTransform(3)(
            TensorDict(action=torch.arange(4.0).view(4, 1), batch_size=[4])
        )
        assert out[ACTION_CHUNK_KEY][..., 0].tolist() == [
            [0, 1, 2],
            [1, 2, 3],
            [2, 3, 3],
            [3, 3, 3],
        ]
        assert out["action_is_pad"].sum(-1).tolist() == [0, 0, 1, 2]

    def test_custom_keys_and_done_key_none(self):
        t = ActionChunkTransform(
            2, action_key=("d", "a"), chunk_key=("d", "c"), pad_key="p", done_key=None
        )
        done = torch.ones(1, 3, 1, dtype=torch.bool)
        td = TensorDict(
            {("d", "a"): torch.arange(3.0).view(1, 3, 1), ("next", "done"): done}, [1, 3]
        )
        out = t(td)
        assert out["d", "c"][0, :, :, 0].tolist() == [[0, 1], [1, 2], [2, 2]]
        assert out["p"].shape == (1, 3, 2)

    def test_errors(self):
        with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
            ActionChunkTransform(0)
        with pytest.raises(KeyError, match="'action'"):
            ActionChunkTransform(2)(TensorDict(other=torch.zeros(2, 3), batch_size=[2]))
        with pytest.raises(ValueError, match="immediately follow the time dim"):
            ActionChunkTransform(2, time_dim=0)(
                TensorDict(action=torch.zeros(2, 4, 3), batch_size=[2])
            )
        bad = TensorDict(
            {"action": torch.zeros(2, 4, 3), ("next", "done"): torch.zeros(2, 5, 1)}, [2]
        )
        with pytest.raises(ValueError, match=r"\('next', 'done'\) has shape \(2, 5, 1\)"):
            ActionChunkTransform(2)(bad)

    def test_env_path_is_a_no_op(self):
        env = TransformedEnv(PendulumEnv(), Compose(ActionChunkTransform(3)))
        check_env_specs(env)
        rollout = env.rollout(3)
        assert ACTION_CHUNK_KEY not in rollout.keys(True)
        assert rollout["action"].shape == (3, 1)


class TestgSDENoise:
    def test_random_noise_with_batch_shape(self):
        td = gSDENoise(state_dim=7, action_dim=5, shape=(2,))(TensorDict())
        assert td["_eps_gSDE"].shape == (2, 5, 7) and (td["_eps_gSDE"] != 0).all()

    def test_placeholder_without_dims(self):
        td = gSDENoise()(TensorDict())
        assert td["_eps_gSDE"].shape == (1,) and (td["_eps_gSDE"] == 0).all()

    def test_redrawn_at_each_reset(self):
        env = TransformedEnv(PendulumEnv(), gSDENoise(state_dim=3, action_dim=1))
        check_env_specs(env)
        first, second = env.reset()["_eps_gSDE"], env.reset()["_eps_gSDE"]
        assert first.shape == (1, 3) and not torch.equal(first, second)
        rollout = env.rollout(4)
        # kept for the whole episode
        assert (rollout["_eps_gSDE"] == rollout["_eps_gSDE"][:1]).all()


class TestMeanActionSelector:
    def test_forward_and_inverse(self):
        t = MeanActionSelector()
        out = t(TensorDict(observation=torch.tensor([[1.0, 2.0]]), batch_size=[1]))
        torch.testing.assert_close(out["observation", "mean"], torch.tensor([[1.0, 2.0]]))
        assert (
            out["observation", "var"].shape == (1, 2, 2) and (out["observation", "var"] == 0).all()
        )
        action = t.inv(TensorDict({("action", "mean"): torch.tensor([[0.5]])}, batch_size=[1]))
        torch.testing.assert_close(action["action"], torch.tensor([[0.5]]))

    def test_env_specs_and_step(self):
        env = TransformedEnv(PendulumEnv(), MeanActionSelector())
        check_env_specs(env)
        assert env.observation_spec["observation", "var"].shape == (3, 3)
        td = env.reset()
        td["action"] = TensorDict(mean=torch.tensor([2.0]))
        out = env.step(td)
        assert out["next", "observation", "mean"].shape == (3,)

    def test_missing_observation(self):
        with pytest.raises(KeyError, match="'observation'"):
            MeanActionSelector()(TensorDict(other=torch.zeros(2)))
