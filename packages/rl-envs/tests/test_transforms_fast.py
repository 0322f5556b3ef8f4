"""The whole-trajectory rollout path of TransformedEnv gives the step-by-step result."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import pytest
import torch
from _engine_helpers import rollout_generic

from rl.envs import GymEnv, check_env_specs
from rl.envs.transforms import (
    CenterCrop,
    ClipTransform,
    Compose,
    DoubleToFloat,
    GrayScale,
    InitTracker,
    ObservationNorm,
    Resize,
    RewardClipping,
    RewardScaling,
    RewardSum,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
)


def _both(make_env, steps, seed=0, **kwargs):
    env = make_env()
    torch.manual_seed(seed)
    env.set_seed(seed)
    fast = env.rollout(steps, **kwargs)
    env2 = make_env()
    torch.manual_seed(seed)
    env2.set_seed(seed)
    td = env2.reset()
    slow = rollout_generic(
        env2,
        steps,
        td,
        policy=None,
        callback=None,
        break_when_any_done=kwargs.get("break_when_any_done", True),
        break_when_all_done=kwargs.get("break_when_all_done", False),
    )
    return env, fast, slow


def _bench_transforms():
    return Compose(StepCounter(), RewardSum(), DoubleToFloat(), ObservationNorm(loc=0.5, scale=2.0))


@pytest.mark.parametrize("num_envs", [1, 3])
def test_fast_path_equals_step_loop(num_envs):
    def make():
        return TransformedEnv(GymEnv("CartPole-v1", num_envs=num_envs), _bench_transforms())

    env, fast, slow = _both(make, 120, break_when_any_done=False)
    assert env._specs()[2], "the four benchmark transforms take the fast path"
    assert fast["next", "done"].sum() >= 1
    assert set(fast.keys(True, True)) == set(slow.keys(True, True))
    for key in slow.keys(True, True):
        torch.testing.assert_close(fast[key], slow[key], msg=lambda m, k=key: f"{k}: {m}")
    check_env_specs(env)


@pytest.mark.parametrize(
    "transform",
    [
        lambda: InitTracker(),
        lambda: RewardScaling(loc=1.0, scale=-2.0),
        lambda: RewardClipping(-0.5, 0.5),
        lambda: ClipTransform(in_keys=["observation"], low=-0.1, high=0.1),
        lambda: Compose(RewardScaling(0.0, 3.0), RewardSum(), StepCounter()),
    ],
)
def test_fast_path_other_transforms(transform):
    def make():
        return TransformedEnv(GymEnv("CartPole-v1"), transform())

    env, fast, slow = _both(make, 60, break_when_any_done=False)
    assert env._specs()[2]
    for key in slow.keys(True, True):
        torch.testing.assert_close(fast[key], slow[key])


def test_break_when_any_done_and_auto_reset_false():
    def make():
        return TransformedEnv(GymEnv("CartPole-v1"), _bench_transforms())

    _, fast, slow = _both(make, 500)
    assert fast.batch_size == slow.batch_size and bool(fast["next", "done"][-1])
    torch.testing.assert_close(fast["next", "episode_reward"], slow["next", "episode_reward"])
    # continuing from a given state: counts start from the tensordict's values
    env = make()
    td = env.reset()
    first = env.rollout(5, auto_reset=False, tensordict=td)
    td = first[-1]["next"].clone()
    second = env.rollout(5, auto_reset=False, tensordict=td, break_when_any_done=False)
    assert second["step_count"][0].item() == 5


def test_stateful_transform_uses_step_loop():
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=10))
    assert not env._specs()[2]
    r = env.rollout(50, break_when_any_done=False)
    assert int(r["next", "step_count"].max()) == 10


def test_fast_path_image_transforms():
    def make():
        return TransformedEnv(
            GymEnv("CartPole-v1", from_pixels=True, pixels_only=False),
            Compose(ToTensorImage(), Resize(32, 48), CenterCrop(24), GrayScale(), RewardSum()),
        )

    env, fast, slow = _both(make, 12, break_when_any_done=False)
    assert env._specs()[2]
    assert fast["next", "pixels"].shape == torch.Size([12, 1, 24, 24])
    for key in slow.keys(True, True):
        torch.testing.assert_close(fast[key], slow[key])
    env.close()
