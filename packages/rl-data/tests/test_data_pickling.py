"""Replay buffers pickle and deep-copy, as in TorchRL 0.14: the copy samples what the
original samples and is written to on its own."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


def items(n: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict({"obs": obs[:, None].expand(n, 2).clone(), "r": obs}, batch_size=[n])


def make(kind: str, tmp_path) -> ReplayBuffer:
    g = torch.Generator().manual_seed(0)
    prio = {"alpha": 0.7, "beta": 0.5}
    if kind == "list":
        return ReplayBuffer(storage=ListStorage(16), generator=g)
    if kind == "tensor":
        return ReplayBuffer(storage=LazyTensorStorage(16), generator=g)
    if kind == "prioritized":
        return PrioritizedReplayBuffer(**prio, storage=LazyTensorStorage(16), generator=g)
    if kind == "td":
        return TensorDictReplayBuffer(storage=LazyTensorStorage(16), generator=g)
    if kind == "td_prioritized":
        return TensorDictPrioritizedReplayBuffer(**prio, storage=LazyTensorStorage(16), generator=g)
    if kind == "td_prefetch":
        return TensorDictReplayBuffer(storage=LazyTensorStorage(16), generator=g, prefetch=2)
    if kind == "td_memmap":
        storage = LazyMemmapStorage(16, scratch_dir=tmp_path / "memmap")
        return TensorDictReplayBuffer(storage=storage, generator=g)
    raise AssertionError(kind)


def fill(rb: ReplayBuffer, kind: str, n: int, start: int = 0) -> None:
    if kind == "list":
        rb.extend(list(range(start, start + n)))
    elif kind.startswith("td"):
        rb.extend(items(n, start))
    else:
        rb.extend(torch.arange(start, start + n, dtype=torch.float32))


def contents(rb: ReplayBuffer):
    data = rb.storage.get(torch.arange(len(rb)))
    if isinstance(data, list):
        return torch.tensor(data, dtype=torch.float32)
    return data["obs"].clone() if isinstance(data, TensorDict) else data.clone()


def equal(a, b) -> bool:
    if isinstance(a, list):
        return a == b
    if isinstance(a, TensorDict):
        return (a == b).all()
    return torch.equal(a, b)


KINDS = ["list", "tensor", "prioritized", "td", "td_prioritized", "td_prefetch", "td_memmap"]
COPIES = {"pickle": lambda rb: pickle.loads(pickle.dumps(rb)), "deepcopy": copy.deepcopy}


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("kind", KINDS)
def test_the_copy_samples_the_same_data_and_is_written_alone(kind, how, tmp_path):
    rb = make(kind, tmp_path)
    fill(rb, kind, 10)
    if "prioritized" in kind:
        rb.update_priority(torch.arange(10), torch.linspace(0.5, 5.0, 10))
    rb.sample(4)  # the fused draw's caches, the prefetch threads and queue exist now
    other = COPIES[how](rb)
    assert other._lock is not rb._lock and other._futures_lock is not rb._futures_lock
    # same data, same generator state: the same batches (a prefetched one included)
    for _ in range(3):
        mine, info = rb.sample(4, return_info=True)
        theirs, other_info = other.sample(4, return_info=True)
        assert equal(mine, theirs)
        torch.testing.assert_close(info["index"], other_info["index"])
    before = contents(rb)
    if "prioritized" in kind:
        tree = torch.as_tensor(rb.sampler._sum_tree[torch.arange(16)]).clone()
    # writing to the copy (new items, overwritten items, priorities) leaves rb alone
    fill(other, kind, 10, start=100)
    if "prioritized" in kind:
        other.update_priority(torch.arange(4), torch.full((4,), 9.0))
        assert rb.sampler.default_priority == 5.0
        torch.testing.assert_close(torch.as_tensor(rb.sampler._sum_tree[torch.arange(16)]), tree)
    assert len(other) == 16 and len(rb) == 10
    if kind == "td_memmap" and how == "pickle":
        # a pickled memmap storage refers to its files (for processes sharing them, as
        # tensordict's MemoryMappedTensor): the copy writes where the original reads
        assert torch.equal(contents(rb)[:4], contents(other)[:4])
        return
    assert torch.equal(contents(rb), before)
    assert not torch.equal(contents(other)[:4], before[:4])  # overwritten in the copy only
    fill(rb, kind, 1, start=50)
    assert len(rb) == 11


def test_a_pickled_generator_is_shared_by_the_copy_and_its_sampler():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        storage=LazyTensorStorage(16),
        generator=torch.Generator().manual_seed(3),
    )
    rb.extend(items(8))
    other = pickle.loads(pickle.dumps(rb))
    assert other._rng is other.sampler._rng and other._rng is not rb._rng
    other.set_rng(torch.Generator().manual_seed(3))
    rb.set_rng(torch.Generator().manual_seed(3))
    assert (rb.sample(5) == other.sample(5)).all()


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_memmap_buffer_copied_before_its_first_write_gets_its_own_files(how):
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(8))  # a temporary directory
    other = COPIES[how](rb)
    assert other.storage.scratch_dir != rb.storage.scratch_dir
    other.extend(items(3))
    rb.extend(items(2, start=100))
    torch.testing.assert_close(contents(other)[:, 0], torch.arange(3.0))
    torch.testing.assert_close(contents(rb)[:, 0], torch.tensor([100.0, 101.0]))
    # each temporary directory goes with its own storage
    mine, theirs = rb.storage.scratch_dir, other.storage.scratch_dir
    del rb
    gc.collect()
    assert not mine.exists() and theirs.exists()
    assert contents(other)[:, 0].tolist() == [0.0, 1.0, 2.0]
    del other
    gc.collect()
    assert not theirs.exists()


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_memmap_copy_sharing_a_given_scratch_dir_raises_instead_of_overwriting(how, tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(8, scratch_dir=tmp_path / "m"))
    other = COPIES[how](rb)
    other.extend(items(3))
    # as TorchRL 0.14.1 ("... already exists"): the second allocation in one directory fails
    with pytest.raises(FileExistsError, match="already holds a storage written by another"):
        rb.extend(items(2, start=100))
    torch.testing.assert_close(contents(other)[:, 0], torch.arange(3.0))
