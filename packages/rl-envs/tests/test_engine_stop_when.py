"""``rollout(stop_when=...)``: a rollout cut short after the step where it answers True."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule

from rl.envs import PendulumEnv


class _After:
    """Answers True from its ``n``-th call on (counts its calls)."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def _policy() -> TensorDictModule:
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


class TestStopWhen:
    @pytest.mark.parametrize("policy", [None, "module"], ids=["presampled", "policy"])
    @pytest.mark.parametrize("n", [1, 3, 5])
    def test_stops_after_the_step_that_answers_true(self, policy, n):
        torch.manual_seed(0)
        env = PendulumEnv()
        pol = None if policy is None else _policy()
        stop = _After(n)
        out = env.rollout(8, pol, stop_when=stop, break_when_any_done=False)
        assert out.batch_size == torch.Size([n])
        assert stop.calls == n  # asked once per step taken
        # the steps taken are those of a full rollout from the same state
        torch.manual_seed(0)
        ref = PendulumEnv().rollout(8, pol, break_when_any_done=False)
        torch.testing.assert_close(out, ref[:n])

    def test_never_true_runs_every_step(self):
        env = PendulumEnv()
        stop = _After(100)
        out = env.rollout(6, None, stop_when=stop, break_when_any_done=False)
        assert out.batch_size == torch.Size([6])
        assert stop.calls == 5  # not asked after the last step (nothing left to stop)
