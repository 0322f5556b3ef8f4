import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rl.data import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StalenessAwareSampler,
    TensorDictReplayBuffer,
)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _storage(n: int, capacity: int = 100) -> LazyTensorStorage:
    s = LazyTensorStorage(capacity)
    s.set(slice(0, n), torch.arange(n))
    return s


class TestRandomSampler:
    def test_indices_within_the_stored_range(self):
        torch.manual_seed(0)
        index, info = RandomSampler().sample(_storage(7), 5000)
        assert info == {}
        assert index.dtype == torch.int64 and index.shape == (5000,)
        counts = torch.bincount(index, minlength=7)
        assert counts.shape == (7,) and counts.min() > 600  # expectation 714

    def test_empty_storage_raises(self):
        with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
            RandomSampler().sample(LazyTensorStorage(3), 2)


class TestSamplerWithoutReplacement:
    def test_each_item_once_per_epoch(self):
        torch.manual_seed(0)
        s, sampler = _storage(10), SamplerWithoutReplacement()
        batches = [sampler.sample(s, 4)[0] for _ in range(3)]
        assert [b.numel() for b in batches] == [4, 4, 2]
        assert sorted(torch.cat(batches).tolist()) == list(range(10))
        assert sampler.ran_out
        second = torch.cat([sampler.sample(s, 5)[0] for _ in range(2)])
        assert sorted(second.tolist()) == list(range(10))

    def test_drop_last(self):
        s, sampler = _storage(10), SamplerWithoutReplacement(drop_last=True)
        batches = [sampler.sample(s, 4)[0] for _ in range(2)]
        assert sampler.ran_out
        assert len(set(torch.cat(batches).tolist())) == 8
        with pytest.raises(
            ValueError, match=r"The batch size \(20\) is greater than the storage capacity \(10\)"
        ):
            sampler.sample(s, 20)

    def test_the_next_epoch_is_drawn_when_one_is_used_up(self):
        # as TorchRL: the items left are kept in ``_sample_list``, refilled at once
        s, sampler = _storage(10), SamplerWithoutReplacement(shuffle=False)
        assert sampler._sample_list is None
        assert sampler.sample(s, 6)[0].tolist() == [0, 1, 2, 3, 4, 5]
        assert sampler._sample_list.tolist() == [6, 7, 8, 9] and not sampler.ran_out
        assert sampler.sample(s, 6)[0].tolist() == [6, 7, 8, 9]
        assert sampler.ran_out and sampler._sample_list.tolist() == list(range(10))

    def test_drop_last_refills_when_a_batch_is_short(self):
        s, sampler = _storage(10), SamplerWithoutReplacement(drop_last=True, shuffle=False)
        assert sampler.sample(s, 4)[0].tolist() == [0, 1, 2, 3]
        assert sampler.sample(s, 4)[0].tolist() == [4, 5, 6, 7]
        assert sampler.ran_out
        assert sampler.sample(s, 4)[0].tolist() == [0, 1, 2, 3]

    def test_a_new_length_starts_a_new_epoch(self):
        s, sampler = _storage(6), SamplerWithoutReplacement(shuffle=False)
        assert sampler.sample(s, 2)[0].tolist() == [0, 1]
        s.set(slice(6, 8), torch.arange(6, 8))
        assert sampler.sample(s, 3)[0].tolist() == [0, 1, 2]
        assert sampler.len_storage == 8

    def test_state_dict_is_torchrl_s(self):
        s, sampler = _storage(5), SamplerWithoutReplacement(shuffle=False)
        sampler.sample(s, 2)
        state = sampler.state_dict()
        assert set(state) == {"len_storage", "_sample_list", "drop_last", "_ran_out"}
        assert state["len_storage"] == 5 and state["_sample_list"].tolist() == [2, 3, 4]
        other = SamplerWithoutReplacement()
        other.load_state_dict(state)
        state["_sample_list"].fill_(-1)  # the loaded sampler holds a copy
        assert other.sample(s, 3)[0].tolist() == [2, 3, 4]

    def test_no_shuffle_is_storage_order(self):
        s, sampler = _storage(5), SamplerWithoutReplacement(shuffle=False)
        assert sampler.sample(s, 3)[0].tolist() == [0, 1, 2]
        assert sampler.sample(s, 3)[0].tolist() == [3, 4]

    def test_next_epoch_sees_new_items(self):
        s, sampler = _storage(4), SamplerWithoutReplacement(shuffle=False)
        sampler.sample(s, 4)
        s.set(slice(4, 6), torch.arange(4, 6))
        assert sampler.sample(s, 6)[0].tolist() == list(range(6))

    def test_state_round_trip(self):
        s, sampler = _storage(10), SamplerWithoutReplacement()
        sampler.sample(s, 3)
        other = SamplerWithoutReplacement()
        other.load_state_dict(sampler.state_dict())
        assert other.sample(s, 7)[0].tolist() == sampler.sample(s, 7)[0].tolist()

    @settings(max_examples=25, deadline=None)
    @given(st.integers(1, 40), st.integers(1, 12), st.booleans())
    def test_epoch_is_a_partition(self, n, batch_size, drop_last):
        if drop_last and n < batch_size:
            return
        s, sampler = _storage(n), SamplerWithoutReplacement(drop_last=drop_last)
        seen = []
        while True:
            index, _ = sampler.sample(s, batch_size)
            seen += index.tolist()
            if sampler.ran_out:
                break
        expected = n - n % batch_size if drop_last else n
        assert len(seen) == expected == len(set(seen))


def _reference_probabilities(priorities, alpha, eps):
    p = (np.asarray(priorities, dtype=np.float64) + eps) ** alpha
    return p / p.sum()


class TestPrioritizedSampler:
    def _buffer(self, n, alpha=0.7, beta=0.5, eps=1e-8, dtype=torch.float32, capacity=64):
        sampler = PrioritizedSampler(capacity, alpha=alpha, beta=beta, eps=eps, dtype=dtype)
        rb = ReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler)
        rb.extend(torch.arange(n))
        return rb, sampler

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_sampling_frequencies_follow_priorities(self, dtype):
        torch.manual_seed(0)
        priorities = [0.5, 1.0, 2.0, 4.0, 0.1]
        rb, sampler = self._buffer(5, alpha=0.7, dtype=dtype)
        rb.update_priority(torch.arange(5), torch.tensor(priorities))
        n = 40_000
        index, _ = sampler.sample(rb.storage, n)
        freq = torch.bincount(index, minlength=5).double().numpy() / n
        expected = _reference_probabilities(priorities, 0.7, 1e-8)
        np.testing.assert_allclose(freq, expected, atol=0.01)

    def test_importance_weights_match_the_formula(self):
        torch.manual_seed(0)
        priorities = torch.tensor([0.5, 1.0, 2.0, 4.0, 0.1])
        alpha, beta, eps = 0.6, 0.4, 1e-3
        rb, sampler = self._buffer(5, alpha=alpha, beta=beta, eps=eps, dtype=torch.float64)
        rb.update_priority(torch.arange(5), priorities)
        index, info = sampler.sample(rb.storage, 256)
        probs = torch.as_tensor(_reference_probabilities(priorities.numpy(), alpha, eps))
        w = (5 * probs) ** -beta
        expected = (w / w.max())[index].float()
        torch.testing.assert_close(info["priority_weight"], expected)
        assert info["priority_weight"].dtype == torch.float32

    def test_new_items_get_the_max_priority_seen(self):
        rb, sampler = self._buffer(2, alpha=0.5, eps=0.0)
        assert sampler._sum_tree[torch.tensor([0, 1])].tolist() == [1.0, 1.0]
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([9.0, 0.25]))
        rb.extend(torch.tensor([7]))
        torch.testing.assert_close(
            sampler._sum_tree[torch.tensor([0, 1, 2])], torch.tensor([3.0, 0.5, 3.0])
        )
        torch.testing.assert_close(
            torch.tensor(sampler._min_tree.query(0, 3)), torch.tensor(0.5), check_dtype=False
        )

    def test_scalar_priority_and_int_index(self):
        rb, sampler = self._buffer(3, alpha=1.0, eps=0.0)
        rb.update_priority(1, 0.5)
        rb.update_priority(torch.tensor([0, 2]), 2.0)
        assert sampler._sum_tree[torch.tensor([0, 1, 2])].tolist() == [2.0, 0.5, 2.0]

    @pytest.mark.parametrize(
        "bad, match",
        [(float("nan"), "got nan"), (-1.0, "got -1.0"), (float("inf"), "got inf")],
    )
    def test_invalid_priorities_rejected(self, bad, match):
        rb, sampler = self._buffer(3)
        with pytest.raises(ValueError, match=f"finite and non-negative, {match}"):
            rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, bad]))
        assert sampler._sum_tree[torch.tensor([0, 1])].tolist() == pytest.approx([1.0, 1.0])

    def test_size_mismatch_and_range(self):
        rb, _ = self._buffer(3, capacity=8)
        with pytest.raises(ValueError, match="got 2 priorities for 3 indices"):
            rb.update_priority(torch.tensor([0, 1, 2]), torch.tensor([1.0, 2.0]))
        with pytest.raises(IndexError, match="index 8 is out of range for max_capacity=8"):
            rb.update_priority(8, 1.0)
        with pytest.raises(TypeError, match="index must hold integers"):
            rb.update_priority(torch.tensor([0.5]), 1.0)

    def test_negative_index_is_skipped(self):
        rb, sampler = self._buffer(2, alpha=1.0, eps=0.0)
        rb.update_priority(torch.tensor([-1, 1]), torch.tensor([5.0, 3.0]))
        assert sampler._sum_tree[torch.tensor([0, 1])].tolist() == [1.0, 3.0]

    def test_zero_priority_is_never_sampled(self):
        rb, sampler = self._buffer(3, alpha=1.0, eps=0.0)
        rb.update_priority(torch.arange(3), torch.tensor([0.0, 1.0, 0.0]))
        index, info = sampler.sample(rb.storage, 100)
        assert index.unique().tolist() == [1]
        torch.testing.assert_close(info["priority_weight"], torch.ones(100))

    def test_all_zero_priorities_raise(self):
        rb, sampler = self._buffer(2, alpha=1.0, eps=0.0)
        rb.update_priority(torch.arange(2), 0.0)
        with pytest.raises(RuntimeError, match="priorities of the 2 stored items sum to 0"):
            sampler.sample(rb.storage, 4)

    def test_alpha_zero_is_uniform(self):
        torch.manual_seed(0)
        rb, sampler = self._buffer(4, alpha=0.0)
        rb.update_priority(torch.arange(4), torch.tensor([100.0, 1.0, 0.01, 5.0]))
        index, info = sampler.sample(rb.storage, 20_000)
        freq = torch.bincount(index, minlength=4).double() / 20_000
        torch.testing.assert_close(
            freq, torch.full((4,), 0.25, dtype=torch.float64), atol=0.02, rtol=0
        )
        torch.testing.assert_close(info["priority_weight"], torch.ones(20_000))

    def test_empty_raises(self):
        sampler = PrioritizedSampler(4, 0.5, 0.5)
        with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
            sampler.sample(LazyTensorStorage(4), 2)

    def test_constructor_checks(self):
        with pytest.raises(ValueError, match="alpha must be non-negative, got -1"):
            PrioritizedSampler(4, -1, 0.5)
        with pytest.raises(ValueError, match="beta must be non-negative"):
            PrioritizedSampler(4, 0.5, math.nan)
        with pytest.raises(ValueError, match="max_capacity must be a positive int"):
            PrioritizedSampler(0, 0.5, 0.5)
        with pytest.raises(TypeError, match="dtype must be torch.float32 or torch.float64"):
            PrioritizedSampler(4, 0.5, 0.5, dtype=torch.float16)
        with pytest.raises(ValueError, match="more than the sampler's max_capacity=4"):
            ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(4, 0.5, 0.5))

    def test_state_round_trip_restores_priorities(self):
        rb, sampler = self._buffer(5, capacity=8)
        rb.update_priority(torch.arange(5), torch.tensor([3.0, 0.0, 1.0, 7.0, 2.0]))
        state = sampler.state_dict()
        other = PrioritizedSampler(8, alpha=0.7, beta=0.5)
        other.load_state_dict(state)
        everything = torch.arange(8)
        torch.testing.assert_close(other._sum_tree[everything], sampler._sum_tree[everything])
        torch.testing.assert_close(other._min_tree[everything], sampler._min_tree[everything])
        assert other._min_tree.query(0, 5) == sampler._min_tree.query(0, 5)
        # the raw largest priority, as TorchRL reports it (the trees hold (p + eps) ** alpha)
        assert other.default_priority == sampler.default_priority == pytest.approx(7.0)

    def test_empty_resets(self):
        rb, sampler = self._buffer(3)
        rb.update_priority(0, 10.0)
        rb.empty()
        assert len(rb) == 0 and sampler.default_priority == pytest.approx(1.0)
        assert sampler._sum_tree.query(0, 3) == 0.0

    @pytest.mark.gpu
    @requires_cuda
    def test_trees_follow_a_cuda_storage(self):
        sampler = PrioritizedSampler(16, 0.7, 0.5)
        rb = ReplayBuffer(storage=LazyTensorStorage(16, device="cuda"), sampler=sampler)
        rb.extend(torch.arange(8))
        rb.update_priority(torch.arange(8, device="cuda"), torch.rand(8, device="cuda"))
        data, info = rb.sample(32, return_info=True)
        assert sampler._device.type == "cuda"
        assert data.device.type == "cuda" and info["priority_weight"].device.type == "cuda"
        assert int(info["index"].max()) < 8


class TestReplacementArgument:
    """``Sampler(replacement=False)`` builds the declared without-replacement variant."""

    def test_random_sampler(self):
        assert type(RandomSampler(replacement=True)) is RandomSampler
        sampler = RandomSampler(replacement=False, drop_last=True, shuffle=False)
        assert type(sampler) is SamplerWithoutReplacement
        assert (sampler.drop_last, sampler.shuffle) == (True, False)
        storage = _storage(5)
        assert sampler.sample(storage, 2)[0].tolist() == [0, 1]  # storage order, no repeats

    def test_slice_sampler(self):
        sampler = SliceSampler(replacement=False, slice_len=5, traj_key="episode", drop_last=True)
        assert type(sampler) is SliceSamplerWithoutReplacement
        assert (sampler.slice_len, sampler.traj_key, sampler.drop_last) == (5, "episode", True)
        assert isinstance(sampler, SliceSampler) and isinstance(sampler, SamplerWithoutReplacement)
        # a subclass does not inherit its parent's variant
        prioritized = PrioritizedSliceSampler(max_capacity=10, alpha=0.5, beta=0.5, slice_len=5)
        assert type(prioritized) is PrioritizedSliceSampler

    def test_without_replacement_samplers_accept_it(self):
        assert type(SamplerWithoutReplacement(replacement=False)) is SamplerWithoutReplacement
        assert type(SliceSamplerWithoutReplacement(replacement=False, slice_len=2)) is (
            SliceSamplerWithoutReplacement
        )

    @pytest.mark.parametrize(
        "build",
        [
            lambda: PrioritizedSampler(10, 0.5, 0.5, replacement=False),
            lambda: PrioritizedSliceSampler(10, 0.5, 0.5, slice_len=2, replacement=False),
        ],
    )
    def test_no_variant_raises(self, build):
        with pytest.raises(TypeError, match="has no without-replacement variant"):
            build()


class TestStalenessAwareSampler:
    @staticmethod
    def _buffer(sampler, versions, storage=None):
        rb = TensorDictReplayBuffer(storage=storage or LazyTensorStorage(100), sampler=sampler)
        rb.extend(TensorDict({"policy_version": torch.as_tensor(versions)}, [len(versions)]))
        return rb

    def test_weights_follow_one_over_staleness_plus_one(self):
        # staleness 0 and 3: probabilities 1 : 1/4, i.e. 0.8 and 0.2
        sampler = StalenessAwareSampler()
        rb = self._buffer(sampler, [3, 0])
        sampler.consumer_version = 3
        torch.manual_seed(0)
        batch = rb.sample(20_000)
        fresh = (batch["policy_version"] == 3).float().mean().item()
        assert abs(fresh - 0.8) < 0.02
        torch.testing.assert_close(batch["staleness"], (3 - batch["policy_version"]).float())

    @pytest.mark.parametrize("storage", [LazyTensorStorage(100), ListStorage(100)])
    def test_hard_gate(self, storage):
        sampler = StalenessAwareSampler(max_staleness=1)
        rb = self._buffer(sampler, [0, 1, 2, 3], storage)
        sampler.consumer_version = 3
        assert set(rb.sample(200)["policy_version"].tolist()) == {2, 3}
        # fewer candidates than the batch: drawn without replacement otherwise
        sampler.max_staleness = 3
        assert sorted(rb.sample(4)["policy_version"].tolist()) == [0, 1, 2, 3]
        sampler.consumer_version = 10
        with pytest.raises(RuntimeError, match="All 4 stored items exceed max_staleness=3"):
            rb.sample(2)

    def test_custom_weights_state_and_errors(self):
        sampler = StalenessAwareSampler(staleness_weight_fn=lambda s: (s == 0).float())
        rb = self._buffer(sampler, [0, 1, 1])
        sampler.increment_consumer_version()
        assert sampler.consumer_version == 1
        assert rb.sample(10)["policy_version"].tolist() == [1] * 10
        other = StalenessAwareSampler()
        other.load_state_dict(sampler.state_dict())
        assert (other.consumer_version, other.max_staleness) == (1, -1)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), sampler=StalenessAwareSampler())
        rb.extend(TensorDict({"x": torch.zeros(2)}, [2]))
        with pytest.raises(KeyError, match="holds no 'policy_version' entry"):
            rb.sample(2)
