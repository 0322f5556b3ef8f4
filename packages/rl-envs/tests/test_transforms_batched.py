"""Transforms over batched envs: TransformedEnv(ParallelEnv), VecNorm shared by workers."""

from __future__ import annotations

import os
import pickle

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import cloudpickle  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rl.envs import GymEnv, ParallelEnv, PendulumEnv, SerialEnv, check_env_specs  # noqa: E402
from rl.envs.transforms import (  # noqa: E402
    Compose,
    ObservationNorm,
    RewardSum,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
    VecNorm,
)


def test_tutorial_vectorized_pixels():
    base_env = ParallelEnv(
        4,
        lambda: GymEnv("Pendulum-v1", frame_skip=3, from_pixels=True, pixels_only=False),
        mp_start_method="fork",
    )
    env = TransformedEnv(base_env, Compose(StepCounter(), ToTensorImage()))
    env.append_transform(ObservationNorm(in_keys=["pixels"], loc=2, scale=1))
    try:
        td = env.reset()
        assert td["pixels"].shape == torch.Size([4, 3, 500, 500])
        assert td["step_count"].shape == torch.Size([4, 1]) and not td["step_count"].any()
        assert float(td["pixels"].min()) >= 2.0
        r = env.rollout(2)
        assert r["next", "step_count"].squeeze(-1).tolist() == [[1, 2]] * 4
    finally:
        env.close()


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_transforms_over_batched_env(batched):
    kwargs = {"mp_start_method": "fork"} if batched is ParallelEnv else {}
    env = TransformedEnv(
        batched(3, PendulumEnv, **kwargs),
        Compose(StepCounter(max_steps=4), RewardSum(), ObservationNorm(loc=1.0, scale=2.0)),
    )
    try:
        check_env_specs(env)
        r = env.rollout(6, break_when_any_done=False)
        assert r.batch_size == torch.Size([3, 6])
        assert r["step_count"].squeeze(-1).tolist() == [[0, 1, 2, 3, 0, 1]] * 3
        torch.testing.assert_close(
            r["next", "episode_reward"][:, 3], r["next", "reward"][:, :4].sum(1)
        )
    finally:
        env.close()


def test_memmap_statistics_survive_pickling():
    # what a "spawn" worker receives: the env factory pickled with cloudpickle
    shared = VecNorm.build_td_for_shared_vecnorm(PendulumEnv(), keys=["observation"])
    env = TransformedEnv(
        PendulumEnv(), VecNorm(in_keys=["observation"], shared_td=shared, decay=1.0)
    )
    clone = pickle.loads(cloudpickle.dumps(env))
    assert clone.transform[0].stats is not shared
    clone.rollout(4)
    assert float(shared["observation_count"]) == 5.0  # seen through the memory-mapped files
    env.rollout(2)
    assert float(clone.transform[0].stats["observation_count"]) == 8.0


@pytest.mark.parametrize("start_method, memmap", [("fork", False), ("fork", True)])
def test_shared_between_parallel_workers(start_method, memmap):
    shared = VecNorm.build_td_for_shared_vecnorm(PendulumEnv(), keys=["observation"], memmap=memmap)
    env = ParallelEnv(
        2,
        lambda: TransformedEnv(
            PendulumEnv(),
            VecNorm(in_keys=["observation"], out_keys=["obs_norm"], shared_td=shared, decay=1.0),
        ),
        mp_start_method=start_method,
    )
    try:
        r = env.rollout(10)
    finally:
        env.close()
    assert r.batch_size == torch.Size([2, 10])
    # both workers updated the same statistics: 2 x (1 reset + 10 steps)
    assert float(shared["observation_count"]) == 22.0
    seen = torch.cat([r["observation"][:, 0], r["next", "observation"].reshape(-1, 3)])
    torch.testing.assert_close(shared["observation_sum"], seen.sum(0))
    torch.testing.assert_close(shared["observation_ssq"], (seen**2).sum(0))
