"""VecGymEnvTransform: an auto-reset env's rollout matches the plain (reset-by-rollout) one."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from tensordict import TensorDict

import rl.envs.transforms._vec_gym as vec_gym_module
from rl.core import Composite, Unbounded
from rl.envs import EnvBase, TransformedEnv, VecGymEnvTransform


class _Counter(EnvBase):
    """Counts the actions of 2 envs; terminates at ``limit``. With ``auto=True`` the
    done rows restart at once (as a gymnasium vector env): their observation is the
    reset one, the final one goes under ``"final"`` (unless ``write_final=False``)."""

    def __init__(self, limit=2.0, auto=False, write_final=True):
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(observation=Unbounded((2, 1)), shape=(2,))
        self.action_spec = Unbounded((2, 1))
        self.limit, self.auto, self.write_final = limit, auto, write_final
        self.count = torch.zeros(2, 1)

    def _reset(self, td):
        mask = None if td is None else td.get("_reset", None)
        self.count = torch.where(mask, 0.0, self.count) if mask is not None else torch.zeros(2, 1)
        return TensorDict(observation=self.count.clone(), batch_size=(2,))

    def _step(self, td):
        self.count = self.count + td["action"]
        done = self.count >= self.limit
        out = TensorDict(reward=self.count.clone(), done=done, terminated=done, batch_size=(2,))
        if self.auto:
            if self.write_final:
                out["final"] = TensorDict(observation=self.count.clone(), batch_size=(2,))
            self.count = torch.where(done, 0.0, self.count)
        out["observation"] = self.count.clone()
        return out

    def _set_seed(self, seed):
        pass


def _actions(steps):
    # env 0 terminates every 2 steps, env 1 every 4
    return [torch.tensor([[1.0], [0.5]]) for _ in range(steps)]


class TestVecGymEnvTransform:
    def test_rollout_matches_plain_env(self):
        auto = TransformedEnv(_Counter(auto=True), VecGymEnvTransform())
        plain = _Counter()
        out = auto.rollout(6, actions=_actions(6), break_when_any_done=False)
        ref = plain.rollout(6, actions=_actions(6), break_when_any_done=False)
        torch.testing.assert_close(out["next", "observation"], ref["next", "observation"])
        torch.testing.assert_close(out["observation"], ref["observation"])
        assert out["next", "observation"][0, :, 0].tolist() == [1, 2, 1, 2, 1, 2]
        assert out["observation"][0, :, 0].tolist() == [0, 1, 0, 1, 0, 1]
        assert "final" not in out["next"].keys()
        assert "final" not in auto.observation_spec.keys()

    def test_without_final_entry_fills_missing_value(self):
        env = TransformedEnv(_Counter(auto=True, write_final=False), VecGymEnvTransform())
        td = env.step(env.reset().set("action", torch.tensor([[2.0], [1.0]])))
        obs = td["next", "observation"][:, 0].tolist()
        assert math.isnan(obs[0]) and obs[1] == 1.0
        env = TransformedEnv(
            _Counter(auto=True, write_final=False), VecGymEnvTransform(missing_obs_value=-1.0)
        )
        td = env.step(env.reset().set("action", torch.tensor([[2.0], [1.0]])))
        assert td["next", "observation"][:, 0].tolist() == [-1.0, 1.0]

    def test_reset_mask_must_match_done(self):
        env = TransformedEnv(_Counter(auto=True), VecGymEnvTransform())
        td = env.step(env.reset().set("action", torch.tensor([[2.0], [1.0]])))
        root = env.step_mdp(td)
        with pytest.raises(RuntimeError, match="other than the last done flags"):
            env.reset(root.set("_reset", torch.tensor([[False], [True]])))
        # a full reset is always fine
        assert env.reset()["observation"][:, 0].tolist() == [0.0, 0.0]

    def test_native_autoreset_leaves_data(self):
        env = TransformedEnv(_Counter(auto=True), VecGymEnvTransform(native_autoreset=True))
        td = env.step(env.reset().set("action", torch.tensor([[2.0], [1.0]])))
        assert td["next", "observation"][:, 0].tolist() == [0.0, 1.0]

    def test_needs_a_parent(self):
        with pytest.raises(RuntimeError, match="cannot be executed without a parent"):
            VecGymEnvTransform()(TensorDict(observation=torch.zeros(1)))


def test_docstring_examples():
    result = doctest.testmod(vec_gym_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
