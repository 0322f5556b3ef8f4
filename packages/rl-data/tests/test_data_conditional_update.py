"""ReplayBuffer.update_if_present: patches only the records still stored where sampled."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    ConditionalUpdateResult,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def _buffer(storage=None, n: int = 10, version: bool = False):
    rb = TensorDictReplayBuffer(
        storage=storage if storage is not None else LazyTensorStorage(n),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    data = {
        "obs": torch.arange(n, dtype=torch.float32)[:, None].expand(n, 3).clone(),
        ("info", "label"): torch.zeros(n, dtype=torch.int64),
    }
    if version:
        data["v"] = torch.full((n,), 5, dtype=torch.int64)
    index = rb.extend(TensorDict(data, [n]))
    return rb, index, rb.writer.generations_of(index)


class TestUpdateIfPresent:
    @pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
    def test_stale_records_are_skipped(self, storage_cls):
        rb, index, generation = _buffer(storage_cls(10))
        rb.extend(
            TensorDict({"obs": -torch.ones(4, 3), ("info", "label"): torch.ones(4).long()}, [4])
        )
        order = torch.tensor([7, 0, 5, 2, 9, 1])  # slots 0-3 were rewritten
        result = rb.update_if_present(
            index=index[order],
            generation=generation[order],
            patch={"obs": torch.full((6, 3), 42.0)},
        )
        assert result.updated.tolist() == [True, False, True, False, True, False]
        assert isinstance(result, ConditionalUpdateResult)
        assert (result.updated_count, result.stale_count, result.version_rejected) == (3, 3, None)
        # a tensorclass as TorchRL's: one row per record
        assert result.batch_size == (6,) and result[2:4].updated.tolist() == [True, False]
        built = ConditionalUpdateResult(torch.tensor([False, True]), batch_size=[2])
        assert (built.updated_count, built.stale_count, built[1].updated.item()) == (1, 1, True)
        expected = torch.tensor([-1, -1, -1, -1, 4, 42, 6, 42, 8, 42.0])
        torch.testing.assert_close(rb[:]["obs"][:, 0], expected)
        # a handle keeps working after a patch (nested keys too)
        again = rb.update_if_present(
            index=index[7:],
            generation=generation[7:],
            patch={("info", "label"): torch.full((3,), 7)},
        )
        assert again.updated.all() and rb[:]["info", "label"][7:].tolist() == [7, 7, 7]

    def test_sampled_handles_and_empty(self):
        rb, index, generation = _buffer()
        sample = rb.sample()
        marker = torch.full((4, 3), 123.0)
        result = rb.update_if_present(
            index=sample["index"], generation=sample["index_generation"], patch={"obs": marker}
        )
        assert result.updated.all()
        torch.testing.assert_close(rb[:]["obs"][sample["index"]], marker)
        rb.empty()
        rb.extend(
            TensorDict({"obs": torch.zeros(10, 3), ("info", "label"): torch.zeros(10).long()}, [10])
        )
        result = rb.update_if_present(
            index=index, generation=generation, patch={"obs": marker[:1].expand(10, 3)}
        )
        assert result.stale_count == 10 and (rb[:]["obs"] == 0).all()

    def test_never_written_slot_is_stale(self):
        rb, _, _ = _buffer(LazyTensorStorage(10), n=5)
        index = torch.tensor([7])
        assert rb.writer.generations_of(index).tolist() == [-1]
        result = rb.update_if_present(
            index=index, generation=torch.tensor([-1]), patch={"obs": torch.ones(1, 3)}
        )
        assert result.stale_count == 1 and len(rb) == 5

    def test_two_dim_storage(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(6, ndim=2),
            writer=TensorDictRoundRobinWriter(track_generations=True),
        )
        data = TensorDict({"obs": torch.arange(6.0).reshape(2, 3)}, [2, 3])
        index = rb.extend(data)
        assert index.shape == (6, 2)  # [N, ndim] coordinates: one item each
        generation = rb.writer.generations_of(index)
        before = rb.storage.get(index)["obs"].clone()
        assert before.tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]  # time-major, as extended
        result = rb.update_if_present(
            index=index[:2], generation=generation[:2], patch={"obs": torch.tensor([40.0, 41.0])}
        )
        assert result.updated.all()
        after = rb.storage.get(index)["obs"]
        assert after.tolist() == [40.0, 41.0, 1.0, 4.0, 2.0, 5.0]

    def test_checks_come_before_any_write(self):
        rb, index, generation = _buffer(version=True)
        before = rb[:].clone()
        bad_patches = [
            (KeyError, "holds no key 'nope'", {"patch": {"nope": torch.zeros(10, 3)}}),
            (
                ValueError,
                "dtype torch.int64, the storage holds torch.float32",
                {"patch": {"obs": torch.zeros(10, 3).long()}},
            ),
            (
                ValueError,
                r"shape \(10, 5\), expected 10 records of shape \(\)",
                {
                    "patch": {
                        "obs": torch.zeros(10, 3),
                        ("info", "label"): torch.zeros(10, 5).long(),
                    }
                },
            ),
            (ValueError, "version_key and version go together", {"patch": {}, "version_key": "v"}),
            (
                ValueError,
                "may not appear in patch",
                {"patch": {"v": torch.zeros(10).long()}, "version_key": "v", "version": 6},
            ),
            (
                ValueError,
                "one number per record, the storage holds shape \\(3,\\)",
                {"patch": {}, "version_key": "obs", "version": 6},
            ),
            (
                ValueError,
                "Dotted-string version keys",
                {"patch": {}, "version_key": "info.label", "version": 6},
            ),
            (ValueError, "3 indices and 10 generations", {"patch": {}, "index": index[:3]}),
        ]
        for error, match, kwargs in bad_patches:
            kwargs = {"index": index, "generation": generation, **kwargs}
            with pytest.raises(error, match=match):
                rb.update_if_present(**kwargs)
        assert (rb[:] == before).all()

    def test_capability_errors(self):
        rb = ReplayBuffer(storage=ListStorage(10))
        rb.extend([torch.zeros(3)] * 2)
        with pytest.raises(RuntimeError, match="conditional updates need a tensor storage"):
            rb.update_if_present(index=torch.arange(2), generation=torch.zeros(2), patch={})
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        index = rb.extend(TensorDict({"obs": torch.zeros(4)}, [4]))
        with pytest.raises(RuntimeError, match="without track_generations"):
            rb.update_if_present(
                index=index, generation=torch.zeros(4), patch={"obs": torch.ones(4)}
            )


class TestVersionedUpdate:
    def test_versions_decide_and_are_written(self):
        rb, index, generation = _buffer(version=True)
        kwargs = {"index": index, "generation": generation, "version_key": "v"}
        tie = rb.update_if_present(
            patch={"obs": torch.ones(10, 3)}, version=5, require_newer=True, **kwargs
        )
        assert (tie.updated_count, tie.version_rejected_count, tie.stale_count) == (0, 10, 0)
        versions = torch.tensor([6] * 5 + [4] * 5)
        result = rb.update_if_present(
            patch={"obs": torch.full((10, 3), 2.0)}, version=versions, **kwargs
        )
        assert result.updated.tolist() == [True] * 5 + [False] * 5
        assert result.version_rejected.tolist() == [False] * 5 + [True] * 5
        assert rb[:]["v"].tolist() == [6] * 5 + [5] * 5
        assert rb[:]["obs"][:, 0].tolist() == [2.0] * 5 + [5.0, 6.0, 7.0, 8.0, 9.0]
        equal = rb.update_if_present(patch={"obs": torch.zeros(10, 3)}, version=5, **kwargs)
        assert equal.updated.tolist() == [False] * 5 + [True] * 5  # ties pass by default

    def test_stale_comes_before_the_version(self):
        rb, index, generation = _buffer(version=True)
        rb.extend(
            TensorDict(
                {
                    "obs": torch.zeros(4, 3),
                    ("info", "label"): torch.zeros(4).long(),
                    "v": torch.zeros(4).long(),
                },
                [4],
            )
        )
        result = rb.update_if_present(
            index=index,
            generation=generation,
            patch={},
            version_key="v",
            version=1,
            require_newer=True,
        )
        assert result.updated.tolist() == [False] * 10
        assert result.version_rejected.tolist() == [False] * 4 + [True] * 6
        assert (result.stale_count, result.version_rejected_count) == (4, 6)

    @pytest.mark.parametrize("versions", [[7, 6], [6, 7], [7, 7]])
    def test_one_write_per_record(self, versions):
        rb, index, generation = _buffer(version=True)
        result = rb.update_if_present(
            index=index[[0, 0]],
            generation=generation[[0, 0]],
            patch={"obs": torch.tensor(versions, dtype=torch.float32)[:, None].expand(2, 3)},
            version_key="v",
            version=torch.tensor(versions),
            require_newer=True,
        )
        winner = 1 if versions[1] >= versions[0] else 0  # the highest, the last on ties
        assert result.updated.tolist() == [i == winner for i in range(2)]
        assert result.version_rejected.tolist() == [i != winner for i in range(2)]
        assert rb[:]["v"][0].item() == versions[winner] == rb[:]["obs"][0, 0].item()

    def test_state_dict_round_trip_keeps_handles(self):
        rb, index, generation = _buffer(version=True)
        other = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10), writer=TensorDictRoundRobinWriter(track_generations=True)
        )
        other.load_state_dict(rb.state_dict())
        result = other.update_if_present(
            index=index,
            generation=generation,
            patch={"obs": torch.ones(10, 3)},
            version_key="v",
            version=6,
        )
        assert result.updated.all() and (other[:]["v"] == 6).all()
