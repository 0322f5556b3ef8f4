"""Sample units: Transition (the identity) and Sequence (windows of records)."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SampleUnit,
    Sequence,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    Transition,
)


def _episodes(capacity: int = 10, n: int | None = None, done_at=(5, 9)) -> TensorDictReplayBuffer:
    n = capacity if n is None else n
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[list(done_at)] = True
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity))
    rb.extend(TensorDict({"obs": torch.arange(float(n)), ("next", "done"): done}, [n]))
    return rb


def _expand(rb, unit, anchors):
    return unit.expand(torch.tensor(anchors), {}, rb.storage)


class _Twice(SampleUnit):
    def expand(self, index, info, storage):
        return index.repeat_interleave(2), {**info, "copy": torch.arange(2 * len(index)) % 2}


class TestSampleUnit:
    def test_transition_is_the_default(self):
        batches = []
        for unit in (None, Transition()):
            generator = torch.Generator().manual_seed(0)
            rb = ReplayBuffer(
                storage=LazyTensorStorage(20), batch_size=4, generator=generator, sample_unit=unit
            )
            rb.extend(torch.arange(20))
            batches.append(rb.sample(return_info=True))
        torch.testing.assert_close(batches[0][0], batches[1][0])
        assert batches[0][1].keys() == batches[1][1].keys() == {"index"}

    def test_a_unit_expands_the_batch_and_its_info(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10), batch_size=3, sample_unit=_Twice()
        )
        rb.extend(TensorDict({"obs": torch.arange(10)}, [10]))
        batch, info = rb.sample(return_info=True)
        assert batch.batch_size == (6,) and info["index"].shape == (6,)
        torch.testing.assert_close(batch["obs"][0::2], batch["obs"][1::2])
        assert batch["copy"].tolist() == [0, 1] * 3

    def test_not_a_unit(self):
        with pytest.raises(TypeError, match="sample_unit must be a SampleUnit .* got object"):
            ReplayBuffer(sample_unit=object())


class TestSequence:
    # stored episodes: records 0-5 and 6-9 (done at 5 and 9)
    @pytest.mark.parametrize(
        ("unit", "anchors", "index", "valid"),
        [
            (Sequence(length=4), [1], [1, 2, 3, 4], [True] * 4),
            (Sequence(length=4), [4], [4, 5, 5, 5], [True, True, False, False]),
            (Sequence(length=4, episode_boundary="stop"), [4], [2, 3, 4, 5], [True] * 4),
            (Sequence(length=4, episode_boundary="include_reset"), [4], [4, 5, 6, 7], [True] * 4),
            (Sequence(length=3), [0, 6], [0, 1, 2, 6, 7, 8], [True] * 6),
            (Sequence(length=2, burn_in=2), [8], [6, 7, 8, 9], [True] * 4),
            (Sequence(length=2, burn_in=2), [6], [6, 6, 6, 7], [False, False, True, True]),
            (Sequence(length=2, bootstrap=1), [8], [8, 9, 9], [True, True, False]),
            (Sequence(length=2, bootstrap=1, episode_boundary="stop"), [4], [3, 4, 5], [True] * 3),
            (Sequence(length=3, dilation=2), [0], [0, 2, 4], [True] * 3),
        ],
    )
    def test_windows(self, unit, anchors, index, valid):
        rb = _episodes()
        got, info = _expand(rb, unit, anchors)
        assert got.tolist() == index
        assert info["validity_mask"].tolist() == valid
        total = unit.burn_in + unit.length + unit.bootstrap
        assert info["sequence_id"].tolist() == [
            i for i in range(len(anchors)) for _ in range(total)
        ]
        assert info["step_in_sequence"].tolist() == list(range(total)) * len(anchors)
        learning = [unit.burn_in <= s < unit.burn_in + unit.length for s in range(total)]
        assert info["learning_mask"].tolist() == learning * len(anchors)
        assert info["anchor_index"].tolist() == [a for a in anchors for _ in range(total)]

    def test_stop_pads_an_episode_shorter_than_the_window(self):
        rb = _episodes(done_at=(1, 9))
        index, info = _expand(rb, Sequence(length=4, episode_boundary="stop"), [0])
        assert index.tolist() == [0, 1, 1, 1]
        assert info["validity_mask"].tolist() == [True, True, False, False]

    def test_a_full_ring_is_cut_after_the_newest_record(self):
        rb = _episodes(capacity=10, n=14, done_at=())  # slots 0-3 hold records 10-13
        unit = Sequence(length=4, episode_boundary="include_reset")
        index, info = _expand(rb, unit, [8])
        assert rb[index]["obs"].tolist() == [8.0, 9.0, 10.0, 11.0] and info["validity_mask"].all()
        index, info = _expand(rb, unit, [2])
        assert index.tolist() == [2, 3, 3, 3]
        assert info["validity_mask"].tolist() == [True, True, False, False]
        index, info = _expand(
            rb, Sequence(length=1, burn_in=2, episode_boundary="include_reset"), [4]
        )
        assert index.tolist() == [4, 4, 4]  # slot 4 is the oldest record: no burn-in before it
        assert info["validity_mask"].tolist() == [False, False, True]

    def test_unwritten_slots_are_never_read(self):
        rb = _episodes(capacity=100, n=10, done_at=())
        index, info = _expand(rb, Sequence(length=4, episode_boundary="include_reset"), [8])
        assert index.tolist() == [8, 9, 9, 9]
        assert info["validity_mask"].tolist() == [True, True, False, False]

    def test_without_done_key_the_data_is_one_episode(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(TensorDict({"obs": torch.arange(5)}, [5]))
        index, _ = _expand(rb, Sequence(length=3, done_key=None), [3])
        assert index.tolist() == [3, 4, 4]
        index, _ = _expand(rb, Sequence(length=3, done_key=None, episode_boundary="stop"), [3])
        assert index.tolist() == [2, 3, 4]

    def test_info_entries_follow_the_records(self):
        rb = _episodes()
        _, info = Sequence(length=3).expand(
            torch.tensor([0, 6]), {"scalar": 3.0, "weight": torch.tensor([1.0, 2.0])}, rb.storage
        )
        assert info["scalar"] == 3.0
        assert info["weight"].tolist() == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]

    def test_sampling_through_a_buffer(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(30),
            sampler=PrioritizedSampler(30, alpha=0.7, beta=0.9),
            batch_size=2,
            sample_unit=Sequence(length=3, burn_in=2, bootstrap=1),
        )
        rb.extend(
            TensorDict(
                {"obs": torch.arange(30.0), ("next", "done"): torch.zeros(30, 1).bool()}, [30]
            )
        )
        batch, info = rb.sample(return_info=True)
        assert batch.batch_size == (12,)
        assert all(torch.as_tensor(v).shape[0] == 12 for v in info.values())
        assert batch["learning_mask"].sum() == 6
        windows = batch["obs"].reshape(2, 6)
        valid = batch["validity_mask"].reshape(2, 6)
        for window, ok in zip(windows, valid, strict=True):
            # valid records are consecutive stored records
            torch.testing.assert_close(window[ok].diff(), torch.ones(int(ok.sum()) - 1))
        torch.testing.assert_close(batch["index"].float(), batch["obs"])

    def test_two_dim_storage_keeps_lanes(self):
        done = torch.zeros(8, 2, 1, dtype=torch.bool)
        done[4, 0] = done[6, 1] = True
        done[7] = True
        unit = Sequence(length=2, burn_in=1, bootstrap=1, dilation=2, done_key=("stats", "end"))
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(16, ndim=2), dim_extend=0, batch_size=2, sample_unit=unit
        )
        rb.extend(
            TensorDict({"obs": torch.arange(16).reshape(8, 2), ("stats", "end"): done}, [8, 2])
        )
        index, info = unit.expand((torch.tensor([2, 2]), torch.tensor([0, 1])), {}, rb.storage)
        # lane 0's episode ends at time 4: the bootstrap record (time 6) is padded
        assert index[0].tolist() == [0, 2, 4, 4, 0, 2, 4, 6]
        assert index[1].tolist() == [0] * 4 + [1] * 4
        assert info["validity_mask"].tolist() == [True, True, True, False] + [True] * 4
        assert info["anchor_index"].tolist() == [[2, 0]] * 4 + [[2, 1]] * 4
        batch = rb.sample()
        assert batch["index"].shape == (8, 2) and batch["anchor_index"].shape == (8, 2)

    def test_priorities_go_to_the_anchors(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(10), sample_unit=Sequence(length=2)
        )
        rb.extend(
            TensorDict({"obs": torch.arange(10), ("next", "done"): torch.zeros(10, 1).bool()}, [10])
        )
        rb.update_priority(torch.arange(10), torch.ones(10))
        index, info = rb._sample_unit.expand(torch.tensor([2, 9, 2]), {}, rb.storage)
        data = rb.storage.get(index)
        data["index"], data["anchor_index"] = index, info["anchor_index"]
        data["validity_mask"] = info["validity_mask"]
        # anchor 9's window is [9, 9(padded)]: its padded record's 99 is left out
        data["td_error"] = torch.tensor([1.0, 5.0, 3.0, 99.0, 4.0, 2.0])
        rb.update_tensordict_priority(data)
        priority = [float(rb.sampler._sum_tree[i]) for i in range(10)]
        assert priority == [1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0]

    def test_errors(self):
        for kwargs, match in (
            ({"length": 0}, "length must be at least 1"),
            ({"length": 2, "episode_boundary": "teleport"}, "episode_boundary must be"),
            ({"length": 2, "burn_in": -1}, "burn_in must be non-negative"),
            ({"length": 2, "bootstrap": -1}, "bootstrap must be non-negative"),
            ({"length": 2, "dilation": 0}, "dilation must be at least 1"),
        ):
            with pytest.raises(ValueError, match=match):
                Sequence(**kwargs)
        with pytest.raises(TypeError, match="TensorStorage of TensorDicts .* got ListStorage"):
            Sequence(length=2).expand(torch.tensor([0]), {}, ListStorage(4))
        rb = ReplayBuffer(storage=LazyTensorStorage(4))
        rb.extend(torch.arange(4))
        with pytest.raises(TypeError, match="holds a plain tensor"):
            Sequence(length=2).expand(torch.tensor([0]), {}, rb.storage)
