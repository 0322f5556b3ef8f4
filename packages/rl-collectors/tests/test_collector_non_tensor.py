"""A collector keeps an env's non-tensor entries (strings) and carries them across batches."""

from __future__ import annotations

import torch
from tensordict import NonTensorData

from rl.collectors import Collector
from rl.core import NonTensor
from rl.envs import PendulumEnv, StepCounter, Transform


class Tag(Transform):
    def _call(self, next_tensordict):
        next_tensordict["tag"] = f"step {int(next_tensordict.get('step_count').reshape(-1)[0])}"
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset.set("tag", NonTensorData("reset"))

    def transform_observation_spec(self, observation_spec):
        observation_spec["tag"] = NonTensor(shape=())
        return observation_spec


def test_non_tensor_entries_across_batches_and_resets():
    env = PendulumEnv().append_transform(StepCounter(max_steps=3)).append_transform(Tag())
    collector = Collector(env, None, frames_per_batch=4, total_frames=8)
    batches = list(collector)
    collector.shutdown()
    data = torch.cat(batches)
    # episodes of 3 steps: root "reset", "step 1", "step 2"; "next" one step ahead
    assert data["tag"].tolist() == ["reset", "step 1", "step 2"] * 2 + ["reset", "step 1"]
    assert data["next", "tag"].tolist() == ["step 1", "step 2", "step 3"] * 2 + [
        "step 1",
        "step 2",
    ]
    # the second batch starts where the first stopped (no reset in between)
    assert batches[1]["tag"][0] == batches[0]["next", "tag"][-1]


def _tag_env():
    return PendulumEnv().append_transform(StepCounter(max_steps=3)).append_transform(Tag())


def test_multi_sync_collector_sends_batches_with_strings():
    from rl.collectors import MultiSyncCollector

    collector = MultiSyncCollector(
        [_tag_env, _tag_env], None, frames_per_batch=8, total_frames=16, cat_results="stack"
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 2
    # each worker: episodes of 3 steps, 4 steps a batch, the second batch going on
    expected = [
        (["reset", "step 1", "step 2", "reset"], ["step 1", "step 2", "step 3", "step 1"]),
        (["step 1", "step 2", "reset", "step 1"], ["step 2", "step 3", "step 1", "step 2"]),
    ]
    for batch, (tags, nxt) in zip(batches, expected):
        assert batch.batch_size == torch.Size([2, 4])
        assert batch["tag"].tolist() == [tags, tags]
        assert batch["next", "tag"].tolist() == [nxt, nxt]
