"""rl.objectives.llm.RayMCAdvantage on a local Ray instance: two writers sharing one named
actor complete one group between them; counters and queues live in the actor; the values are
MCAdvantage's; close() kills the actor this object made."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core.ray_runtime import processes_left
from rl.objectives.llm import MCAdvantage, RayMCAdvantage

ray = pytest.importorskip("ray")

# a bound that catches a hang: the actor's worker imports torch and rl
pytestmark = pytest.mark.timeout(300)


def traj(group, rewards):
    T = len(rewards)
    return TensorDict(
        {
            "group_id": torch.full((T,), group),
            "next": {
                "reward": torch.tensor(rewards, dtype=torch.float).reshape(T, 1),
                "done": torch.tensor([False] * (T - 1) + [True]).reshape(T, 1),
            },
        },
        batch_size=[T],
    )


class TestRayMCAdvantage:
    def test_writers_share_one_named_actor(self, shared_ray):
        kwargs = {
            "grpo_size": 2,
            "prompt_key": "group_id",
            "trajectory_return": "sum",
            "keep_return_bounds": (0.1, 0.9),
            "candidate_group_size": 3,
        }
        first = RayMCAdvantage(actor_name="rl-test-mc-advantage", **kwargs)
        second = RayMCAdvantage(actor_name="rl-test-mc-advantage", **kwargs)
        local = MCAdvantage(**kwargs)
        steps = [(first, traj(0, [0.0])), (second, traj(0, [0.0, 0.0])), (first, traj(1, [1.0]))]
        steps += [(second, traj(0, [0.0, 1.0])), (first, traj(1, [0.0]))]
        for writer, data in steps:
            remote, here = writer.inv(data), local.inv(data.clone())
            assert (remote is None) == (here is None)
            if here is not None:
                torch.testing.assert_close(remote["advantage"], here["advantage"])
                torch.testing.assert_close(remote["next", "reward"], here["next", "reward"])
        # group 0: failures from both writers, rescued by second's success; group 1 written
        assert first.get_stats() == local.get_stats()
        assert second.rescued_groups == 1 and first.written_groups == 2
        assert first.queued_groups == 0 and len(second.queues) == 0
        second.inv(traj(2, [0.0]))
        assert first.queued_trajectories == 1 and len(first.queues.values()[0]) == 1
        first.queues.clear()
        assert second.queued_groups == 0
        first.reset_stats()
        assert second.completed_trajectories == 0
        second.close()  # a named actor is shared: the writer that made it still uses it
        assert first.inv(traj(4, [1.0])) is None and first.queued_groups == 1
        first.close()

    def test_anonymous_actor_closed_and_errors(self, shared_ray):
        transform = RayMCAdvantage(grpo_size=2, prompt_key="group_id")
        assert transform.inv(traj(3, [1.0])) is None
        # the actor's error reaches the caller; the check comes first, the actor carries on
        incomplete = traj(0, [1.0]).apply(lambda x: x.logical_not() if x.dtype == torch.bool else x)
        with pytest.raises(RuntimeError, match="(?s)complete trajectories"):
            transform.inv(incomplete)
        out = transform.inv(traj(3, [3.0]))
        torch.testing.assert_close(
            out["advantage"].reshape(-1), torch.tensor([-0.7071, 0.7071]), atol=1e-4, rtol=0
        )
        assert transform.completed_trajectories == 2
        assert repr(transform) == "RayMCAdvantage(grpo_size=2, anonymous actor)"
        transform.close()
        assert not processes_left([transform.worker_pid])  # the actor's process is gone
        with pytest.raises(RuntimeError, match="the RayMCAdvantage was closed"):
            transform.inv(traj(3, [1.0]))
        with pytest.raises(ValueError, match="keep_return_bounds filters groups"):
            RayMCAdvantage(grpo_size=2, keep_return_bounds=(0.1, 0.9))
