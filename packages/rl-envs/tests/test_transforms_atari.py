"""EndOfLifeTransform: the end-of-life flag follows the lives counter of the gym env."""

from __future__ import annotations

import pytest
import torch

from rl.envs import GymEnv, GymWrapper, PendulumEnv, TransformedEnv, check_env_specs
from rl.envs.transforms import EndOfLifeTransform


@pytest.fixture
def make_env(lives_env_cls):
    """EndOfLifeTransform over conftest's LivesEnv (a life lost every 2 steps)."""

    def make(**kwargs):
        kwargs.setdefault("eol_attribute", "unwrapped.lives")
        return TransformedEnv(GymWrapper(lives_env_cls()), EndOfLifeTransform(**kwargs))

    return make


def test_flags_each_life_lost_and_the_game_end(make_env):
    env = make_env()
    env.set_seed(0)
    td = env.rollout(8, break_when_any_done=False)
    # a life lost at steps 2, 4 and 6 (the game ends at 6, then restarts with 3 lives)
    eol = td["next", "end-of-life"].squeeze(-1).tolist()
    assert eol == [False, True, False, True, False, True, False, True]
    assert td["next", "lives"].tolist() == [3, 2, 2, 1, 1, 0, 3, 2]
    assert td["lives"].tolist() == [3, 3, 2, 2, 1, 1, 3, 3]
    assert td["next", "done"].squeeze(-1).tolist() == [False] * 5 + [True, False, False]
    # the root carries the previous step's flag, and False after the reset at step 7
    root = td["end-of-life"].squeeze(-1).tolist()
    assert root == [False, False, True, False, True, False, False, False]


def test_specs_match_what_it_writes(make_env):
    env = make_env()
    spec = env.observation_spec
    assert spec["end-of-life"].shape == (1,) and spec["end-of-life"].dtype == torch.bool
    assert spec["lives"].shape == () and spec["lives"].dtype == torch.int64
    # eol is no done entry: it never resets the env
    assert "end-of-life" not in env.full_done_spec.keys()
    check_env_specs(env, seed=0, max_steps=6)


def test_custom_keys_and_attribute(make_env):
    env = make_env(eol_key="eol", lives_key=("game", "lives"), eol_attribute="unwrapped.lives")
    td = env.rollout(3, break_when_any_done=False)
    assert td["next", "eol"].squeeze(-1).tolist() == [False, True, False]
    assert td["next", "game", "lives"].tolist() == [3, 2, 2]


def test_register_keys_makes_gae_stop_at_a_life_lost():
    from rl.modules import ValueOperator
    from rl.objectives.value import GAE

    critic = ValueOperator(torch.nn.Linear(1, 1), in_keys=["observation"])
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    EndOfLifeTransform().register_keys(gae)
    assert gae.tensor_keys.done == "end-of-life"
    assert gae.tensor_keys.terminated == "end-of-life"


def test_keys_and_specs_as_torchrl(lives_env_cls):
    t = EndOfLifeTransform(
        eol_key="eol",
        lives_key=("game", "lives"),
        done_key="terminated",
        eol_attribute="unwrapped.lives",
    )
    assert t.in_keys == ["terminated"] and t.out_keys == ["eol", ("game", "lives")]
    assert t.in_keys_inv == [] and t.out_keys_inv == []
    assert "in_keys=['terminated']" in repr(t)
    env = TransformedEnv(GymWrapper(lives_env_cls()), t)
    # the flag's spec is a copy of the done entry's; lives: int64 of the batch shape
    assert env.observation_spec["eol"] == env.full_done_spec["terminated"]
    assert env.observation_spec["eol"] is not env.full_done_spec["terminated"]
    assert env.observation_spec["game", "lives"].dtype == torch.int64
    check_env_specs(env, seed=0, max_steps=4)


class _Lives:
    def __init__(self, env):
        self.env = env

    def lives(self):
        return self.env.left


class CountdownEnv(PendulumEnv):
    """A native env exposing ``unwrapped.ale.lives()``: loses a life every step."""

    def __init__(self):
        super().__init__()
        self.left = 3
        self.unwrapped = type("U", (), {"ale": _Lives(self)})()

    def _step(self, td):
        self.left -= 1
        return super()._step(td)


def test_a_non_gym_env_with_the_attribute_is_read_with_a_warning():
    env = TransformedEnv(CountdownEnv(), EndOfLifeTransform())
    with pytest.warns(UserWarning, match="CountdownEnv is not a gym env"):
        td = env.reset()
    assert td["lives"].item() == 3
    with pytest.warns(UserWarning):
        td = env.rollout(2)
    assert td["next", "lives"].tolist() == [2, 1]
    assert td["next", "end-of-life"][:, 0].tolist() == [True, True]


def test_errors_name_the_problem(lives_env_cls):
    with pytest.raises(RuntimeError, match="base env is PendulumEnv"):
        TransformedEnv(PendulumEnv(), EndOfLifeTransform()).reset()
    with pytest.raises(
        RuntimeError, match=r"no attribute path 'unwrapped.ale.lives' \(missing 'ale'\)"
    ):
        TransformedEnv(GymWrapper(lives_env_cls()), EndOfLifeTransform()).reset()
    with pytest.raises(RuntimeError, match="only"):
        EndOfLifeTransform()(env_free_td())
    with pytest.raises(ValueError, match="dotted attribute path"):
        EndOfLifeTransform(eol_attribute="")


def env_free_td():
    from tensordict import TensorDict

    return TensorDict({"done": torch.zeros(1, dtype=torch.bool)}, batch_size=[])


@pytest.mark.atari
class TestAtari:
    def test_breakout_lives(self):
        env = TransformedEnv(GymEnv("ALE/Breakout-v5"), EndOfLifeTransform())
        env.set_seed(0)
        torch.manual_seed(0)
        td = env.rollout(400, break_when_any_done=False)
        lives, before = td["next", "lives"], td["lives"]
        assert before[0] == 5
        expected = (lives < before) | td["next", "done"].squeeze(-1)
        assert torch.equal(td["next", "end-of-life"].squeeze(-1), expected)
        assert expected.any()  # random play loses a life within 400 steps

    def test_sync_vector_env_reads_each_sub_env(self):
        env = TransformedEnv(GymEnv("ALE/Breakout-v5", num_envs=2), EndOfLifeTransform())
        td = env.reset()
        assert td["lives"].tolist() == [5, 5]
        assert td["end-of-life"].shape == (2, 1)
