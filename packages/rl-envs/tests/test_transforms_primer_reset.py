"""``TensorDictPrimer(call_before_env_reset=True)``: the base env's ``_reset`` reads the primers.

Expected values from TorchRL 0.14.1 running the same env (a base env whose reset
observation is twice the ``"goal"`` it reads).
"""

import pytest
import torch
from tensordict import TensorDict

from rl.core import Composite, Unbounded
from rl.envs import Compose, EnvBase, StepCounter, TensorDictPrimer, TransformedEnv
from rl.envs.utils import check_env_specs


class _GoalEnv(EnvBase):
    """Reset observation = 2 * the "goal" found in the reset input (zeros without one)."""

    def __init__(self, copy_back: bool = True, batch_size=()):
        super().__init__(batch_size=batch_size)
        self.copy_back = copy_back
        bs = tuple(batch_size)
        self.observation_spec = Composite(obs=Unbounded(shape=(*bs, 2)), shape=bs)
        self.action_spec = Unbounded(shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.seen: list = []

    def _reset(self, td):
        goal = td.get("goal", None) if td is not None else None
        self.seen.append(None if goal is None else goal.clone())
        obs = torch.zeros(*self.batch_size, 2) if goal is None else goal * 2
        out = TensorDict(obs=obs, batch_size=self.batch_size)
        if self.copy_back and goal is not None:
            out["goal"] = goal
        return out

    def _step(self, td):
        return TensorDict(
            obs=td["obs"] + 1,
            reward=torch.zeros(*self.batch_size, 1),
            done=torch.zeros(*self.batch_size, 1, dtype=torch.bool),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


def _env(call_before: bool, copy_back: bool = True, batch_size=()):
    base = _GoalEnv(copy_back, batch_size)
    primer = TensorDictPrimer(
        goal=Unbounded(shape=(2,)), default_value=3.0, call_before_env_reset=call_before
    )
    return base, TransformedEnv(base, primer)


class TestPrimerBeforeReset:
    def test_base_env_reads_the_primer(self):
        base, env = _env(call_before=True)
        td = env.reset()
        torch.testing.assert_close(base.seen[-1], torch.full((2,), 3.0))
        torch.testing.assert_close(td["obs"], torch.full((2,), 6.0))  # TorchRL: [6., 6.]
        torch.testing.assert_close(td["goal"], torch.full((2,), 3.0))
        rollout = env.rollout(3)
        torch.testing.assert_close(rollout["obs"][0], torch.full((2,), 6.0))
        assert rollout["goal"].shape == (3, 2)
        check_env_specs(env)

    def test_default_writes_after_reset(self):
        base, env = _env(call_before=False)
        td = env.reset()
        assert base.seen[-1] is None
        torch.testing.assert_close(td["obs"], torch.zeros(2))  # TorchRL: [0., 0.]
        torch.testing.assert_close(td["goal"], torch.full((2,), 3.0))

    def test_full_reset_overrides_the_input(self):
        # a full reset writes fresh primers over the caller's value (TorchRL: obs 6, goal 3)
        base, env = _env(call_before=True)
        given = TensorDict(goal=torch.ones(2))
        td = env.reset(given)
        torch.testing.assert_close(base.seen[-1], torch.full((2,), 3.0))
        torch.testing.assert_close(td["obs"], torch.full((2,), 6.0))
        torch.testing.assert_close(td["goal"], torch.full((2,), 3.0))

    def test_value_carried_when_base_does_not_return_it(self):
        # TorchRL drops the entry here; the value the base env saw is kept instead
        base, env = _env(call_before=True, copy_back=False)
        td = env.reset()
        torch.testing.assert_close(td["obs"], torch.full((2,), 6.0))
        torch.testing.assert_close(td["goal"], torch.full((2,), 3.0))

    def test_partial_reset_keeps_the_other_entries(self):
        base, env = _env(call_before=True, batch_size=(3,))
        td = env.reset()
        td["goal"] = torch.full((3, 2), 7.0)
        td["_reset"] = torch.tensor([[True], [False], [True]])
        out = env.reset(td)
        # TorchRL: the base env saw goal [[3, 3], [7, 7], [3, 3]]
        torch.testing.assert_close(
            base.seen[-1], torch.tensor([[3.0, 3.0], [7.0, 7.0], [3.0, 3.0]])
        )
        torch.testing.assert_close(out["goal"], torch.tensor([[3.0, 3.0], [7.0, 7.0], [3.0, 3.0]]))
        torch.testing.assert_close(out["obs"], torch.full((3, 2), 6.0))

    def test_caller_input_not_edited_before_reset(self):
        base, env = _env(call_before=True)
        given = TensorDict(goal=torch.ones(2))
        seen_input = {}

        original = base._reset

        def spy(td):
            seen_input["is_given"] = td is given
            return original(td)

        base._reset = spy
        env.reset(given)
        assert seen_input["is_given"] is False

    @pytest.mark.parametrize("order", ["primer_first", "primer_last"])
    def test_inside_compose(self, order):
        primer = TensorDictPrimer(
            goal=Unbounded(shape=(2,)), default_value=-1.0, call_before_env_reset=True
        )
        transforms = [primer, StepCounter()] if order == "primer_first" else [StepCounter(), primer]
        base = _GoalEnv()
        env = TransformedEnv(base, Compose(*transforms))
        td = env.reset()
        torch.testing.assert_close(td["obs"], torch.full((2,), -2.0))
        assert int(td["step_count"]) == 0
        assert env.transform[0]._has_reset_preprocess or env.transform[1]._has_reset_preprocess
