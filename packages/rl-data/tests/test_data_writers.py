import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rl.data import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


class TestRoundRobinWriter:
    def test_wraps_around(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(5))
        assert rb.extend(torch.arange(3)).tolist() == [0, 1, 2]
        assert rb.extend(torch.arange(3, 7)).tolist() == [3, 4, 0, 1]
        assert rb.add(torch.tensor(7)) == 2
        assert rb[:].tolist() == [5, 6, 7, 3, 4]

    def test_batch_larger_than_capacity_keeps_the_last_items(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(4))
        rb.extend(torch.arange(1))
        index = rb.extend(torch.arange(10, 20))
        assert index.tolist() == [3, 0, 1, 2]
        assert rb[:].tolist() == [17, 18, 19, 16]
        assert rb.writer.state_dict() == {"_cursor": 3, "_write_count": 11}

    def test_pytree_batch_larger_than_capacity_keeps_the_last_items(self):
        # a dict of tensors is one batch whose length is the leaves' first dim (not the
        # number of keys); the last max_size items survive, as for a tensor
        rb = ReplayBuffer(storage=LazyTensorStorage(3))
        data = {"a": torch.arange(5), "b": (torch.arange(5)[:, None] * 10,)}
        assert rb.extend(data).tolist() == [2, 0, 1]
        stored = rb[:]
        assert stored["a"].tolist() == [3, 4, 2]
        assert stored["b"][0].reshape(-1).tolist() == [30, 40, 20]
        assert rb.write_count == 5

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.integers(1, 9), min_size=1, max_size=8), st.integers(1, 7))
    def test_matches_a_python_ring(self, chunks, capacity):
        rb = ReplayBuffer(storage=LazyTensorStorage(capacity))
        ring, cursor, counter = [None] * capacity, 0, 0
        for n in chunks:
            values = torch.arange(counter, counter + n)
            rb.extend(values)
            for v in values.tolist():
                ring[cursor] = v
                cursor = (cursor + 1) % capacity
            counter += n
        assert rb[:].tolist() == [v for v in ring if v is not None]

    def test_list_storage(self):
        rb = ReplayBuffer(storage=ListStorage(3), collate_fn=lambda x: x)
        rb.extend(["a", "b", "c", "d"])
        assert rb.storage.get(slice(None)) == ["d", "b", "c"]

    def test_state_round_trip(self):
        w = RoundRobinWriter()
        w.load_state_dict({"cursor": 2, "write_count": 9})
        assert w.state_dict() == {"_cursor": 2, "_write_count": 9}


class TestTensorDictRoundRobinWriter:
    def test_writes_index(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(3))
        data = TensorDict({"a": torch.arange(4)}, [4])
        rb.extend(data)
        assert data["index"].tolist() == [0, 1, 2, 0]
        assert rb[:]["index"].tolist() == [0, 1, 2]
        assert isinstance(rb.writer, TensorDictRoundRobinWriter)

    def test_index_expanded_over_item_batch_dims(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        data = TensorDict({"a": torch.zeros(2, 3)}, [2, 3])
        rb.extend(data)
        assert data["index"].tolist() == [[0, 0, 0], [1, 1, 1]]

    def test_rejects_non_tensordict(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=TensorDictRoundRobinWriter())
        with pytest.raises(TypeError, match="needs TensorDict data, got Tensor"):
            rb.extend(torch.zeros(2))


class TestTensorDictMaxValueWriter:
    def test_keeps_top_k(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        data = TensorDict({"r": torch.tensor([5.0, 1.0, 3.0, 4.0, 0.0, 9.0])}, [6])
        rb.extend(data)
        assert sorted(rb[:]["r"].tolist()) == [4.0, 5.0, 9.0]
        assert data["index"].tolist()[1] == -1 and data["index"].tolist()[4] == -1
        rb.add(TensorDict({"r": torch.tensor(2.0)}, []))
        assert sorted(rb[:]["r"].tolist()) == [4.0, 5.0, 9.0]
        rb.add(TensorDict({"r": torch.tensor(6.0)}, []))
        assert sorted(rb[:]["r"].tolist()) == [5.0, 6.0, 9.0]

    def test_write_count_follows_torchrl(self):
        # TorchRL 0.14.1 on this sequence: 2, 6, 6, 7, 0 (extend counts an item that takes
        # a slot at its turn; add counts its item only when it is stored)
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        assert rb.write_count == 0
        rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0])}, [2]))
        assert rb.write_count == 2
        # all four count: 0.5 takes the free slot, 4.0 and 5.0 replace 1.0 and 2.0, 3.0
        # then replaces 0.5 (stored at its turn, displaced within the same batch)
        rb.extend(TensorDict({"r": torch.tensor([0.5, 4.0, 5.0, 3.0])}, [4]))
        assert rb.write_count == 6
        rb.add(TensorDict({"r": torch.tensor(0.0)}, []))  # ranks below all: not written
        assert rb.write_count == 6
        rb.add(TensorDict({"r": torch.tensor(6.0)}, []))
        assert rb.write_count == 7
        assert sorted(rb[:]["r"].tolist()) == [4.0, 5.0, 6.0]
        rb.empty()
        assert rb.write_count == 0

    @pytest.mark.parametrize(
        ("first", "second", "counts"),
        [
            # TorchRL 0.14.1's write_count after each extend (storage of 3)
            ([5.0, 6.0, 7.0], [0.0, 0.0, 0.0], (3, 3)),  # all below the stored minimum
            ([5.0, 6.0, 7.0], [1.0, 8.0], (3, 4)),  # only 8.0 takes a slot
            ([5.0, 6.0, 7.0], [5.0, 9.0, 6.0], (3, 4)),  # ties with the minimum take none
            ([1.0, 2.0, 3.0, 4.0], [0.5], (4, 4)),  # 4.0 takes 1.0's slot in one batch
            ([1.0], [0.0, 0.5, 0.2, 3.0], (1, 5)),  # 0.2 outranks 0.0, 3.0 then 0.2
        ],
    )
    def test_write_count_of_an_overflowing_extend_follows_torchrl(self, first, second, counts):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        rb.extend(TensorDict({"r": torch.tensor(first)}, [len(first)]))
        assert rb.write_count == counts[0]
        rb.extend(TensorDict({"r": torch.tensor(second)}, [len(second)]))
        assert rb.write_count == counts[1]

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(st.lists(st.integers(-50, 50), min_size=1, max_size=6), min_size=1, max_size=6),
        st.integers(1, 6),
    )
    def test_matches_sorted_reference(self, chunks, capacity):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(capacity), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        seen = []
        for chunk in chunks:
            values = torch.tensor(chunk, dtype=torch.float32)
            rb.extend(TensorDict({"r": values}, [len(chunk)]))
            seen += chunk
        expected = sorted(seen, reverse=True)[:capacity]
        assert sorted(rb[:]["r"].tolist(), reverse=True) == [float(v) for v in expected]

    def test_reduction_over_extra_dims(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(1),
            writer=TensorDictMaxValueWriter(rank_key=("next", "reward"), reduction="max"),
        )
        rewards = torch.tensor([[1.0, 1.0], [0.0, 3.0]])
        rb.extend(TensorDict({("next", "reward"): rewards}, [2]))
        torch.testing.assert_close(rb[:]["next", "reward"], torch.tensor([[0.0, 3.0]]))

    def test_errors(self):
        with pytest.raises(ValueError, match="reduction must be one of"):
            TensorDictMaxValueWriter(reduction="prod")
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        with pytest.raises(KeyError, match="the data has no rank_key 'r'"):
            rb.extend(TensorDict({"x": torch.zeros(2)}, [2]))
        # TorchRL raises a RuntimeError there: the error is both
        for bad, name in ((torch.zeros(2), "Tensor"), ({"r": torch.zeros(2)}, "dict")):
            for error in (TypeError, RuntimeError):
                with pytest.raises(
                    error, match=f"expects data to be a tensor collection .* {name}"
                ):
                    rb.extend(bad)
        with pytest.raises(TypeError, match="expects data to be a tensor collection"):
            rb.add({"r": torch.zeros(())})
        assert len(rb) == 0

    def test_state_round_trip(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0])}, [2]))
        rb2 = TensorDictReplayBuffer(
            storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r")
        )
        rb2.load_state_dict(rb.state_dict())
        rb2.extend(TensorDict({"r": torch.tensor([1.5])}, [1]))
        assert sorted(rb2[:]["r"].tolist()) == [1.5, 2.0]


class TestMaxValueWriterTorchRLState:
    """The cursor and top-values heap TorchRL users read (``_cursor``, ``_current_top_values``)."""

    def _buffer(self, size):
        return TensorDictReplayBuffer(
            storage=LazyTensorStorage(size), writer=TensorDictMaxValueWriter(rank_key="r")
        )

    def test_cursor_moves_while_filling_and_wraps_when_full(self):
        rb = self._buffer(4)
        assert rb.writer._cursor == 0
        rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0, 3.0])}, [3]))
        assert rb.writer._cursor == 3
        rb.extend(TensorDict({"r": torch.tensor([0.5, 9.0])}, [2]))
        assert rb.writer._cursor == 0  # full: new items replace the lowest ranked ones

    def test_top_values_are_a_min_heap_of_rank_and_index(self):
        rb = self._buffer(3)
        rb.extend(TensorDict({"r": torch.tensor([5.0, 1.0, 3.0, 4.0])}, [4]))
        heap = rb.writer._current_top_values
        assert heap[0][0] == 3.0  # the lowest kept rank first
        assert sorted(rank for rank, _ in heap) == [3.0, 4.0, 5.0]  # 1.0 was replaced
        for rank, index in heap:  # each pair names the slot holding that rank
            assert rb[index]["r"].item() == rank

    def test_top_values_survive_dumps_and_loads(self, tmp_path):
        rb = self._buffer(5)
        rb.extend(TensorDict({"r": torch.tensor([2.0, 7.0, 1.0])}, [3]))
        rb.writer.dumps(tmp_path)
        other = TensorDictMaxValueWriter(rank_key="r")
        other.loads(tmp_path)
        assert other._current_top_values == rb.writer._current_top_values
