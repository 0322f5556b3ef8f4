"""What a Collector carries from one batch to the next: the same root a continuous
rollout would have (policy-written entries included), and its constructor signature."""

import inspect

import torch

from rl.collectors import Collector, MultiCollector, MultiSyncCollector
from rl.envs import GymEnv


class Counting:
    """Writes a zero action and a per-env step counter it reads back from the root."""

    def __init__(self, spec):
        self.spec = spec

    def __call__(self, td):
        count = td.get("count", None)
        td["count"] = torch.ones(*td.batch_size, 1) if count is None else count + 1
        td["action"] = self.spec.zero()
        return td


def test_policy_written_entries_carry_across_batches():
    env = GymEnv("Pendulum-v1", num_envs=2)  # 200-step episodes: no reset in 9 steps
    env.set_seed(0)
    collector = Collector(env, Counting(env.action_spec), frames_per_batch=6, total_frames=18)
    counts = torch.cat([b["count"] for b in collector], dim=1).squeeze(-1)
    collector.shutdown()
    assert counts.tolist() == [list(range(1, 10))] * 2
    env2 = GymEnv("Pendulum-v1", num_envs=2)
    env2.set_seed(0)
    ref = env2.rollout(9, Counting(env2.action_spec))
    assert torch.equal(ref["count"].squeeze(-1), counts)


def test_constructor_signatures_survive_the_dispatch():
    params = inspect.signature(Collector).parameters
    assert list(params)[:2] == ["create_env_fn", "policy"]
    assert {"frames_per_batch", "backend", "num_collectors", "trajs_per_batch"} <= set(params)
    assert "worker_timeout" in inspect.signature(MultiSyncCollector).parameters
    assert "frames_per_batch" in inspect.signature(MultiCollector).parameters
