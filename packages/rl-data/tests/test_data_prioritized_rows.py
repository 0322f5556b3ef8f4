"""The one-call prioritized path of TensorDict buffers (draw + gather + update) against
the general path: same batches, same priorities, same errors."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)
from rl.data.replay_buffers._td_buffers import _SAMPLED_KEYS
from rl.data.replay_buffers.storages import _rows, _tensor


def transitions(n: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "observation": obs[:, None].expand(n, 3).clone(),
            "action": obs.long()[:, None] * 10,
            "next": {
                "observation": obs[:, None] + 0.5,
                "done": (obs % 7 == 0)[:, None],
                "nested": {"info": obs.double()},
            },
        },
        batch_size=[n],
    )


def buffer(storage=None, seed: int = 0, **kwargs) -> TensorDictPrioritizedReplayBuffer:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        storage=storage if storage is not None else LazyTensorStorage(64),
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )
    rb.extend(transitions(40))
    rb.update_priority(torch.arange(40), torch.linspace(0.1, 4.0, 40))
    return rb


def stored_layout(n: int, contiguous: bool) -> TensorDict:
    """A preallocated storage TensorDict (with the "index" entry writers add); its 2-D
    leaves column-major when not ``contiguous``."""
    td = transitions(n)
    td["index"] = torch.zeros(n, dtype=torch.long)
    if not contiguous:
        td = td.apply(lambda t: t.T.contiguous().T if t.ndim == 2 else t)
    return td


def general_path(rb, batch_size: int) -> tuple[TensorDict, torch.Tensor, torch.Tensor]:
    """What the buffer's general path returns: sampler.sample, then the storage's gather."""
    index, info = rb.sampler.sample(rb.storage, batch_size)
    return rb.storage.get(index), index, info["priority_weight"]


class TestFusedSample:
    def test_same_batch_as_the_general_path(self):
        fast, slow = buffer(seed=3), buffer(seed=3)
        assert fast._rows_fast_path() is not None
        for _ in range(3):
            batch, info = fast.sample(32, return_info=True)
            data, index, weight = general_path(slow, 32)
            torch.testing.assert_close(batch["index"], index)
            torch.testing.assert_close(batch["priority_weight"], weight)
            assert batch["_weight"] is batch["priority_weight"]
            assert info["index"] is batch["index"]
            torch.testing.assert_close(info["priority_weight"], weight)
            for key in data.keys(True, True):
                torch.testing.assert_close(batch[key], data[key])
                assert batch[key].is_contiguous()
            assert batch.batch_size == torch.Size([32]) and batch["next"].batch_size == (32,)
            assert batch["next", "nested"].batch_size == (32,)
            assert batch.device == data.device

    def test_data_follows_writes(self):
        rb = buffer()
        rb.extend(transitions(40, start=100))  # wraps around: items 0..15 rewritten
        batch = rb.sample(200)
        index = batch["index"]
        # items 0..39 held 0..39; the second write filled 40..63, then wrapped to 0..15
        expected = torch.where(index < 16, index + 124, torch.where(index < 40, index, index + 60))
        expected = expected.float()
        torch.testing.assert_close(batch["observation"][:, 0], expected)
        torch.testing.assert_close(batch["next", "nested", "info"], expected.double())

    def test_stored_sampled_keys_are_not_read(self):
        # a storage first written with sampled batches holds "index" and the weights
        first = buffer().sample(16)
        rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(32))
        rb.extend(first)
        assert rb._rows_fast_path() is not None
        batch = rb.sample(64)
        assert sorted(batch.keys()) == sorted(first.keys())
        # the entries are the ones just drawn, not the stored ones
        assert (batch["index"] < 16).all() and (batch["priority_weight"] == 1.0).all()
        torch.testing.assert_close(batch["observation"], first["observation"][batch["index"]])

    def test_frequencies_follow_the_priorities(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(4), generator=torch.Generator()
        )
        rb.extend(transitions(4))
        rb.update_priority(torch.arange(4), torch.tensor([1.0, 3.0, 0.0, 4.0]))
        index = rb.sample(20_000)["index"]
        freq = torch.bincount(index, minlength=4).float() / index.numel()
        torch.testing.assert_close(freq, torch.tensor([0.125, 0.375, 0.0, 0.5]), atol=0.01, rtol=0)

    @pytest.mark.parametrize(
        "make",
        [
            lambda: LazyTensorStorage(64, ndim=1),
            lambda: TensorStorage(stored_layout(64, contiguous=False)),
            lambda: TensorStorage(stored_layout(64, contiguous=True)),
        ],
    )
    def test_other_storages_give_the_same_batches(self, make):
        fast, slow = buffer(make(), seed=1), buffer(make(), seed=1)
        contiguous = all(t.is_contiguous() for t in fast.storage._storage.values(True, True))
        assert (fast._rows_fast_path() is not None) == contiguous
        batch = fast.sample(8)
        data, index, weight = general_path(slow, 8)
        torch.testing.assert_close(batch["index"], index)
        torch.testing.assert_close(batch["observation"], data["observation"])

    def test_memmap_storage(self, tmp_path):
        fast = buffer(LazyMemmapStorage(64, scratch_dir=tmp_path / "a"), seed=2)
        slow = buffer(LazyMemmapStorage(64, scratch_dir=tmp_path / "b"), seed=2)
        assert fast._rows_fast_path() is not None
        batch = fast.sample(8)
        data, index, _ = general_path(slow, 8)
        torch.testing.assert_close(batch["index"], index)
        torch.testing.assert_close(batch["next", "observation"], data["next", "observation"])

    def test_memmap_storage_with_another_output_device(self, tmp_path):
        # batches moved to another device after the gather take the general path
        storage = LazyMemmapStorage(64, scratch_dir=tmp_path, device="meta")
        rb = buffer(storage)
        assert storage._row_plan() is None and rb._rows_fast_path() is None
        assert rb.sample(4)["observation"].device.type == "meta"

    def test_not_used_where_it_does_not_apply(self):
        strided = TensorStorage(
            TensorDict(
                {"obs": torch.zeros(8, 6)[:, ::2], "index": torch.zeros(8, dtype=torch.long)},
                batch_size=[8],
            )
        )
        rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=strided)
        assert rb._rows_fast_path() is None
        rb.extend(TensorDict({"obs": torch.ones(8, 3)}, batch_size=[8]))  # over the 8 given
        assert rb.sample(4)["obs"].sum() == 12
        collate = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(8), collate_fn=lambda x: x
        )
        collate.extend(transitions(4))
        assert collate._rows_fast_path() is None
        uniform = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        uniform.extend(transitions(4))
        assert uniform._rows_fast_path() is None
        multi = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(16, ndim=2)
        )
        multi.extend(transitions(8).reshape(2, 4))
        assert multi._rows_fast_path() is None and multi.sample(4)["index"].shape == (4, 2)

    def test_empty_and_zero_mass_errors(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, eps=0.0, storage=LazyTensorStorage(8)
        )
        rb.extend(transitions(2))
        rb.update_priority(torch.arange(2), torch.zeros(2))
        with pytest.raises(RuntimeError, match="the priorities of the 2 stored items sum to 0"):
            rb.sample(4)
        rb.empty()
        with pytest.raises(RuntimeError, match="empty"):
            rb.sample(4)

    def test_shared_prefilled_storage_reads_the_shared_memory(self):
        storage = TensorStorage(stored_layout(16, contiguous=True))
        storage._record_write(16, 16)
        rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=storage, shared=True)
        batch = rb.sample(32)
        assert rb.storage._storage["observation"].is_shared()
        torch.testing.assert_close(batch["observation"][:, 0], batch["index"].float())


class TestFusedUpdate:
    def test_tree_values(self):
        rb = buffer()
        sampler = rb.sampler
        index = torch.tensor([3, 9, 3])  # repeated: the last one wins
        priority = torch.tensor([2.0, 0.5, 1.5], requires_grad=True) * 1
        rb.update_priority(index, priority)
        leaves = torch.as_tensor(sampler._sum_tree[torch.tensor([3, 9])])
        torch.testing.assert_close(leaves, (torch.tensor([1.5, 0.5]) + sampler.eps) ** 0.7)
        assert sampler._min_tree[torch.tensor([3])] == leaves[0]
        torch.testing.assert_close(
            torch.as_tensor(sampler._sum_tree.query(0, 64)),
            torch.as_tensor(sampler._sum_tree[torch.arange(64)]).sum(),
        )

    def test_same_trees_as_the_general_path(self):
        fast, slow = buffer(), buffer()
        index = torch.randint(0, 40, (50,))
        priority = torch.rand(50) * 3
        fast.update_priority(index, priority)
        # non-contiguous inputs go through the general path
        slow.update_priority(index.repeat_interleave(2)[::2], priority.repeat_interleave(2)[::2])
        everything = torch.arange(64)
        for tree in ("_sum_tree", "_min_tree"):
            torch.testing.assert_close(
                torch.as_tensor(getattr(fast.sampler, tree)[everything]),
                torch.as_tensor(getattr(slow.sampler, tree)[everything]),
            )
        assert fast.sampler.default_priority == slow.sampler.default_priority

    def test_update_with_the_sampled_index(self):
        rb = buffer()
        batch = rb.sample(8)
        index = batch["index"]
        index[0] = 39  # edited in place after sampling: the update sees the edit
        rb.update_priority(index, torch.full((8,), 2.0))
        assert rb.sampler._sum_tree[torch.tensor([39])] == pytest.approx((2.0 + 1e-8) ** 0.7)
        with pytest.raises(ValueError, match="got 3 priorities for 8 indices"):
            rb.update_priority(index, torch.ones(3))
        rb.update_priority(index, torch.full((8,), 3.0, dtype=torch.float64))
        assert rb.sampler._sum_tree[torch.tensor([39])] == pytest.approx(3.0**0.7)
        batch["td_error"] = torch.full((8,), 5.0)
        rb.update_tensordict_priority(batch)
        assert rb.sampler.default_priority == 5.0

    def test_errors_leave_the_trees_unchanged(self):
        rb = buffer()
        before = torch.as_tensor(rb.sampler._sum_tree[torch.arange(64)]).clone()
        with pytest.raises(IndexError, match="index 64 is out of range for max_capacity=64"):
            rb.update_priority(torch.tensor([1, 64]), torch.tensor([1.0, 1.0]))
        with pytest.raises(ValueError, match="priorities must be finite and non-negative, got nan"):
            rb.update_priority(torch.tensor([1, 2]), torch.tensor([1.0, float("nan")]))
        with pytest.raises(ValueError, match="got 3 priorities for 2 indices"):
            rb.update_priority(torch.tensor([1, 2]), torch.tensor([1.0, 1.0, 1.0]))
        torch.testing.assert_close(torch.as_tensor(rb.sampler._sum_tree[torch.arange(64)]), before)

    def test_dropped_items_are_skipped(self):
        rb = buffer()
        rb.update_priority(torch.tensor([-1, 5]), torch.tensor([9.0, 2.0]))
        assert rb.sampler._sum_tree[torch.tensor([5])] == pytest.approx((2.0 + 1e-8) ** 0.7)
        assert rb.sampler.default_priority == 4.0  # the -1 entry's 9.0 is not counted

    def test_max_priority_within_buffer(self):
        sampler = PrioritizedSampler(8, alpha=1.0, beta=1.0, max_priority_within_buffer=True)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler)
        rb.extend(transitions(4))
        rb.update_priority(torch.arange(4), torch.tensor([1.0, 5.0, 2.0, 1.0]))
        assert sampler.default_priority == 5.0
        rb.update_priority(torch.tensor([1]), torch.tensor([0.5]))
        assert sampler.default_priority == pytest.approx(2.0)


class TestFusedUpdateWithSampledIndex:
    """``update_priority(batch["index"], ...)``: CPU tensors go straight to rl-cpp's
    in-place update."""

    def test_trees_match_a_plain_loop_over_the_sampled_updates(self, monkeypatch):
        from rl.data.replay_buffers.samplers import _prioritized

        rb = buffer(seed=1)
        calls = []
        compiled = _prioritized.prioritized_update_at
        monkeypatch.setattr(
            _prioritized,
            "prioritized_update_at",
            lambda *args: calls.append(1) or compiled(*args),
        )
        eps, alpha = rb.sampler.eps, rb.sampler.alpha
        # the reference: the leaves written one by one in float64, the last write wins
        leaves = torch.zeros(64, dtype=torch.float64)
        leaves[:40] = (torch.linspace(0.1, 4.0, 40).double() + eps) ** alpha
        largest = 4.0
        for _ in range(3):
            index = rb.sample(16)["index"]
            priority = torch.rand(16) * 4
            rb.update_priority(index, priority)
            for i, p in zip(index.tolist(), priority.double().tolist()):
                leaves[i] = (p + eps) ** alpha
            largest = max(largest, float(priority.max()))
        assert len(calls) == 3  # every update took the address path
        stored = torch.as_tensor(rb.sampler._sum_tree[torch.arange(64)]).double()
        torch.testing.assert_close(stored, leaves, rtol=1e-6, atol=0)
        minimum = torch.as_tensor(rb.sampler._min_tree[torch.arange(40)]).double()
        torch.testing.assert_close(minimum, leaves[:40], rtol=1e-6, atol=0)
        assert rb.sampler._sum_tree.query(0, 64) == pytest.approx(float(leaves.sum()), rel=1e-5)
        assert rb.sampler._min_tree.query(0, 40) == pytest.approx(float(leaves[:40].min()))
        assert rb.sampler.default_priority == pytest.approx(largest)

    def test_largest_priority_is_tracked(self):
        rb = buffer()
        index = rb.sample(4)["index"]
        rb.update_priority(index, torch.tensor([1.0, 7.5, 2.0, 0.5]))
        assert rb.sampler.default_priority == 7.5
        index = rb.sample(4)["index"]
        rb.update_priority(index, torch.full((4,), 0.25))
        assert rb.sampler.default_priority == 7.5  # the largest seen, not the last

    def test_bad_priority_leaves_the_trees_unchanged(self):
        rb = buffer()
        index = rb.sample(4)["index"]
        before = torch.as_tensor(rb.sampler._sum_tree[torch.arange(64)]).clone()
        with pytest.raises(ValueError, match="priorities must be finite and non-negative, got inf"):
            rb.update_priority(index, torch.tensor([1.0, float("inf"), 1.0, 1.0]))
        torch.testing.assert_close(torch.as_tensor(rb.sampler._sum_tree[torch.arange(64)]), before)

    def test_max_priority_within_buffer(self):
        sampler = PrioritizedSampler(8, alpha=1.0, beta=1.0, max_priority_within_buffer=True)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler, batch_size=64)
        rb.extend(transitions(4))
        index = rb.sample()["index"]
        rb.update_priority(index, torch.full((64,), 3.0))
        assert sampler.default_priority == 3.0
        index = rb.sample()["index"]
        # every stored item drawn gets 0.5: the largest stored priority drops with them
        rb.update_priority(index, torch.full((64,), 0.5))
        stored = torch.as_tensor(sampler._sum_tree[torch.arange(4)])
        assert sampler.default_priority == pytest.approx(float(stored.max()))

    def test_sampler_pickles_after_a_fused_sample(self):
        rb = buffer()
        rb.sample(8)
        assert rb.sampler._fused is not None
        copy = pickle.loads(pickle.dumps(rb.sampler))
        assert copy._fused is None
        everything = torch.arange(64)
        torch.testing.assert_close(
            torch.as_tensor(copy._sum_tree[everything]),
            torch.as_tensor(rb.sampler._sum_tree[everything]),
        )
        # the copy updates its own trees through the compiled update
        copy.update_priority(torch.tensor([2, 5]), torch.tensor([9.0, 0.0]))
        assert copy._sum_tree[2] == pytest.approx((9.0 + 1e-8) ** 0.7)
        assert rb.sampler._sum_tree[2] != copy._sum_tree[2]

    def test_storage_copy_reads_and_writes_its_own_tables(self):
        rb = buffer()
        rb.sample(8)  # the storage now holds compiled gathers over its tables
        storage = copy.deepcopy(rb.storage)
        storage._storage["observation"][0] = -1.0
        batch = storage._gather(torch.tensor([0, 1]))
        assert batch["observation"][0, 0] == -1.0 and batch["observation"][1, 0] == 1.0
        assert rb.storage._storage["observation"][0, 0] == 0.0  # the original is untouched
        # the one-call gather of the copy reads the copy's tables too
        plan = storage._row_plan(_SAMPLED_KEYS)
        rows = plan.gather(torch.tensor([0]))
        assert rows[plan.root.keys.index("observation")][0, 0] == -1.0
        again = pickle.loads(pickle.dumps(storage))
        assert again._gather(torch.tensor([0]))["observation"][0, 0] == -1.0


class TestBatchConstruction:
    def test_direct_construction_matches_new_unsafe(self):
        leaf = torch.zeros(4, 2)
        size = torch.Size([4])
        for device in (None, torch.device("cpu")):
            got = _rows._make_td({"a": leaf}, size, device)
            want = TensorDict._new_unsafe({"a": leaf}, batch_size=size, device=device, nested=False)
            assert type(got) is TensorDict and got.__dict__.keys() == want.__dict__.keys()
            assert got.batch_size == want.batch_size and got.device == want.device
            assert got["a"] is leaf and got.names == want.names
            got["b"] = torch.ones(4)  # a regular, writable TensorDict
            assert sorted(got.keys()) == ["a", "b"]
        # this tensordict's layout is the one the direct construction writes
        assert _rows._make_td is _rows._td_direct


class TestLargeTables:
    """Large CPU tables are allocated through numpy, which asks for huge pages."""

    def test_large_tables_are_zeros_of_the_right_dtype(self):
        storage = LazyTensorStorage(300_000)
        data = TensorDict(
            {
                "obs": torch.ones(2, 4),
                "flag": torch.ones(2, 1, dtype=torch.bool),
                "half": torch.ones(2, 4, dtype=torch.bfloat16),  # numpy has no bfloat16
            },
            batch_size=[2],
        )
        storage.set(torch.arange(2), data)
        stored = storage._storage
        assert stored["obs"].dtype == torch.float32 and stored["obs"].shape == (300_000, 4)
        assert stored["flag"].dtype == torch.bool and stored["half"].dtype == torch.bfloat16
        assert stored["obs"][2:].abs().sum() == 0 and not stored["flag"][2:].any()
        torch.testing.assert_close(storage.get(torch.tensor([1]))["obs"], torch.ones(1, 4))

    def test_allocation_helper(self):
        big = _tensor._zeros((_tensor._HUGE_PAGE_BYTES // 4, 1), torch.float32, torch.device("cpu"))
        assert big.dtype == torch.float32 and not big.any()
        small = _tensor._zeros((10, 3), torch.int64, torch.device("cpu"))
        assert small.dtype == torch.int64 and small.shape == (10, 3) and not small.any()
        half = _tensor._zeros((_tensor._HUGE_PAGE_BYTES, 1), torch.bfloat16, torch.device("cpu"))
        assert half.dtype == torch.bfloat16 and not half.any()


class TestRepeatedDraws:
    """After a one-call draw, ``sample()`` repeats it directly while nothing it depends
    on changed; any change sends it through the full checks again."""

    def test_repeated_draws_match_the_general_path(self):
        fast, slow = buffer(seed=4), buffer(seed=4)
        for k in range(4):
            batch, info = fast.sample(16, return_info=True)
            if k:
                assert fast._fused_draw is not None
            data, index, weight = general_path(slow, 16)
            torch.testing.assert_close(batch["index"], index)
            torch.testing.assert_close(info["priority_weight"], weight)
            torch.testing.assert_close(batch["observation"], data["observation"])

    def test_batch_size_change(self):
        rb = buffer()
        rb.sample(8)
        assert rb.sample(5).batch_size == (5,) and rb.sample(8).batch_size == (8,)

    def test_transform_appended_later_applies(self):
        rb = buffer()
        rb.sample(8)
        rb.append_transform(lambda td: td.set("seen", torch.ones(td.shape)))
        assert (rb.sample(8)["seen"] == 1).all()
        assert rb._fused_draw is None

    def test_new_trees_are_used(self):
        rb = buffer()
        rb.sample(8)
        state = rb.sampler.state_dict()
        state["sum"] = torch.zeros_like(state["sum"])
        state["sum"][7] = 1.0
        state["min"] = torch.full_like(state["min"], float("inf"))
        state["min"][7] = 1.0
        rb.sampler.load_state_dict(state)  # new trees: only item 7 has mass
        assert (rb.sample(8)["index"] == 7).all()

    def test_emptied_buffer_raises(self):
        rb = buffer()
        rb.sample(8)
        rb.empty()
        with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
            rb.sample(8)

    def test_subclass_with_its_own_sample_step_keeps_it(self):
        class Marked(TensorDictPrioritizedReplayBuffer):
            def _sample(self, batch_size):
                data, info = super()._sample(batch_size)
                data["marked"] = torch.ones(data.shape)
                return data, info

        rb = Marked(alpha=0.7, beta=0.5, storage=LazyTensorStorage(64))
        rb.extend(transitions(40))
        for _ in range(3):
            assert "marked" in rb.sample(8).keys()
        assert rb._fused_draw is None
