"""Group keys ("agents", ...) keep their agent dimension across collector batches."""

from __future__ import annotations

import pytest
import torch

from rl.collectors import Collector

pytest.importorskip("vmas")


def _env():
    from rl.envs import VmasEnv

    return VmasEnv("navigation", num_envs=3, n_agents=2, max_steps=5, seed=0)


def test_group_batch_dims_survive_the_next_batch():
    env = _env()
    collector = Collector(env, None, frames_per_batch=3 * 4, total_frames=3 * 12)
    shapes = []
    for batch in collector:
        shapes.append(
            (
                tuple(batch.batch_size),
                tuple(batch["agents"].batch_size),
                batch["agents", "observation"].shape,
            )
        )
    collector.shutdown()
    assert len(shapes) == 3
    for batch_size, group_size, obs_shape in shapes:
        assert batch_size == (3, 4)
        assert group_size == (3, 4, 2)
        assert obs_shape[:3] == (3, 4, 2)


def test_group_batches_continue_the_trajectories():
    # max_steps=5 and 4 steps per batch: the second batch continues the episodes and
    # the step counts of the first batch's last step carry over
    env = _env()
    collector = Collector(env, None, frames_per_batch=3 * 4, total_frames=3 * 8)
    batches = [b.clone() for b in collector]
    collector.shutdown()
    first, second = batches
    torch.testing.assert_close(
        second["agents", "observation"][:, 0], first["next", "agents", "observation"][:, -1]
    )
    # the 5-step limit ends every episode at the first step of the second batch
    assert bool(second["next", "done"][:, 0].all())
