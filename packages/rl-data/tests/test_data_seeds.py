"""The replay-buffer snippets of the seed documents (/work/shared/seeds), with ``rl.data`` names."""

import torch
from tensordict import TensorDict


def test_tutorial_python_objects():
    from rl.data import PrioritizedReplayBuffer, ReplayBuffer

    rb = ReplayBuffer(collate_fn=lambda x: x)
    rb.add(1)
    assert rb.sample(1) == [1]
    rb.extend([2, 3])
    sample = rb.sample(3)
    assert len(sample) == 3 and set(sample) <= {1, 2, 3}

    rb = PrioritizedReplayBuffer(alpha=0.7, beta=1.1, collate_fn=lambda x: x)
    rb.add(1)
    assert rb.sample(1) == [1]
    rb.update_priority(1, 0.5)


def test_tutorial_tensordicts_with_stack():
    from rl.data import ReplayBuffer

    collate_fn = torch.stack
    rb = ReplayBuffer(collate_fn=collate_fn)
    rb.add(TensorDict({"a": torch.randn(3)}, batch_size=[]))
    assert len(rb) == 1
    rb.extend(TensorDict({"a": torch.randn(2, 3)}, batch_size=[2]))
    assert len(rb) == 3
    sample = rb.sample(10)
    assert sample.batch_size == torch.Size([10]) and sample["a"].shape == (10, 3)
    sample = rb.sample(2).contiguous()
    assert sample.batch_size == torch.Size([2]) and list(sample.keys()) == ["a"]


def test_tutorial_tensordict_prioritized():
    torch.manual_seed(0)
    from rl.data import TensorDictPrioritizedReplayBuffer

    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=1.1, priority_key="td_error")
    rb.extend(TensorDict({"a": torch.randn(2, 3)}, batch_size=[2]))
    tensordict_sample = rb.sample(2).contiguous()
    assert {"_weight", "a", "index"} <= set(tensordict_sample.keys())
    assert tensordict_sample["_weight"].shape == (2,)
    assert tensordict_sample["index"].dtype == torch.int64
    tensordict_sample["td_error"] = torch.rand(2)
    rb.update_tensordict_priority(tensordict_sample)
    values = []
    for i, val in enumerate(rb._sampler._sum_tree):
        values.append(val)
        if i == len(rb):
            break
    expected = torch.full((2,), 1.0)
    index, td_error = tensordict_sample["index"], tensordict_sample["td_error"]
    expected[index] = (td_error + 1e-8) ** 0.7
    assert values[2] == 0.0
    torch.testing.assert_close(torch.tensor(values[:2]), expected)


def test_readme_ppo_buffer():
    from rl.data.replay_buffers import (
        LazyTensorStorage,
        SamplerWithoutReplacement,
        TensorDictReplayBuffer,
    )

    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        sampler=SamplerWithoutReplacement(),
        batch_size=50,
    )
    data = TensorDict({"observation": torch.randn(1000, 3)}, batch_size=[1000])
    for _epoch in range(2):
        buffer.extend(data)
        seen = [sample["index"] for sample in buffer]
        assert len(seen) == 20
        assert sorted(torch.cat(seen).tolist()) == list(range(1000))


def test_readme_memmap_prioritized_prefetch(tmp_path):
    # the README writes scratch_dir="/tmp/"; a per-test directory keeps runs independent
    from rl.data import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer

    device = torch.device("cpu")
    buffer_size = 10_000
    storage = LazyMemmapStorage(  # memory-mapped (physical) storage
        buffer_size, scratch_dir=str(tmp_path) + "/"
    )
    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        collate_fn=lambda x: x,
        pin_memory=device != torch.device("cpu"),
        prefetch=10,  # multi-threaded sampling
        storage=storage,
    )
    data = TensorDict(
        {"pixels": torch.rand(500, 3, 8, 8), "td_error": torch.rand(500)}, batch_size=[500]
    )
    buffer.extend(data)
    for _ in range(30):
        sample = buffer.sample(32)
        assert sample.batch_size == torch.Size([32])
        assert {"pixels", "index", "priority_weight"} <= set(sample.keys())
        sample["td_error"] = torch.rand(32)
        buffer.update_tensordict_priority(sample)
    assert (tmp_path / "pixels.memmap").exists()


def test_readme_offline_sampler_import():
    from rl.data.replay_buffers import SamplerWithoutReplacement

    sampler = SamplerWithoutReplacement(drop_last=True)
    assert sampler.drop_last and sampler.shuffle


def test_module_paths():
    import rl.data
    import rl.data.replay_buffers
    from rl.data.replay_buffers import samplers, storages, writers

    assert samplers.PrioritizedSampler is rl.data.PrioritizedSampler
    assert storages.LazyMemmapStorage is rl.data.LazyMemmapStorage
    assert writers.TensorDictMaxValueWriter is rl.data.TensorDictMaxValueWriter
    for name in rl.data.__all__:
        assert getattr(rl.data, name) is not None
    assert set(rl.data.replay_buffers.__all__) <= set(rl.data.__all__)
