"""Consumed items: ReplayBuffer(consume_after_n_samples=...) and ConsumingSampler."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    ConsumingSampler,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
    TensorStorage,
)


class TestConsumption:
    @pytest.mark.parametrize("storage", [ListStorage(5), LazyTensorStorage(5)])
    def test_each_item_is_used_n_times(self, storage):
        torch.manual_seed(0)
        rb = ReplayBuffer(storage=storage, batch_size=3, consume_after_n_samples=1)
        rb.extend(
            torch.arange(5) if isinstance(storage, LazyTensorStorage) else list(torch.arange(5))
        )
        first, info = rb.sample(return_info=True)
        assert first.tolist() == info["index"].tolist() and len(set(first.tolist())) == 3
        assert len(rb) == 2
        second = rb.sample()
        assert sorted(first.tolist() + second.tolist()) == [0, 1, 2, 3, 4]  # the 2 left
        assert len(rb) == 0
        with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
            rb.sample()

    def test_twice(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=4, consume_after_n_samples=2)
        rb.extend(torch.arange(4))
        assert sorted(rb.sample().tolist()) == [0, 1, 2, 3] and len(rb) == 4
        assert sorted(rb.sample().tolist()) == [0, 1, 2, 3] and len(rb) == 0

    def test_writes_reuse_consumed_slots_first(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), consume_after_n_samples=1)
        rb.extend(torch.arange(8))  # full: the cursor is back at 0
        sampler = rb.sampler
        generator = torch.Generator().manual_seed(0)
        rb.set_rng(generator)
        consumed = rb.sample(2, return_info=True)[1]["index"].tolist()
        assert sampler._free_indices.tolist() == consumed
        index = rb.extend(torch.arange(100, 106))
        # the consumed slots, then the cursor's next positions without them
        rest = [p for p in range(8) if p not in consumed][:4]
        assert index.tolist() == consumed + rest
        assert rb.storage.get(index).tolist() == list(range(100, 106))
        assert rb.writer._cursor == rest[-1] + 1
        assert len(rb) == 8  # written slots are live again
        assert rb.add(torch.tensor(7)) == (rest[-1] + 1) % 8  # no consumed slot left

    def test_iteration_ends_when_everything_is_consumed(self):
        torch.manual_seed(0)
        rb = ReplayBuffer(storage=ListStorage(5), batch_size=2, sampler=ConsumingSampler())
        rb.extend([torch.tensor(i) for i in range(5)])
        seen = [x for batch in rb for x in batch.tolist()]
        assert sorted(seen) == [0, 1, 2, 3, 4] and len(rb) == 0

    def test_prefilled_storage_and_tensordicts(self):
        rb = ReplayBuffer(
            storage=TensorStorage(torch.arange(5)), batch_size=3, consume_after_n_samples=1
        )
        assert len(rb) == 5 and len(rb.sample()) == 3 and len(rb) == 2
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(5), consume_after_n_samples=1)
        rb.extend(TensorDict({"a": torch.arange(4)}, [4]))
        assert rb.sample(10)["index"].numel() == 4 and len(rb) == 0

    def test_state_dict_round_trip(self):
        torch.manual_seed(0)
        rb = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=2, consume_after_n_samples=1)
        rb.extend(torch.arange(5))
        consumed = rb.sample(return_info=True)[1]["index"]
        state = rb.state_dict()
        other = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=2, consume_after_n_samples=1)
        other.load_state_dict(state)
        state["_sampler"]["_live_mask"].fill_(True)  # the loaded sampler holds copies
        assert len(other) == 3
        assert other.extend(torch.arange(100, 102)).tolist() == consumed.tolist()

    def test_errors(self):
        for bad, error in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
            with pytest.raises(error, match="consume_after_n_samples must be a positive integer"):
                ReplayBuffer(consume_after_n_samples=bad)
        with pytest.raises(ValueError, match="Prefetching is not supported"):
            ReplayBuffer(consume_after_n_samples=1, prefetch=1)
        with pytest.raises(ValueError, match="Prefetching is not supported"):
            ReplayBuffer(sampler=ConsumingSampler(), prefetch=1)
        for sampler in (SamplerWithoutReplacement(), PrioritizedSampler(10, 1.0, 1.0)):
            with pytest.raises(ValueError, match="only supports the default RandomSampler"):
                ReplayBuffer(sampler=sampler, consume_after_n_samples=1)
        with pytest.raises(ValueError, match="conflicts with the given ConsumingSampler"):
            ReplayBuffer(sampler=ConsumingSampler(2), consume_after_n_samples=1)
        with pytest.raises(ValueError, match="1-dimensional storages, got ndim=2"):
            ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), sampler=ConsumingSampler())
        with pytest.raises(ValueError, match="max_sample_count must be a positive int"):
            ConsumingSampler(0)
