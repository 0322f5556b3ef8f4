"""StreamingSliceSampler: windows of the write stream, served once, then uniform slices."""

import io

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rl.data import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SliceSampler,
    StreamingSliceSampler,
    TensorDictReplayBuffer,
)
from rl.data.replay_buffers import StreamingSliceSampler as FromReplayBuffers
from rl.data.replay_buffers.samplers import StreamingSliceSampler as FromSamplers


def _chunk(values, done=(), traj=None, is_init=()):
    """Items with ``value`` = their number in the stream and the given flags."""
    n = len(values)
    flags = torch.zeros(n, 1, dtype=torch.bool)
    flags[list(done)] = True
    data = {"value": torch.as_tensor(values), ("next", "done"): flags}
    if traj is not None:
        data["episode"] = torch.as_tensor(traj)
    if is_init:
        init = torch.zeros(n, 1, dtype=torch.bool)
        init[list(is_init)] = True
        data["is_init"] = init
    return TensorDict(data, batch_size=[n])


def _buffer(slice_len=3, capacity=64, **kwargs):
    sampler = StreamingSliceSampler(slice_len=slice_len, **kwargs)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler)
    return rb, sampler


def _expected_windows(chunks, slice_len):
    """A plain loop over the writes: the windows each write completes, in order."""
    windows, current, last_done, last_traj = [], [], False, None
    for values, done, traj in chunks:
        for i, value in enumerate(values):
            new_traj = traj is not None and last_traj is not None and traj[i] != last_traj
            if last_done or new_traj:
                current = []
            current.append(value)
            if len(current) == slice_len:
                windows.append(current)
                current = []
            last_done = i in done
            last_traj = None if traj is None else traj[i]
    return windows


def _served(rb, num_windows, slice_len):
    return rb.sample(num_windows * slice_len)["value"].reshape(num_windows, slice_len).tolist()


def test_exported_from_every_namespace():
    assert FromReplayBuffers is StreamingSliceSampler
    assert FromSamplers is StreamingSliceSampler
    assert issubclass(StreamingSliceSampler, SliceSampler)


class TestStreamingWindows:
    def test_docstring_example(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(16),
            sampler=StreamingSliceSampler(slice_len=3),
            batch_size=6,
        )
        done = torch.zeros(6, 1, dtype=torch.bool)
        rb.extend(TensorDict({"value": torch.arange(6), ("next", "done"): done}, [6]))
        batch = rb.sample()
        torch.testing.assert_close(
            batch["value"].reshape(2, 3), torch.tensor([[0, 1, 2], [3, 4, 5]])
        )
        # the last item of every slice is flagged truncated (and done), as SliceSampler does
        expected_end = torch.tensor([False, False, True] * 2)[:, None]
        torch.testing.assert_close(batch["next", "truncated"], expected_end)
        torch.testing.assert_close(batch["next", "done"], expected_end)
        torch.testing.assert_close(batch["index"], torch.arange(6))

    def test_windows_stop_at_done(self):
        rb, _ = _buffer()
        # episode 0 is items 0-3 (done at 3), episode 1 items 4-9
        rb.extend(_chunk(list(range(10)), done=[3]))
        assert _served(rb, 3, 3) == [[0, 1, 2], [4, 5, 6], [7, 8, 9]]
        assert _expected_windows([(list(range(10)), {3}, None)], 3) == [
            [0, 1, 2],
            [4, 5, 6],
            [7, 8, 9],
        ]

    def test_windows_stop_at_trajectory_change(self):
        rb, _ = _buffer(traj_key="episode")
        traj = [0, 0, 1, 1, 1, 1, 2, 2, 2]
        rb.extend(_chunk(list(range(9)), traj=traj))
        assert _served(rb, 2, 3) == [[2, 3, 4], [6, 7, 8]]

    def test_windows_start_at_init_flags(self):
        rb, _ = _buffer()
        rb.extend(_chunk(list(range(8)), is_init=[0, 2]))
        assert _served(rb, 2, 3) == [[2, 3, 4], [5, 6, 7]]

    def test_window_split_across_writes_is_served_whole(self):
        rb, _ = _buffer()
        rb.extend(_chunk([0, 1]))
        rb.extend(_chunk([2, 3]))
        rb.extend(_chunk([4, 5, 6]))
        assert _served(rb, 2, 3) == [[0, 1, 2], [3, 4, 5]]
        rb.extend(_chunk([7, 8]))  # completes [6, 7, 8]
        assert _served(rb, 1, 3) == [[6, 7, 8]]

    def test_unfinished_window_dropped_at_a_new_trajectory(self):
        rb, _ = _buffer(traj_key="episode")
        rb.extend(_chunk([0, 1], traj=[0, 0]))
        rb.extend(_chunk([2, 3, 4], traj=[1, 1, 1]))
        assert _served(rb, 1, 3) == [[2, 3, 4]]

    def test_unfinished_window_dropped_after_done(self):
        rb, _ = _buffer()
        rb.extend(_chunk([0, 1], done=[1]))
        rb.extend(_chunk([2, 3, 4]))
        assert _served(rb, 1, 3) == [[2, 3, 4]]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        sizes=st.lists(st.integers(1, 7), min_size=1, max_size=6),
        slice_len=st.integers(1, 4),
        done_bits=st.lists(st.booleans(), min_size=42, max_size=42),
        traj_shift=st.lists(st.booleans(), min_size=42, max_size=42),
    )
    def test_matches_a_plain_loop(self, sizes, slice_len, done_bits, traj_shift):
        rb, _ = _buffer(slice_len=slice_len, capacity=64, traj_key="episode")
        chunks, start, traj_id = [], 0, 0
        for size in sizes:
            values = list(range(start, start + size))
            done = {i for i in range(size) if done_bits[start + i]}
            traj = []
            for i in range(size):
                traj_id += int(traj_shift[start + i])
                traj.append(traj_id)
            rb.extend(_chunk(values, done=sorted(done), traj=traj))
            chunks.append((values, done, traj))
            start += size
        expected = _expected_windows(chunks, slice_len)
        if expected:
            assert _served(rb, len(expected), slice_len) == expected


class TestOverwrites:
    def test_overwritten_window_is_not_served(self):
        rb, _ = _buffer(capacity=7)
        rb.extend(_chunk(list(range(6))))  # windows over slots 0-2 and 3-5
        rb.extend(_chunk([6, 7]))  # slots 6 and 0: the first window is gone
        batch = rb.sample(3)
        assert batch["value"].tolist() == [3, 4, 5]
        torch.testing.assert_close(batch["index"], torch.tensor([3, 4, 5]))

    def test_window_over_the_ring_end_is_served(self):
        rb, _ = _buffer(capacity=7)
        rb.extend(_chunk(list(range(6))))
        assert _served(rb, 2, 3) == [[0, 1, 2], [3, 4, 5]]
        rb.extend(_chunk([6, 7, 8]))  # slots 6, 0, 1
        batch = rb.sample(3)
        assert batch["value"].tolist() == [6, 7, 8]
        assert batch["index"].tolist() == [6, 0, 1]

    def test_mark_update_drops_the_rewritten_windows(self):
        rb, _ = _buffer()
        rb.extend(_chunk(list(range(6))))
        rb.mark_update(torch.tensor([1]))
        assert _served(rb, 1, 3) == [[3, 4, 5]]

    def test_empty_forgets_the_stream(self):
        rb, _ = _buffer()
        rb.extend(_chunk([0, 1, 2, 3]))
        rb.empty()
        rb.extend(_chunk([10, 11, 12]))  # item 3's unfinished window is not continued
        assert _served(rb, 1, 3) == [[10, 11, 12]]


class TestFallback:
    def test_fallback_fills_the_batch(self):
        rb, _ = _buffer(capacity=16)
        rb.extend(_chunk(list(range(6))))
        torch.manual_seed(0)
        batch = rb.sample(12)
        values = batch["value"].reshape(4, 3)
        assert values[:2].tolist() == [[0, 1, 2], [3, 4, 5]]
        # the other two slices are what a plain SliceSampler draws from the same data
        plain = TensorDictReplayBuffer(
            storage=LazyTensorStorage(16), sampler=SliceSampler(slice_len=3)
        )
        plain.extend(_chunk(list(range(6))))
        torch.manual_seed(0)
        reference = plain.sample(6)
        torch.testing.assert_close(values[2:].reshape(-1), reference["value"])
        torch.testing.assert_close(batch["next", "truncated"][6:], reference["next", "truncated"])
        assert batch["next", "truncated"].reshape(4, 3)[:, -1].all()

    def test_uniform_once_the_queue_is_drained(self):
        rb, _ = _buffer(capacity=16)
        rb.extend(_chunk(list(range(6))))
        rb.sample(6)
        for _ in range(5):
            values = rb.sample(3)["value"]
            torch.testing.assert_close(values, values[0] + torch.arange(3))
            assert 0 <= int(values[0]) <= 3

    def test_fallback_pads_with_mask(self):
        rb, _ = _buffer(capacity=16, strict_length=False, pad_output=True)
        rb.extend(_chunk([0, 1, 2, 3, 4], done=[3]))  # one window, then a 1-item trajectory
        batch = rb.sample(30)
        mask = batch["collector", "mask"]
        assert batch.shape == (30,) and mask[:3].all()
        assert batch["value"][:3].tolist() == [0, 1, 2]

    def test_batch_not_divisible(self):
        rb, _ = _buffer()
        rb.extend(_chunk(list(range(6))))
        with pytest.raises(ValueError, match="batch_size=4 is not divisible by slice_len=3"):
            rb.sample(4)


class TestState:
    def _stream(self, rb):
        rb.extend(_chunk(list(range(8))))  # windows [0-2], [3-5]; 6, 7 wait
        rb.sample(3)  # serves [0-2]

    def test_round_trip_gives_the_same_next_samples(self):
        rb, sampler = _buffer(capacity=16)
        self._stream(rb)
        buffer = io.BytesIO()
        torch.save(rb.state_dict(), buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
        copy, copy_sampler = _buffer(capacity=16)
        copy.load_state_dict(state)
        for target in (rb, copy):
            target.extend(_chunk([8, 9, 10, 11]))  # completes [6, 7, 8] and [9, 10, 11]
        torch.manual_seed(1)
        expected = rb.sample(12)
        torch.manual_seed(1)
        restored = copy.sample(12)
        assert restored["value"][:9].tolist() == [3, 4, 5, 6, 7, 8, 9, 10, 11]
        torch.testing.assert_close(restored["value"], expected["value"])
        torch.testing.assert_close(restored["index"], expected["index"])
        assert repr(copy_sampler) == repr(sampler)

    def test_state_holds_tensors_and_plain_values(self):
        rb, sampler = _buffer(capacity=16)
        self._stream(rb)
        state = sampler.state_dict()
        assert state["queued_indices"].tolist() == [[3, 4, 5]]
        assert state["pending_indices"].tolist() == [6, 7]
        assert state["slice_len"] == 3 and state["last_was_done"] is False

    def test_load_checks_slice_len(self):
        rb, sampler = _buffer(capacity=16)
        self._stream(rb)
        other = StreamingSliceSampler(slice_len=2)
        with pytest.raises(
            ValueError, match="saved with slice_len=3, this sampler has slice_len=2"
        ):
            other.load_state_dict(sampler.state_dict())


class TestErrors:
    @pytest.mark.parametrize("bad", [2.5, "3", True, None])
    def test_slice_len_not_an_int(self, bad):
        with pytest.raises(TypeError, match=f"slice_len must be a positive int, got {bad!r}"):
            StreamingSliceSampler(slice_len=bad)

    @pytest.mark.parametrize("bad", [0, -2])
    def test_slice_len_below_one(self, bad):
        with pytest.raises(ValueError, match=f"slice_len must be a positive int, got {bad}"):
            StreamingSliceSampler(slice_len=bad)

    def test_two_dimensional_storage(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10, ndim=2), sampler=StreamingSliceSampler(slice_len=3)
        )
        data = TensorDict({"value": torch.arange(10).reshape(2, 5)}, batch_size=[2, 5])
        with pytest.raises(ValueError, match="needs a 1-dimensional storage, got ndim=2"):
            rb.extend(data)

    def test_capacity_below_slice_len(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(2), sampler=StreamingSliceSampler(slice_len=3)
        )
        with pytest.raises(ValueError, match="holds 2 items, fewer than one window of slice_len=3"):
            rb.extend(_chunk([0, 1]))

    def test_list_storage(self):
        rb = ReplayBuffer(storage=ListStorage(10), sampler=StreamingSliceSampler(slice_len=3))
        with pytest.raises(TypeError, match="needs a tensor storage .* got ListStorage"):
            rb.extend([torch.tensor(0), torch.tensor(1)])

    def test_empty_storage(self):
        rb, _ = _buffer()
        with pytest.raises(RuntimeError, match="empty storage"):
            rb.sample(3)
