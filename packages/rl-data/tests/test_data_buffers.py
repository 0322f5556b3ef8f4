import pickle
import threading

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.core.trainers import CheckpointError
from rl.data import (
    ImmutableDatasetWriter,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class TestReplayBuffer:
    def test_defaults(self):
        rb = ReplayBuffer()
        assert isinstance(rb.storage, ListStorage) and rb.storage.max_size == 1000
        assert isinstance(rb.sampler, RandomSampler)
        assert len(rb) == 0

    def test_add_extend_sample_len(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
        assert rb.add(torch.tensor(5)) == 0
        assert rb.extend(torch.tensor([6, 7])).tolist() == [1, 2]
        assert len(rb) == 3
        batch = rb.sample()
        assert batch.shape == (4,) and set(batch.tolist()) <= {5, 6, 7}
        assert rb.sample(7).shape == (7,)
        data, info = rb.sample(2, return_info=True)
        torch.testing.assert_close(data, torch.tensor([5, 6, 7])[info["index"]])

    def test_extend_with_nothing(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        assert rb.extend(TensorDict({"a": torch.zeros(0)}, [0])).tolist() == []
        assert len(rb) == 0 and not rb.storage.initialized

    def test_python_objects(self):
        torch.manual_seed(0)
        rb = ReplayBuffer(collate_fn=lambda x: x)
        rb.add({"o": 1})
        assert rb.sample(2) == [{"o": 1}, {"o": 1}]

    def test_default_collate_stacks_tensordicts_from_a_list_storage(self):
        rb = ReplayBuffer()
        rb.add(TensorDict({"a": torch.ones(3)}, []))
        rb.extend(TensorDict({"a": torch.zeros(2, 3)}, [2]))
        out = rb.sample(5)
        assert isinstance(out, TensorDict) and out["a"].shape == (5, 3)

    def test_sample_errors(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(4))
        for error in (ValueError, RuntimeError):  # TorchRL raises a RuntimeError
            with pytest.raises(error, match="sample\\(\\) needs a batch_size"):
                rb.sample()
        with pytest.raises(ValueError, match="Samplers with drop_last=True must work with a"):
            ReplayBuffer(sampler=SamplerWithoutReplacement(drop_last=True))
        with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
            rb.sample(3)
        with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
            rb.sample(0)
        with pytest.raises(ValueError, match="batch_size must be a positive int, got -2"):
            ReplayBuffer(batch_size=-2)

    def test_constructor_type_checks(self):
        with pytest.raises(TypeError, match="storage must be a Storage, got list"):
            ReplayBuffer(storage=[])
        with pytest.raises(TypeError, match="sampler must be a Sampler"):
            ReplayBuffer(sampler=object())
        with pytest.raises(TypeError, match="writer must be a Writer"):
            ReplayBuffer(writer=object())
        with pytest.raises(TypeError, match="prefetch must be an int"):
            ReplayBuffer(prefetch=1.5)
        with pytest.raises(TypeError, match="a transform must be callable, got int"):
            ReplayBuffer(transform=[1])

    def test_iteration_is_endless_with_replacement(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        rb.extend(torch.arange(3))
        it = iter(rb)
        assert [next(it).shape for _ in range(20)] == [torch.Size([2])] * 20

    def test_iteration_without_replacement_is_one_epoch(self):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(), batch_size=4
        )
        rb.extend(torch.arange(10))
        for _ in range(2):
            batches = list(rb)
            assert sorted(torch.cat(batches).tolist()) == list(range(10))

    def test_iterating_needs_batch_size(self):
        with pytest.raises(RuntimeError, match="Batch_size was not specified: iterating"):
            next(iter(ReplayBuffer()))

    def test_empty(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(5))
        rb.extend(torch.arange(4))
        rb.empty()
        assert len(rb) == 0
        assert rb.extend(torch.tensor([9])).tolist() == [0]
        assert rb[:].tolist() == [9]

    def test_getitem(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(5))
        rb.extend(torch.arange(10, 14))
        assert rb[1].item() == 11
        assert rb[torch.tensor([3, 0])].tolist() == [13, 10]

    def test_transform_on_sample_and_inverse_on_extend(self):
        class Scale(nn.Module):
            def forward(self, td):
                td["x"] = td["x"] * 10
                return td

            def inv(self, td):
                td = td.clone()
                td["x"] = td["x"] + 1
                return td

        rb = ReplayBuffer(storage=LazyTensorStorage(5), transform=Scale(), batch_size=3)
        rb.extend(TensorDict({"x": torch.zeros(2)}, [2]))
        assert rb.storage.get(slice(None))["x"].tolist() == [1.0, 1.0]
        torch.testing.assert_close(rb.sample()["x"], torch.full((3,), 10.0))
        rb.append_transform(lambda td: td.set("y", td["x"] + 1))
        assert rb.sample()["y"].tolist() == [11.0] * 3
        rb.insert_transform(0, lambda td: td.set("x", td["x"] * 0))
        assert rb.sample()["y"].tolist() == [1.0] * 3
        assert len(rb.transform) == 3

    def test_inverted_transform_runs_on_writes(self):
        # append_transform(t, invert=True): t runs on written data, its inv (if any) on
        # sampled data; a plain callable has none, so samples are the stored values
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
        data = TensorDict({"a": torch.zeros(10)}, [10])

        def add_one(td):
            td["a"] = td["a"] + 1
            return td

        rb.append_transform(add_one, invert=True)
        rb.extend(data)
        assert rb.storage.get(slice(None))["a"].tolist() == [1.0] * 10
        assert rb.sample()["a"].tolist() == [1.0] * 4

        class Shift(nn.Module):
            def forward(self, td):
                return td.set("a", td["a"] + 10)

            def inv(self, td):
                return td.set("a", td["a"] - 100)

        rb.insert_transform(0, Shift(), invert=True)
        assert rb.sample()["a"].tolist() == [-99.0] * 4  # Shift.inv runs on samples
        rb.extend(TensorDict({"a": torch.zeros(10)}, [10]))
        # writes run the inverted chain backwards: add_one, then Shift.forward
        assert rb.storage.get(slice(None))["a"].tolist() == [11.0] * 10

    def test_transform_chain(self):
        rb = ReplayBuffer(transform=lambda x: x + 1)
        assert len(rb.transform) == 1 and callable(rb.transform[0])
        rb.append_transform(lambda x: 2 * x)
        assert rb.transform(torch.zeros(1)).tolist() == [2.0]
        with pytest.raises(ValueError, match=r"between -2 and 2 .* got 3"):
            rb.insert_transform(3, lambda x: x)
        with pytest.raises(TypeError, match="a transform must be callable, got int"):
            rb.append_transform(1)
        rb.insert_transform(-2, lambda x: x - 1)
        assert rb.transform(torch.zeros(1)).tolist() == [0.0]

    def test_state_dict_is_torchrl_s(self):
        class Offset(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("loc", torch.zeros(()))

            def forward(self, x):
                return x + self.loc

        generator = torch.Generator().manual_seed(3)
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10), transform=Offset(), batch_size=3, generator=generator
        )
        rb.extend(torch.arange(10))
        rb.transform[0].loc.fill_(0.5)
        state = rb.state_dict()
        assert set(state) == {
            "_storage", "_sampler", "_writer", "_transforms", "_batch_size", "_rng",
            "_prefetch_state",
        }  # fmt: skip
        assert state["_batch_size"] == 3 and list(state["_transforms"]) == ["0.loc"]
        assert state["_rng"][1] == "cpu"
        first = rb.sample()
        other = ReplayBuffer(storage=LazyTensorStorage(10), transform=Offset())
        other.load_state_dict(state)
        # the same generator state, batch size and transform state: the same batch
        assert other.batch_size == 3
        torch.testing.assert_close(other.sample(), first)
        assert ReplayBuffer(storage=LazyTensorStorage(10)).state_dict()["_rng"] is None

    @pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
    def test_indexing_goes_through_the_transforms_as_torchrl(self, storage_cls, tmp_path):
        # TorchRL 0.14.1: rb[index] returns what sample would (transforms applied), a key
        # reads that entry of every item; the storage keeps the raw values
        kwargs = {"scratch_dir": tmp_path} if storage_cls is LazyMemmapStorage else {}
        rb = TensorDictReplayBuffer(storage=storage_cls(6, **kwargs), batch_size=2)
        x = torch.arange(4.0)
        rb.extend(TensorDict({"x": x, "next": {"x": x + 1}}, [4]))
        rb.append_transform(
            lambda td: td.set("x", td["x"] * 10).set(("next", "x"), -td["next", "x"])
        )
        assert rb[:]["x"].tolist() == [0.0, 10.0, 20.0, 30.0]
        assert rb[1:3]["next", "x"].tolist() == [-2.0, -3.0]
        assert rb[2]["x"].item() == 20.0
        assert rb[torch.tensor([3, 0])]["x"].tolist() == [30.0, 0.0]
        assert rb["x"].tolist() == [0.0, 10.0, 20.0, 30.0]
        assert rb["next", "x"].tolist() == [-1.0, -2.0, -3.0, -4.0]
        assert rb.storage.get(slice(None))["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert rb.storage.get(slice(None))["next", "x"].tolist() == [1.0, 2.0, 3.0, 4.0]

    def test_prefetch_returns_valid_batches(self, make_transitions, assert_consistent):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), prefetch=3, batch_size=8)
        rb.extend(make_transitions(50))
        for _ in range(20):
            batch = rb.sample()
            assert batch.batch_size == torch.Size([8])
            assert_consistent(batch)
        assert len(rb._prefetch_queue) == 3
        assert rb.sample(4).batch_size == torch.Size([4])
        assert rb._prefetch_batch_size == 4 and len(rb._prefetch_queue) == 3

    def test_prefetch_samples_in_background_threads(self):
        names = []

        def record(data):
            names.append(threading.current_thread().name)
            return data

        rb = ReplayBuffer(storage=LazyTensorStorage(10), prefetch=2, batch_size=2, transform=record)
        rb.extend(torch.arange(5))
        for _ in range(4):
            rb.sample()
        # the first batch (nothing queued yet) is sampled in the calling thread, as TorchRL
        assert names[0] == threading.current_thread().name
        assert len(names) > 1 and all(name.startswith("rl-replay-prefetch") for name in names[1:])

    def test_prefetch_keeps_epochs_exact(self):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(20),
            sampler=SamplerWithoutReplacement(),
            prefetch=3,
            batch_size=4,
        )
        rb.extend(torch.arange(10))
        for _ in range(3):
            assert sorted(torch.cat(list(rb)).tolist()) == list(range(10))

    def test_prefetch_propagates_errors_and_recovers(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), prefetch=2, batch_size=2)
        with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
            rb.sample()
        rb.extend(torch.arange(3))
        assert rb.sample().shape == (2,)

    def test_pin_memory_is_harmless_without_cuda(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(4), pin_memory=True)
        rb.extend(torch.arange(4))
        assert rb.sample(2).shape == (2,)

    @pytest.mark.gpu
    @requires_cuda
    def test_pin_memory_pins_batches(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), pin_memory=True)
        rb.extend(TensorDict({"a": torch.zeros(4)}, [4]))
        assert rb.sample(2)["a"].is_pinned()


class TestServiceBackendArguments:
    def test_direct_buffer(self):
        rb = ReplayBuffer(service_backend="direct", transport="direct", batch_size=2)
        assert rb.service_backend == "direct" and type(rb) is ReplayBuffer

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"service_backend": "process"}, "supports service_backend='direct' or 'ray', not"),
            ({"transport": "ray"}, "direct ReplayBuffer only supports transport='auto' or"),
            ({"transport_options": {"backend": "gloo"}}, "only valid for a remote ReplayBuffer"),
            ({"service_backend_options": {"x": 1}}, "configure a remote ReplayBuffer"),
        ],
    )
    def test_direct_buffer_errors(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            TensorDictReplayBuffer(**kwargs)


class TestTensorDictReplayBuffer:
    def test_sample_holds_index_and_data(self, make_transitions, assert_consistent):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=16)
        rb.extend(make_transitions(40))
        batch = rb.sample()
        assert_consistent(batch)
        torch.testing.assert_close(batch["index"], batch["id"])
        assert set(batch.keys()) == {"id", "observation", "action", "next", "index"}

    def test_failed_extend_leaves_the_buffer_unchanged(self, make_transitions):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(make_transitions(3))
        with pytest.raises(ValueError, match="key 'observation' has item shape"):
            rb.extend(make_transitions(2, obs_dim=5))
        assert len(rb) == 3 and rb.writer.state_dict()["_cursor"] == 3
        assert rb.extend(make_transitions(1)).tolist() == [3]

    def test_list_storage_path(self, make_transitions, assert_consistent):
        rb = TensorDictReplayBuffer(storage=ListStorage(10))
        rb.extend(make_transitions(6))
        batch = rb.sample(4)
        assert_consistent(batch)
        torch.testing.assert_close(batch["index"], batch["id"])

    def test_item_batch_dims(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(TensorDict({"a": torch.arange(12.0).reshape(4, 3)}, [4, 3]))
        batch = rb.sample(5)
        assert batch.batch_size == torch.Size([5, 3])
        torch.testing.assert_close(batch["a"][:, 0], batch["index"][:, 0].float() * 3)

    def test_collate_fn_must_give_tensordicts(self):
        rb = TensorDictReplayBuffer(storage=ListStorage(4), collate_fn=lambda x: x)
        rb.extend(TensorDict({"a": torch.zeros(2)}, [2]))
        with pytest.raises(TypeError, match="samples TensorDicts, the collate_fn returned list"):
            rb.sample(2)

    def test_slice_info_is_written(self, make_episodes):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(50), sampler=SliceSampler(slice_len=2), batch_size=4
        )
        rb.extend(make_episodes([5, 5]))
        batch = rb.sample()
        assert batch["next", "truncated"].squeeze(-1).tolist() == [False, True, False, True]

    def test_update_priority_is_ignored_without_prioritized_sampler(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        rb.extend(TensorDict({"a": torch.zeros(2)}, [2]))
        rb.update_tensordict_priority(rb.sample(2))


class TestPrioritizedBuffers:
    def test_prioritized_replay_buffer(self):
        torch.manual_seed(0)
        rb = PrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, eps=0.0, storage=LazyTensorStorage(10), batch_size=64
        )
        rb.extend(torch.arange(4))
        rb.update_priority(torch.arange(4), torch.tensor([1.0, 0.0, 0.0, 3.0]))
        data, info = rb.sample(return_info=True)
        assert set(data.tolist()) == {0, 3}
        expected = torch.where(data == 0, 1.0, 1 / 3)
        torch.testing.assert_close(info["priority_weight"], expected)
        # TorchRL's arguments: a given sampler replaces the built one
        own = PrioritizedSampler(10, alpha=0.5, beta=0.2)
        rb = PrioritizedReplayBuffer(alpha=1, beta=1, storage=LazyTensorStorage(10), sampler=own)
        assert rb.sampler is own and rb.sampler.alpha == 0.5
        with pytest.raises(TypeError, match="sampler_device cannot be passed when sampler"):
            PrioritizedReplayBuffer(alpha=1, beta=1, sampler=own, sampler_device="cpu")
        with pytest.raises(NotImplementedError, match=r"sync=False\) is not supported"):
            PrioritizedReplayBuffer(alpha=1, beta=1, sync=False)
        with pytest.raises(NotImplementedError, match=r"sync=False\) is not supported"):
            TensorDictPrioritizedReplayBuffer(alpha=1, beta=1, sync=False)

    def test_tensordict_prioritized_torchrl_keywords(self):
        gen = torch.Generator().manual_seed(3)
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.6,
            beta=0.4,
            priority_key="prio",
            eps=1e-4,
            storage=LazyTensorStorage(8),
            batch_size=3,
            reduction="mean",
            generator=gen,
            dim_extend=0,
            transport="direct",
        )
        assert rb.batch_size == 3 and rb.priority_key == "prio" and rb.reduction == "mean"
        assert rb.sampler.reduction == "mean" and rb.sampler._eps == 1e-4
        rb.extend(TensorDict({"a": torch.arange(4)}, [4]))
        assert rb.sample().shape == (3,)

    def test_tensordict_prioritized_keys_and_update(self, make_transitions, assert_consistent):
        torch.manual_seed(0)
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=0.5, eps=0.0, storage=LazyTensorStorage(64), batch_size=32
        )
        rb.extend(make_transitions(10))
        batch = rb.sample()
        assert_consistent(batch)
        assert {"priority_weight", "_weight", "index"} <= set(batch.keys())
        torch.testing.assert_close(batch["priority_weight"], torch.ones(32))
        batch["td_error"] = (batch["index"] == 3).float().unsqueeze(-1) * 2.0
        rb.update_tensordict_priority(batch)
        assert set(rb.sample()["index"].tolist()) == {3}
        priorities = rb.sampler._sum_tree[torch.arange(10)]
        assert priorities[3].item() == 2.0

    def test_priority_read_at_extend(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=0.5, eps=0.0, storage=LazyTensorStorage(8), priority_key="p"
        )
        rb.extend(TensorDict({"p": torch.tensor([[1.0, 4.0], [2.0, 0.5]])}, [2]))
        torch.testing.assert_close(rb.sampler._sum_tree[torch.arange(2)], torch.tensor([4.0, 2.0]))

    def test_bad_priority_at_extend_writes_nothing(self):
        rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(8))
        bad = TensorDict({"td_error": torch.tensor([1.0, -2.0])}, [2])
        with pytest.raises(ValueError, match="finite and non-negative, got -2.0"):
            rb.extend(bad)
        assert len(rb) == 0

    def test_priorities_of_an_oversized_extend(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=0.5, eps=0.0, storage=LazyTensorStorage(2)
        )
        rb.extend(TensorDict({"td_error": torch.tensor([1.0, 2.0, 3.0])}, [3]))
        torch.testing.assert_close(rb.sampler._sum_tree[torch.arange(2)], torch.tensor([3.0, 2.0]))

    def test_update_tensordict_priority_errors(self):
        rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(8))
        rb.extend(TensorDict({"a": torch.zeros(2)}, [2]))
        batch = rb.sample(2)
        with pytest.raises(KeyError, match="no priority key 'td_error'"):
            rb.update_tensordict_priority(batch)
        batch["td_error"] = torch.tensor([1.0, float("nan")])
        with pytest.raises(ValueError, match="finite and non-negative, got nan"):
            rb.update_tensordict_priority(batch)

    def test_max_value_writer_skips_dropped_items(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0,
            beta=0.5,
            eps=0.0,
            storage=LazyTensorStorage(2),
            writer=TensorDictMaxValueWriter(rank_key="r"),
        )
        rb.extend(TensorDict({"r": torch.tensor([1.0, 3.0, 2.0]), "td_error": torch.ones(3)}, [3]))
        assert len(rb) == 2
        assert sorted(rb[:]["r"].tolist()) == [2.0, 3.0]

    @pytest.mark.gpu
    @requires_cuda
    def test_cuda_prioritized_buffer(self, make_transitions, assert_consistent):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(64, device="cuda"), batch_size=16
        )
        rb.extend(make_transitions(20))
        batch = rb.sample()
        assert batch.device.type == "cuda"
        assert_consistent(batch.cpu())
        batch["td_error"] = torch.rand(16, device="cuda")
        rb.update_tensordict_priority(batch)
        assert rb.sampler._device.type == "cuda"


def _fill(rb, make_transitions):
    rb.extend(make_transitions(30))
    rb.extend(make_transitions(15, start=30))


@pytest.mark.parametrize(
    "factory",
    [
        lambda tmp: TensorDictReplayBuffer(storage=LazyTensorStorage(40)),
        lambda tmp: TensorDictReplayBuffer(storage=ListStorage(40)),
        lambda tmp: TensorDictReplayBuffer(storage=LazyMemmapStorage(40, scratch_dir=tmp)),
        lambda tmp: TensorDictReplayBuffer(
            storage=LazyTensorStorage(40), sampler=SamplerWithoutReplacement()
        ),
        lambda tmp: TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(40)
        ),
    ],
    ids=["tensor", "list", "memmap", "without-replacement", "prioritized"],
)
class TestCheckpoints:
    def test_state_dict_round_trip(self, factory, tmp_path, make_transitions):
        torch.manual_seed(0)
        rb = factory(tmp_path / "a")
        _fill(rb, make_transitions)
        rb.sample(5)
        if isinstance(rb, TensorDictPrioritizedReplayBuffer):
            rb.update_priority(torch.arange(40), torch.rand(40) * 3)
        rb.dumps(tmp_path / "ckpt")
        other = factory(tmp_path / "b")
        other.loads(tmp_path / "ckpt")
        assert len(other) == len(rb) == 40
        assert (other[torch.arange(40)] == rb[torch.arange(40)]).all()
        assert other.writer.state_dict() == rb.writer.state_dict()
        s1, s2 = rb.sampler.state_dict(), other.sampler.state_dict()
        assert s1.keys() == s2.keys()
        for key in s1:
            if isinstance(s1[key], torch.Tensor):
                torch.testing.assert_close(s1[key], s2[key])
            else:
                assert s1[key] == s2[key]
        torch.manual_seed(1)
        a = rb.sample(6)
        torch.manual_seed(1)
        b = other.sample(6)
        assert (a == b).all()
        # the next write lands at the same place
        assert (rb.extend(make_transitions(2)) == other.extend(make_transitions(2))).all()


class TestCheckpointSafety:
    def test_loads_never_unpickles_code(self, tmp_path):
        marker = tmp_path / "pwned"

        class Evil:
            def __reduce__(self):
                return (open, (str(marker), "w"))

        (tmp_path / "ckpt").mkdir()
        with open(tmp_path / "ckpt" / "replay_buffer.pt", "wb") as f:
            torch.save({"version": 1, "evil": Evil()}, f)
        rb = ReplayBuffer(storage=LazyTensorStorage(4))
        with pytest.raises(CheckpointError, match="refusing to load .*replay_buffer.pt"):
            rb.loads(tmp_path / "ckpt")
        assert not marker.exists()

    def test_missing_checkpoint(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="no replay-buffer checkpoint at"):
            ReplayBuffer().loads(tmp_path)

    def test_wrong_version(self, tmp_path):
        (tmp_path / "replay_buffer.pt").write_bytes(b"")
        torch.save({"version": 99}, tmp_path / "replay_buffer.pt")
        with pytest.raises(ValueError, match="checkpoint version 99, expected 2"):
            ReplayBuffer().loads(tmp_path)

    def test_structure_mismatch_on_load(self, tmp_path, make_transitions):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(make_transitions(3))
        rb.dumps(tmp_path)
        other = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        other.extend(TensorDict({"x": torch.zeros(1)}, [1]))
        with pytest.raises(KeyError, match="missing the key 'x'"):
            other.loads(tmp_path)

    def test_dumps_overwrites_and_leaves_no_temporaries(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(torch.arange(3))
        rb.dumps(tmp_path)
        rb.extend(torch.arange(3, 5))
        rb.dumps(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["replay_buffer.pt"]
        other = ReplayBuffer(storage=LazyTensorStorage(10))
        other.loads(tmp_path)
        assert other[:].tolist() == [0, 1, 2, 3, 4]

    def test_list_storage_with_unsaveable_items(self, tmp_path):
        rb = ReplayBuffer(collate_fn=lambda x: x)
        rb.add(object())
        with pytest.raises(TypeError, match="cannot checkpoint an item of type object"):
            rb.dumps(tmp_path)

    def test_tensor_storage_given(self):
        s = TensorStorage(torch.zeros(4, 2))
        rb = ReplayBuffer(storage=s, sampler=PrioritizedSampler(4, 0.5, 0.5))
        rb.extend(torch.ones(2, 2))
        other = ReplayBuffer(
            storage=TensorStorage(torch.zeros(4, 2)), sampler=PrioritizedSampler(4, 0.5, 0.5)
        )
        other.load_state_dict(rb.state_dict())
        # the 4 given items are stored, the first two rewritten
        torch.testing.assert_close(other[:], torch.tensor([[1.0, 1.0]] * 2 + [[0.0, 0.0]] * 2))


class TestInPlaceRewrites:
    """``rb[index] = value``, ``set_``, ``set_at_``, ``update_``, ``write_all``, as TorchRL."""

    @staticmethod
    def _data(n: int = 10) -> TensorDict:
        return TensorDict({"a": torch.arange(n), ("b", "c"): -torch.arange(n)}, [n])

    @pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage, ListStorage])
    def test_setitem_writes_positions_without_moving_the_cursor(self, storage_cls):
        collate = torch.stack if storage_cls is ListStorage else None
        rb = ReplayBuffer(storage=storage_cls(12), collate_fn=collate)
        rb.extend(self._data())
        rb[3:5] = TensorDict({"a": torch.tensor([30, 40]), ("b", "c"): torch.zeros(2).long()}, [2])
        rb[torch.tensor([7, 0])] = TensorDict(
            {"a": torch.tensor([70, 0]), ("b", "c"): torch.ones(2).long()}, [2]
        )
        rb[[9]] = TensorDict({"a": torch.tensor([90]), ("b", "c"): torch.ones(1).long()}, [1])
        expected = [0, 1, 2, 30, 40, 5, 6, 70, 8, 90]
        assert rb[:]["a"].tolist() == expected
        assert rb[:]["b", "c"].tolist() == [1, -1, -2, 0, 0, -5, -6, 1, -8, 1]
        assert len(rb) == 10 and rb.writer._cursor == 10 and rb.write_count == 10
        assert rb.extend(self._data(1)).tolist() == [10]  # the next write goes on as before

    def test_setitem_goes_through_the_inverted_transforms(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(12))
        rb.append_transform(lambda td: td.set("a", td["a"] + 1), invert=True)
        rb.append_transform(lambda td: td.set("a", td["a"] * 10))
        rb.extend(self._data())
        rb[2:4] = TensorDict({"a": torch.zeros(2).long(), ("b", "c"): torch.zeros(2).long()}, [2])
        assert rb.storage.get(slice(0, 5))["a"].tolist() == [1, 2, 1, 1, 5]
        assert rb[2:4]["a"].tolist() == [10, 10]

    def test_setitem_of_a_two_dim_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(20, ndim=2))
        data = TensorDict({"a": torch.arange(10).expand(2, 10)}, [2, 10])
        rb.extend(data)
        rb[0, 3:4] = TensorDict({"a": torch.tensor([-1])}, [1])
        rb[:, 6:8] = TensorDict({"a": torch.tensor([-2, -3])}, [2])  # broadcast over dim 0
        expected = torch.arange(10).expand(2, 10).clone()
        expected[0, 3] = -1
        expected[:, 6:8] = torch.tensor([-2, -3])
        assert rb[:]["a"].tolist() == expected.tolist()

    def test_key_set_and_update(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=5)
        rb.extend(TensorDict({"a": torch.zeros(10), "b": torch.ones(10)}, [10]))
        rb.set_at_("a", torch.tensor([99.0, 98.0]), torch.tensor([2, 5]))
        assert rb["a"].tolist() == [0, 0, 99, 0, 0, 98, 0, 0, 0, 0]
        rb["b"] = torch.full((10,), 3.0)
        assert rb["b"].tolist() == [3.0] * 10
        rb.set_("a", torch.arange(10.0))
        rb.update_(TensorDict({"b": torch.full((10,), 8.0)}, [10]))
        assert rb["a"].tolist() == list(range(10)) and rb["b"].tolist() == [8.0] * 10
        rb_tensor = ReplayBuffer(storage=LazyTensorStorage(4))
        rb_tensor.extend(torch.zeros(2))
        with pytest.raises(TypeError, match="set_ rewrites the entries of stored TensorDicts"):
            rb_tensor.set_("a", torch.zeros(2))

    def test_a_part_of_the_entries_rewrites_those_only(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        rb.extend(TensorDict({"obs": torch.arange(4), "other": -torch.arange(4)}, [4]))
        rb[1] = TensorDict({"obs": torch.tensor(10)}, [])
        rb[2:4] = TensorDict({"other": torch.tensor([7, 7])}, [2])
        stored = rb.storage.get(slice(None))
        assert stored["obs"].tolist() == [0, 10, 2, 3]
        assert stored["other"].tolist() == [0, -1, 7, 7]
        assert stored["index"].tolist() == [0, 1, 2, 3]  # written by the writer, kept

    def test_read_and_write_all_in_order(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(TensorDict({"obs": torch.arange(6)}, [6]))
        assert rb.read_all_in_order()["obs"].tolist() == list(range(6))
        part = rb.read_all_in_order(end=3)
        assert part["obs"].tolist() == [0, 1, 2]
        part["obs"] = part["obs"] + 10
        rb.write_all(part)
        assert rb.read_all_in_order()["obs"].tolist() == [10, 11, 12, 3, 4, 5]

    def test_a_rewrite_may_add_entries(self):
        # as TorchRL: e.g. value targets computed over the whole buffer, written back
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        rb.extend(TensorDict({"obs": torch.arange(6)}, [6]))
        data = rb.read_all_in_order()
        data["value_target"] = data["obs"] * 2.0
        rb.write_all(data)
        assert rb[:]["value_target"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        rb[1] = TensorDict({"extra": torch.ones(2)}, [])  # a single item, a new entry
        assert rb[0:3]["extra"].tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
        # extend stays strict: a batch with another key is an error
        with pytest.raises(KeyError, match="data is missing the key"):
            rb.extend(TensorDict({"obs": torch.arange(2)}, [2]))
        memmap = ReplayBuffer(storage=LazyMemmapStorage(8))
        memmap.extend(TensorDict({"a": torch.arange(4)}, [4]))
        with pytest.raises(KeyError, match="LazyMemmapStorage cannot add entries"):
            memmap[0:1] = TensorDict({"a": torch.tensor([1]), "z": torch.ones(1)}, [1])


class TestStats:
    def test_counters(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        assert rb.stats() == {
            "size": 0,
            "write_count": 0,
            "prefetch_queue_size": 0,
            "initialized": True,
            "capacity": 10,
            "utilization": 0.0,
        }
        rb.extend(torch.arange(15))
        stats = rb.stats()
        assert (stats["size"], stats["write_count"], stats["utilization"]) == (10, 15, 1.0)
        rb.sample()
        assert rb.stats() == stats  # sampling changes none of them

    def test_empty_may_keep_the_write_count(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(torch.arange(6))
        rb.empty(empty_write_count=False)
        assert (len(rb), rb.write_count) == (0, 6)
        assert rb.extend(torch.arange(2)).tolist() == [0, 1]  # the cursor was reset
        rb.empty()
        assert rb.write_count == 0

    def test_prefetched_batches_are_counted(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=3)
        rb.extend(torch.arange(10))
        rb.sample()
        assert rb.stats()["prefetch_queue_size"] == 3


class TestImmutableDatasetWriter:
    def test_every_write_raises(self):
        storage = LazyTensorStorage(4)
        storage.set(torch.arange(4), torch.arange(4) * 10)
        rb = ReplayBuffer(storage=storage, writer=ImmutableDatasetWriter(), batch_size=2)
        assert (len(rb), rb.write_count, rb.stats()["write_count"]) == (4, 0, 0)
        assert set(rb.sample().tolist()) <= {0, 10, 20, 30}
        for write in (lambda: rb.add(torch.tensor(1)), lambda: rb.extend(torch.zeros(2)), rb.empty):
            with pytest.raises(RuntimeError, match="This dataset doesn't allow writing"):
                write()
        assert len(rb) == 4


class TestStorageRevision:
    """Each change of the stored items advances the storage's revision once."""

    def test_every_write_path(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        revisions = [rb.storage._mutation_revision]
        rb.extend(TensorDict({"obs": torch.arange(4)}, [4]))
        revisions.append(rb.storage._mutation_revision)
        rb[0] = TensorDict({"obs": torch.tensor(10)}, [])
        revisions.append(rb.storage._mutation_revision)
        rb.set_at_("obs", torch.tensor([11]), torch.tensor([1]))
        revisions.append(rb.storage._mutation_revision)
        rb.set_("obs", torch.arange(4) + 20)
        revisions.append(rb.storage._mutation_revision)
        rb.update_(TensorDict({"obs": torch.arange(4) + 30}, [4]))
        revisions.append(rb.storage._mutation_revision)
        rb.load_state_dict(rb.state_dict())
        revisions.append(rb.storage._mutation_revision)
        rb.empty()
        revisions.append(rb.storage._mutation_revision)
        assert revisions == list(range(8))

    def test_list_storage(self):
        rb = ReplayBuffer(storage=ListStorage(4))
        rb.extend([1, 2])
        rb.add(3)
        rb.empty()
        assert rb.storage._mutation_revision == 3

    def test_slice_cache_follows_writes_of_another_buffer(self, make_episodes):
        storage = LazyTensorStorage(12)
        reader = TensorDictReplayBuffer(
            storage=storage,
            sampler=SliceSampler(slice_len=3, traj_key="episode", cache_values=True),
        )
        writer = TensorDictReplayBuffer(storage=storage)
        writer.extend(make_episodes([6, 6]))
        assert reader.sample(6)["episode"].unique().numel() <= 2
        # the other buffer rewrites everything as one episode of 12 steps
        data = make_episodes([12])
        writer.extend(data)
        torch.manual_seed(0)
        for _ in range(5):
            batch = reader.sample(6)
            assert batch["episode"].tolist() == [0] * 6
            steps = batch["step"].reshape(2, 3)
            torch.testing.assert_close(steps - steps[:, :1], torch.arange(3).expand(2, 3))


class TestPrefetchQueue:
    """Batches sampled ahead: order, checkpoints (state_dict, dumps, pickle), epochs."""

    @staticmethod
    def _buffer(seed=0, prefetch=2, sampler=None, storage=None, size=20, values=None):
        rb = ReplayBuffer(
            storage=ListStorage(size) if storage is None else storage,
            sampler=sampler,
            batch_size=3,
            prefetch=prefetch,
            generator=torch.Generator().manual_seed(seed),
        )
        rb.extend(torch.arange(size) if values is None else values)
        return rb

    def test_same_batches_as_without_prefetch(self):
        plain, ahead = self._buffer(prefetch=0), self._buffer(prefetch=3)
        for _ in range(6):
            assert torch.equal(plain.sample(), ahead.sample())
        assert len(ahead._prefetch_queue) == 3

    @pytest.mark.parametrize("how", ["state_dict", "dumps", "pickle"])
    def test_checkpoint_restores_the_queued_batches(self, how, tmp_path):
        storage = LazyTensorStorage(20) if how == "dumps" else None
        source = self._buffer(storage=storage)
        source.sample()
        if how == "state_dict":
            state = source.state_dict()
            assert len(state["_prefetch_state"]["queue"]) == 2
            restored = self._buffer(seed=1)
            restored.sample()
            restored.load_state_dict(state)
        elif how == "dumps":
            source.dumps(tmp_path)
            restored = self._buffer(seed=1, storage=LazyTensorStorage(20))
            restored.sample()
            restored.loads(tmp_path)
        else:
            restored = pickle.loads(pickle.dumps(source))
        for _ in range(4):
            (a, info_a), (b, info_b) = (
                source.sample(return_info=True),
                restored.sample(return_info=True),
            )
            assert torch.equal(a, b) and torch.equal(info_a["index"], info_b["index"])

    def test_saved_queue_is_a_copy_keeping_requires_grad(self):
        values = torch.arange(20.0, requires_grad=True) * 2  # not leaves
        source = self._buffer(values=values)
        source.sample()
        state = source.state_dict()
        saved = state["_prefetch_state"]["queue"][0][0]
        assert saved.is_leaf and saved.requires_grad
        queued = source._prefetch_queue[0].result()[0]
        saved.detach().fill_(-1)
        assert not torch.equal(saved, queued)
        restored = pickle.loads(pickle.dumps(source))
        assert restored._prefetch_queue[0].result()[0].requires_grad

    def test_capacity_mismatch_is_refused_and_changes_nothing(self):
        source = self._buffer(prefetch=2)
        source.sample()
        restored = self._buffer(prefetch=1)
        restored.sample()
        queue = tuple(restored._prefetch_queue)
        with pytest.raises(
            RuntimeError,
            match="prefetch queue with capacity 2 into a replay buffer with capacity 1",
        ):
            restored.load_state_dict(source.state_dict())
        assert tuple(restored._prefetch_queue) == queue

    def test_state_without_a_queue_empties_it(self):
        source = self._buffer()
        source.sample()
        state = source.state_dict()
        del state["_prefetch_state"]
        restored = self._buffer()
        restored.sample()
        restored.load_state_dict(state)
        assert not restored._prefetch_queue

    def test_no_batch_sampled_past_the_epoch(self):
        rb = self._buffer(size=10, sampler=SamplerWithoutReplacement(drop_last=False))
        first = rb.sample()
        rest = list(rb)  # the two queued batches and the last item: one epoch in all
        assert [len(b) for b in rest] == [3, 3, 1]
        assert torch.equal(torch.cat([first, *rest]).sort().values, torch.arange(10))
        # the next epoch starts when it is asked for
        assert sorted(torch.cat(list(rb)).tolist()) == list(range(10))

    def test_shared_buffers_cannot_prefetch(self):
        with pytest.raises(
            ValueError, match="Cannot share prefetched replay buffers.*prefetch=0 or shared=False"
        ):
            ReplayBuffer(storage=LazyTensorStorage(10), prefetch=1, shared=True)
