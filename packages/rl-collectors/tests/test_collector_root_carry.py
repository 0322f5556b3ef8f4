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


class NestedCounting(Counting):
    """Counting, with the counter under a nested key (the general carry path)."""

    def __call__(self, td):
        count = td.get(("memory", "count"), None)
        td["memory", "count"] = torch.ones(*td.batch_size, 1) if count is None else count + 1
        td["action"] = self.spec.zero()
        return td


def _carried_vs_continuous(make_env, policy_cls, key, frames_per_batch, steps):
    env = make_env()
    env.set_seed(0)
    n = max(env.batch_size.numel(), 1)
    collector = Collector(
        env,
        policy_cls(env.action_spec),
        frames_per_batch=frames_per_batch * n,
        total_frames=steps * n,
    )
    data = torch.cat(list(collector), dim=-1)
    collector.shutdown()
    ref_env = make_env()
    ref_env.set_seed(0)
    ref = ref_env.rollout(steps, policy_cls(ref_env.action_spec), break_when_any_done=False)
    for k in ref.keys(True, True):
        assert torch.equal(data[k], ref[k]), k
    return data[key]


def test_one_env_small_batches_carry_root_and_next_entries():
    """One unbatched env in 3-frame batches (the flat root built from entry dicts): every
    entry equals one continuous rollout's, policy-written root entries included."""
    counts = _carried_vs_continuous(lambda: GymEnv("Pendulum-v1"), Counting, "count", 3, 12)
    assert counts.squeeze(-1).tolist() == list(range(1, 13))


def test_nested_root_entries_carry_through_the_general_path():
    counts = _carried_vs_continuous(
        lambda: GymEnv("Pendulum-v1"), NestedCounting, ("memory", "count"), 3, 9
    )
    assert counts.squeeze(-1).tolist() == list(range(1, 10))


def test_carried_root_is_a_copy_of_the_batch():
    """Writing into a yielded batch in place does not change what the next batch starts
    from (the root is copied out of the batch's buffers)."""
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    collector = Collector(env, Counting(env.action_spec), frames_per_batch=4, total_frames=8)
    it = iter(collector)
    first = next(it)
    first["count"].fill_(-100.0)
    first["next", "observation"].fill_(1e6)
    second = next(it)
    collector.shutdown()
    assert second["count"].squeeze(-1).tolist() == [5.0, 6.0, 7.0, 8.0]
    assert bool((second["observation"].abs() <= 8.0).all())


def test_flat_root_is_built_for_plain_batches_only():
    """The entry-dict root is the general path's, key for key, on a plain batch; a batch
    with dim names or a nested entry takes the general path (None)."""
    from rl.collectors._single import _flat_last_root

    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    out = env.rollout(4, Counting(env.action_spec), break_when_any_done=False)
    nxt = out.get("next")
    carry = [k for k in nxt.keys(True, True) if k != "reward"]
    root = _flat_last_root(out, nxt, carry, 0)
    assert root is not None and root.batch_size == torch.Size([])
    general = out.exclude("next")[-1].clone()
    general.update(nxt.select(*carry)[-1].clone())
    assert list(root.keys()) == list(general.keys())
    assert (root == general).all()
    assert root["count"].data_ptr() != out["count"][-1].data_ptr()
    named = out.clone()
    named.refine_names("time")
    assert _flat_last_root(named, named.get("next"), carry, 0) is None
    envs = GymEnv("Pendulum-v1", num_envs=2)  # named env dims, which the root keeps
    envs.set_seed(0)
    collector = Collector(envs, Counting(envs.action_spec), frames_per_batch=6, total_frames=12)
    batch = collector.rollout()
    batch.refine_names("env", "time")
    root = collector._next_root(batch)
    collector.shutdown()
    assert root.names == ["env"] and root.batch_size == torch.Size([2])
    assert (root["count"] == batch["count"][:, -1]).all()
    nested = out.clone()
    nested["memory", "count"] = nested["count"]
    assert _flat_last_root(nested, nested.get("next"), carry, 0) is None
