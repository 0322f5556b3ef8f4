"""A collector thread extends the buffer while a learner thread samples from it."""

import threading

import pytest
import torch

from rl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

CAPACITY = 3000
CHUNK = 50
CHUNKS = 200  # 10,000 items: the ring wraps three times


def _run(rb, make_transitions, assert_consistent, read):
    errors: list[BaseException] = []
    done = threading.Event()
    reads = [0]

    def writer():
        try:
            for k in range(CHUNKS):
                rb.extend(make_transitions(CHUNK, start=k * CHUNK))
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)
        finally:
            done.set()

    def reader():
        try:
            last_len = 0
            while not done.is_set() or reads[0] < 20:
                if len(rb) == 0:
                    continue
                batch = read()
                assert_consistent(batch)
                # an item sits where the round-robin writer put it
                torch.testing.assert_close(batch["index"], batch["id"] % CAPACITY)
                assert len(rb) >= last_len
                last_len = len(rb)
                reads[0] += 1
        except BaseException as err:  # noqa: BLE001
            errors.append(err)
            done.set()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    total = CHUNK * CHUNKS
    # nothing lost: the ring holds exactly the last CAPACITY items, each at its place
    assert len(rb) == CAPACITY
    assert rb.writer.state_dict()["_write_count"] == total
    stored = rb[torch.arange(CAPACITY)]
    assert sorted(stored["id"].tolist()) == list(range(total - CAPACITY, total))
    torch.testing.assert_close(stored["id"] % CAPACITY, torch.arange(CAPACITY))
    assert_consistent(stored)
    assert reads[0] >= 20


@pytest.mark.parametrize("prefetch", [None, 4])
def test_extend_while_sampling(make_transitions, assert_consistent, prefetch):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(CAPACITY), batch_size=64, prefetch=prefetch
    )
    _run(rb, make_transitions, assert_consistent, rb.sample)


def test_extend_while_iterating_a_memmap_buffer(tmp_path, make_transitions, assert_consistent):
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(CAPACITY, scratch_dir=tmp_path), batch_size=32
    )
    iterator = iter(rb)
    _run(rb, make_transitions, assert_consistent, lambda: next(iterator))


def test_extend_while_sampling_and_updating_priorities(make_transitions, assert_consistent):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(CAPACITY), batch_size=64
    )

    def read():
        batch = rb.sample()
        batch["td_error"] = torch.rand(64)
        rb.update_tensordict_priority(batch)
        return batch

    _run(rb, make_transitions, assert_consistent, read)
    assert rb.sampler._sum_tree.query(0, CAPACITY) > 0
