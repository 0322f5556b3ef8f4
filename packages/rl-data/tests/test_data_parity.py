"""TorchRL 0.14 arguments, methods and classes of rl.data, one test class per item.

Literal expected values marked "TorchRL 0.14.1" were produced by TorchRL on the same
inputs.
"""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    CompressedListStorage,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    LinearScheduler,
    ListStorage,
    MultiStep,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    SamplerEnsemble,
    SamplerWithoutReplacement,
    SliceSampler,
    StepScheduler,
    StorageEnsemble,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
    TensorStorageCheckpointer,
    WriterEnsemble,
    find_start_stop_traj,
)


def _td(n: int, **extra) -> TensorDict:
    return TensorDict({"x": torch.arange(n, dtype=torch.float32), **extra}, batch_size=[n])


class TestBufferArguments:
    def test_generator_makes_sampling_reproducible(self):
        def draws(seed: int) -> list[int]:
            rb = ReplayBuffer(
                storage=LazyTensorStorage(100), generator=torch.Generator().manual_seed(seed)
            )
            rb.extend(torch.arange(100))
            torch.manual_seed(torch.seed())  # the global generator moves on, unused
            return rb.sample(16).tolist()

        assert draws(1) == draws(1) != draws(2)

    @pytest.mark.parametrize(
        "sampler",
        [
            lambda: SamplerWithoutReplacement(),
            lambda: PrioritizedSampler(50, alpha=0.7, beta=0.5),
            lambda: SliceSampler(slice_len=5, traj_key="ep"),
        ],
    )
    def test_generator_reaches_every_sampler(self, sampler):
        def draws() -> list[int]:
            rb = TensorDictReplayBuffer(
                storage=LazyTensorStorage(50),
                sampler=sampler(),
                generator=torch.Generator().manual_seed(0),
            )
            rb.extend(_td(50, ep=torch.arange(50) // 10))
            return [rb.sample(10)["index"].tolist() for _ in range(3)]

        first = draws()
        torch.manual_seed(99)
        assert draws() == first

    def test_bad_generator(self):
        with pytest.raises(TypeError, match="generator must be a torch.Generator, got int"):
            ReplayBuffer(generator=3)

    def test_shared_puts_tensor_storages_in_shared_memory(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), shared=True, compilable=True)
        rb.extend(_td(3))
        assert rb.shared and rb.storage._storage.is_shared()

    def test_dim_extend(self):
        data = torch.arange(12).reshape(3, 4)  # extended along dim 1: 4 items of 3
        rb = ReplayBuffer(storage=LazyTensorStorage(10), dim_extend=1)
        index = rb.extend(data)
        assert index.tolist() == [0, 1, 2, 3]
        torch.testing.assert_close(rb.storage[: len(rb)], data.t())
        torch.testing.assert_close(rb[:], data)
        with pytest.raises(ValueError, match="dim_extend must be a non-negative int, got -1"):
            ReplayBuffer(dim_extend=-1)

    def test_checkpointer(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=TensorStorageCheckpointer())
        rb.extend(torch.arange(6))
        rb.dumps(tmp_path)
        assert (tmp_path / "storage").is_dir()
        other = ReplayBuffer(
            storage=LazyTensorStorage(10), checkpointer=TensorStorageCheckpointer()
        )
        other.loads(tmp_path)
        assert other[:].tolist() == list(range(6)) and other.write_count == 6
        plain = ReplayBuffer(storage=LazyTensorStorage(10))
        with pytest.raises(ValueError, match="saved with a storage checkpointer"):
            plain.loads(tmp_path)
        with pytest.raises(TypeError, match="has no dumps"):
            ReplayBuffer(checkpointer=object())

    def test_sample_return_info(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(torch.arange(10) * 10)
        data, info = rb.sample(5, return_info=True)
        torch.testing.assert_close(data, info["index"] * 10)


class TestMultiDimStorage:
    @staticmethod
    def _rollout(B: int = 3, T: int = 8) -> TensorDict:
        """[B, T] with episode ids that change at t = 4 in every env."""
        t = torch.arange(T).expand(B, T)
        return TensorDict(
            {
                "t": t,
                "env": torch.arange(B)[:, None].expand(B, T),
                "ep": torch.arange(B)[:, None] * 10 + (t >= 4),
                ("next", "done"): (t == 3).unsqueeze(-1),
            },
            batch_size=[B, T],
        )

    def test_layout_and_index(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20, ndim=2), batch_size=4)
        index = rb.extend(self._rollout(B=4, T=3))
        # TorchRL 0.14.1: time goes along the storage's dim 0, [5, 4] for max_size=20
        assert rb.storage._storage.shape == (5, 4) and rb.storage.shape == (3, 4)
        assert len(rb) == 12 and rb.storage.max_size == 20
        assert index[:5].tolist() == [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0]]
        sample = rb.sample()
        assert sample["index"].shape == (4, 2)
        rows, cols = sample["index"].unbind(-1)
        assert sample["t"].tolist() == rows.tolist() and sample["env"].tolist() == cols.tolist()
        torch.testing.assert_close(rb[:]["t"], self._rollout(B=4, T=3)["t"])

    def test_wraps_by_rows(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(20, ndim=2))
        rb.extend(self._rollout(B=4, T=3))
        index = rb.extend(self._rollout(B=4, T=3))
        assert index[:, 0].unique().tolist() == [0, 3, 4] and len(rb) == 20
        assert rb.write_count == 24

    def test_samplers_cover_items(self):
        data = self._rollout(B=2, T=5)
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10, ndim=2), sampler=SamplerWithoutReplacement()
        )
        rb.extend(data)
        batches = [rb.sample(5) for _ in range(2)]
        pairs = torch.cat([b["env"] * 10 + b["t"] for b in batches]).sort().values
        assert pairs.tolist() == sorted((data["env"] * 10 + data["t"]).reshape(-1).tolist())
        uniform = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), sampler=RandomSampler())
        uniform.extend(data)
        rows, cols = uniform.sample(200, return_info=True)[1]["index"]
        assert rows.max() < 5 and cols.max() < 2

    def test_prioritized_with_coordinates(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(20, ndim=2),
            sampler=PrioritizedSampler(20, alpha=1.0, beta=1.0, eps=0.0),
            batch_size=16,
        )
        rb.extend(self._rollout(B=2, T=5))
        rb.update_priority(torch.tensor([[0, 0], [1, 1], [2, 0]]), torch.zeros(3))
        rb.update_priority(torch.tensor([[2, 1]]), torch.tensor([1000.0]))
        sample = rb.sample()
        assert (sample["env"] * 10 + sample["t"]).eq(12).float().mean() > 0.9
        sample["td_error"] = torch.zeros(16)
        rb.update_tensordict_priority(sample)  # [16, 2] index, one priority each
        assert rb.sampler._sum_tree[torch.tensor([5])].item() == 0.0

    def test_slices_stay_within_a_column(self):
        for sampler in (SliceSampler(slice_len=4, traj_key="ep"), SliceSampler(slice_len=4)):
            rb = TensorDictReplayBuffer(
                storage=LazyTensorStorage(100, ndim=2), sampler=sampler, batch_size=12
            )
            rb.extend(self._rollout())
            for _ in range(5):
                batch = rb.sample().reshape(3, 4)
                assert (batch["env"] == batch["env"][:, :1]).all()
                assert (batch["ep"] == batch["ep"][:, :1]).all()
                torch.testing.assert_close(batch["t"], batch["t"][:, :1] + torch.arange(4))
                assert batch["next", "truncated"][:, -1].all()

    def test_state_dict_round_trip(self, tmp_path):
        storage = LazyMemmapStorage(20, ndim=2, scratch_dir=tmp_path)
        rb = TensorDictReplayBuffer(storage=storage)
        rb.extend(self._rollout(B=4, T=3))
        other = TensorDictReplayBuffer(storage=LazyTensorStorage(20, ndim=2))
        other.load_state_dict(rb.state_dict())
        assert len(other) == 12
        torch.testing.assert_close(other[:]["ep"], rb[:]["ep"])

    def test_bad_ndim(self):
        with pytest.raises(ValueError, match="ndim must be an int >= 1, got 0"):
            LazyTensorStorage(10, ndim=0)


class TestComponentCheckpoints:
    def test_storage_sampler_writer_dumps_and_loads(self, tmp_path):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(8),
            sampler=PrioritizedSampler(8, alpha=0.6, beta=0.4),
            writer=RoundRobinWriter(),
        )
        rb.extend(torch.arange(5))
        rb.update_priority(torch.arange(5), torch.tensor([1.0, 2.0, 3.0, 4.0, 9.0]))
        rb.storage.dumps(tmp_path / "storage")
        rb.sampler.dumps(tmp_path / "sampler")
        rb.writer.dumps(tmp_path / "writer")
        storage, sampler, writer = (
            LazyTensorStorage(8),
            PrioritizedSampler(8, alpha=0.1, beta=0.1),
            RoundRobinWriter(),
        )
        storage.loads(tmp_path / "storage")
        sampler.loads(tmp_path / "sampler")
        writer.loads(tmp_path / "writer")
        assert storage[:5].tolist() == list(range(5))
        assert (sampler.alpha, sampler.beta, sampler.default_priority) == (0.6, 0.4, 9.0)
        everything = torch.arange(8)
        torch.testing.assert_close(sampler._sum_tree[everything], rb.sampler._sum_tree[everything])
        assert writer.state_dict() == rb.writer.state_dict() and writer.write_count == 5
        with pytest.raises(FileNotFoundError, match="no RoundRobinWriter state at"):
            RoundRobinWriter().loads(tmp_path / "nothing")


class TestWriterGenerations:
    def test_write_count_and_generations(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(3),
            writer=TensorDictRoundRobinWriter(track_generations=True),
        )
        rb.extend(_td(2))
        rb.add(_td(1)[0])
        rb.extend(_td(2))
        assert rb.write_count == 5
        assert rb.writer.generations_of(torch.arange(3)).tolist() == [1, 1, 0]
        sample, info = rb.sample(6, return_info=True)
        expected = torch.tensor([1, 1, 0])[sample["index"]]
        assert sample["index_generation"].tolist() == expected.tolist()
        assert info["index_generation"].tolist() == expected.tolist()

    def test_untracked_generations_are_minus_one(self):
        # as TorchRL: no counters, so no usable stamp
        assert RoundRobinWriter().generations_of(0).tolist() == -1
        assert RoundRobinWriter().generations_of(torch.arange(3)).tolist() == [-1] * 3
        assert TensorDictMaxValueWriter().generations_of(torch.arange(2)).tolist() == [-1] * 2

    def test_generations_live_on_the_storage(self):
        storage = LazyTensorStorage(4)
        tracking = ReplayBuffer(storage=storage, writer=RoundRobinWriter(track_generations=True))
        plain = ReplayBuffer(storage=storage)
        index = tracking.extend(torch.arange(4))
        assert tracking.writer.generations_of(index).tolist() == [0, 0, 0, 0]
        plain.extend(torch.arange(2))  # the other buffer's writes count too
        assert tracking.writer.generations_of(index).tolist() == [1, 1, 0, 0]
        assert not plain.writer.tracks_generations
        assert plain.writer.generations_of(index).tolist() == [-1] * 4
        # a storage nobody tracks gets no counters
        other = ReplayBuffer(storage=LazyTensorStorage(4))
        other.extend(torch.arange(4))
        assert other.storage._slot_generations is None

    def test_an_extend_that_wraps_counts_every_write(self):
        # 10 items into 4 slots: slots 0 and 1 are written three times, 2 and 3 twice
        rb = ReplayBuffer(
            storage=LazyTensorStorage(4), writer=RoundRobinWriter(track_generations=True)
        )
        rb.extend(torch.arange(10))
        assert rb.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 1, 1]
        assert rb[:].tolist() == [8, 9, 6, 7]

    def test_empty_advances_written_slots(self):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(4), writer=RoundRobinWriter(track_generations=True)
        )
        rb.extend(torch.arange(2))
        rb.empty()
        assert rb.writer.generations_of(torch.arange(4)).tolist() == [1, 1, -1, -1]
        rb.extend(torch.arange(3))
        assert rb.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 0, -1]

    def test_lookups(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(12, ndim=2),
            writer=TensorDictRoundRobinWriter(track_generations=True),
        )
        index = rb.extend(TensorDict({"a": torch.zeros(4, 3)}, [4, 3]))
        assert index.shape == (12, 2)  # [N, ndim] coordinates: one generation each
        assert rb.writer.generations_of(index).tolist() == [0] * 12
        assert rb.writer.generations_of(torch.tensor([1, 2])).tolist() == [0, 0]  # two rows
        single = rb.writer.generations_of((torch.tensor(1), torch.tensor(2)))
        assert single.shape == () and single.item() == 0
        # out of range: no stamp
        assert rb.writer.generations_of(torch.tensor([-1, 4, 100])).tolist() == [-1, -1, -1]

    def test_state_dict(self, tmp_path):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(4), writer=RoundRobinWriter(track_generations=True)
        )
        rb.extend(torch.arange(5))
        state = rb.writer.state_dict()
        assert state["_generation"].tolist() == [1, 0, 0, 0]
        other = ReplayBuffer(
            storage=LazyTensorStorage(4), writer=RoundRobinWriter(track_generations=True)
        )
        other.load_state_dict(rb.state_dict())
        assert other.writer.generations_of(torch.arange(4)).tolist() == [1, 0, 0, 0]
        # a writer without a storage keeps loaded counters until it gets one
        writer = RoundRobinWriter(track_generations=True)
        rb.writer.dumps(tmp_path)
        writer.loads(tmp_path)
        assert writer.generations_of(torch.arange(4)).tolist() == [1, 0, 0, 0]
        writer.register_storage(LazyTensorStorage(4))
        assert writer.generations_of(torch.arange(4)).tolist() == [1, 0, 0, 0]


class TestPrioritizedParameters:
    def test_alpha_setter_rewrites_the_trees(self):
        sampler = PrioritizedSampler(4, alpha=0.5, beta=1.0)
        rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler)
        rb.extend(torch.arange(4))
        rb.update_priority(torch.arange(4), torch.tensor([4.0, 1.0, 9.0, 0.25]))
        sampler.alpha = 1.0
        # TorchRL 0.14.1: [4.0, 1.0, 9.0, 0.25]
        torch.testing.assert_close(
            sampler._sum_tree[torch.arange(4)], torch.tensor([4.0, 1.0, 9.0, 0.25])
        )
        assert sampler._min_tree.query(0, 4) == pytest.approx(0.25)
        with pytest.raises(ValueError, match="alpha must be non-negative, got -1"):
            sampler.alpha = -1

    def test_max_priority_within_buffer(self):
        def default_after_overwrite(within: bool) -> float:
            sampler = PrioritizedSampler(4, alpha=0.5, beta=1.0, max_priority_within_buffer=within)
            rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler)
            rb.extend(torch.arange(4))
            rb.update_priority(torch.arange(4), torch.tensor([9.0, 2.0, 3.0, 1.0]))
            rb.extend(torch.tensor([10]))  # overwrites slot 0, which held the largest
            return sampler.default_priority

        assert default_after_overwrite(False) == 9.0  # the largest ever seen
        assert default_after_overwrite(True) == pytest.approx(3.0)  # the largest stored

    def test_lowering_the_max_within_buffer(self):
        sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, max_priority_within_buffer=True)
        rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler)
        rb.extend(torch.arange(4))
        rb.update_priority(torch.arange(4), torch.tensor([2.0, 5.0, 3.0, 1.0]))
        rb.update_priority(torch.tensor([1]), torch.tensor([0.5]))
        assert sampler.default_priority == pytest.approx(3.0)

    def test_schedulers(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.5, beta=0.4, storage=LazyTensorStorage(8), batch_size=4
        )
        rb.extend(_td(4))
        rb.update_priority(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 16.0]))
        beta = LinearScheduler(rb, "beta", final_value=1.0, num_steps=3)
        alpha = StepScheduler(rb.sampler, "alpha", gamma=2.0, n_steps=1, max_value=1.0)
        for _ in range(3):
            beta.step()
            alpha.step()
        assert rb.sampler.beta == pytest.approx(1.0) and rb.sampler.alpha == 1.0
        torch.testing.assert_close(
            rb.sampler._sum_tree[torch.arange(4)], torch.tensor([1.0, 4.0, 9.0, 16.0])
        )
        state = beta.state_dict()
        fresh = LinearScheduler(rb, "beta", final_value=1.0, num_steps=3)
        fresh.load_state_dict(state)
        assert fresh._step_cnt == 3
        with pytest.raises(ValueError, match="has no attribute 'gamma' to schedule"):
            LinearScheduler(rb, "gamma", final_value=1.0, num_steps=3)
        with pytest.raises(TypeError, match="needs a ReplayBuffer or a Sampler, got int"):
            LinearScheduler(3, "beta", final_value=1.0, num_steps=3)
        with pytest.raises(ValueError, match="mode must be 'multiplicative' or 'additive'"):
            StepScheduler(rb, "beta", mode="linear")


class TestListStorages:
    def test_lazy_stack_storage_holds_ragged_items(self):
        rb = ReplayBuffer(storage=LazyStackStorage())
        rb.extend([TensorDict(a=torch.ones(n)) for n in (2, 3, 4)])
        batch = rb[torch.tensor([2, 0])]
        assert [td["a"].shape[0] for td in batch.tensordicts] == [4, 2]
        assert rb.storage.max_size > 10**9  # max_size=None: unlimited

    def test_compressed_storage_round_trip(self):
        storage = CompressedListStorage(max_size=10)
        rb = ReplayBuffer(storage=storage)
        data = TensorDict(
            {"obs": torch.zeros(4, 64, 64, dtype=torch.uint8), ("n", "r"): torch.randn(4)},
            batch_size=[4],
        )
        rb.extend(data)
        assert storage.compressed_bytes() < 64 * 64  # 4 x 4096 bytes of zeros
        torch.testing.assert_close(rb[torch.arange(4)]["n", "r"], data["n", "r"])
        other = CompressedListStorage(max_size=10)
        other.load_state_dict(storage.state_dict())
        torch.testing.assert_close(other.get(3)["obs"], data["obs"][3])

    def test_custom_codec(self):
        calls = []

        def compress(t):
            calls.append("c")
            return t.flatten().view(torch.uint8).clone()

        def decompress(blob, meta):
            calls.append("d")
            return blob.view(getattr(torch, meta["dtype"])).reshape(meta["shape"])

        storage = CompressedListStorage(10, compression_fn=compress, decompression_fn=decompress)
        storage.set(0, torch.arange(6.0).reshape(2, 3))
        torch.testing.assert_close(storage.get(0), torch.arange(6.0).reshape(2, 3))
        assert calls == ["c", "d"]


class TestEnsembles:
    def _members(self):
        rbs = [TensorDictReplayBuffer(storage=LazyTensorStorage(10)) for _ in range(3)]
        for i, rb in enumerate(rbs):
            rb.extend(TensorDict({"x": torch.full((5,), float(i))}, [5]))
        return rbs

    def test_sample_from_all(self):
        rb = ReplayBufferEnsemble(*self._members(), sample_from_all=True, batch_size=9)
        batch = rb.sample()
        assert batch.batch_size == (3, 3)
        assert batch["x"][:, 0].tolist() == [0.0, 1.0, 2.0]
        assert batch["index", "buffer_ids"].tolist() == [[0] * 3, [1] * 3, [2] * 3]

    def test_probabilities(self):
        rb = ReplayBufferEnsemble(*self._members(), p=[0.0, 0.0, 1.0], num_buffer_sampled=2)
        assert (rb.sample(4)["x"] == 2.0).all()

    def test_from_components(self):
        rbs = self._members()
        rb = ReplayBufferEnsemble(
            storages=StorageEnsemble(*(r.storage for r in rbs)),
            samplers=SamplerEnsemble(*(r.sampler for r in rbs), sample_from_all=True),
            writers=WriterEnsemble(*(r.writer for r in rbs)),
        )
        assert rb.sample(6)["x"].shape == (3, 2) and len(rb.storage) == 15

    def test_errors(self):
        rb = ReplayBufferEnsemble(*self._members())
        with pytest.raises(RuntimeError, match=r"write to one of its members: rb\[i\]"):
            rb.extend(_td(2))
        with pytest.raises(ValueError, match="not divisible by num_buffer_sampled=3"):
            rb.sample(4)
        with pytest.raises(ValueError, match="p must hold 3 non-negative weights"):
            ReplayBufferEnsemble(*self._members(), p=[1.0, -1.0, 0.0])
        with pytest.raises(RuntimeError, match="pass p or sample_from_all=True, not both"):
            ReplayBufferEnsemble(*self._members(), p=[1, 1, 1], sample_from_all=True)

    @staticmethod
    def _empty_members(n):
        return [TensorDictReplayBuffer(storage=LazyTensorStorage(10)) for _ in range(n)]

    def test_routing_key(self):
        # values from TorchRL 0.14.1 on the same data
        rbs = self._empty_members(3)
        rb = ReplayBufferEnsemble(*rbs, routing_key="member")
        data = TensorDict({"member": torch.tensor([2, 0, 2, 1, 0]), "x": torch.arange(5)}, [5])
        out = rb.extend(data)
        assert out["buffer_ids"].tolist() == [2, 0, 2, 1, 0]
        assert out["index"].tolist() == [0, 0, 1, 0, 1]
        assert [r[:]["x"].tolist() for r in rbs] == [[1, 4], [3], [0, 2]]
        one = rb.add(TensorDict({"member": torch.tensor(1), "x": torch.tensor(9)}, []))
        assert (one["buffer_ids"].item(), one["index"].item()) == (1, 1)
        assert rbs[1][:]["x"].tolist() == [3, 9]

    def test_routing_dim(self):
        rbs = self._empty_members(2)
        rb = ReplayBufferEnsemble(*rbs, routing_dim=0)
        out = rb.extend(TensorDict({"x": torch.arange(6).reshape(2, 3)}, [2, 3]))
        assert out["buffer_ids"].tolist() == [0, 0, 0, 1, 1, 1]
        assert out["index"].tolist() == [0, 1, 2, 0, 1, 2]
        assert [r[:]["x"].tolist() for r in rbs] == [[0, 1, 2], [3, 4, 5]]

    def test_routing_errors(self):
        with pytest.raises(ValueError, match="routing_key and routing_dim are mutually"):
            ReplayBufferEnsemble(*self._empty_members(2), routing_key="m", routing_dim=0)
        with pytest.raises(TypeError, match="routing_dim must be an integer, got 0.5"):
            ReplayBufferEnsemble(*self._empty_members(2), routing_dim=0.5)
        rb = ReplayBufferEnsemble(*self._empty_members(2), routing_key="m")
        with pytest.raises(ValueError, match=r"member ids must lie in \[0, 1\], got \[0, 2\]"):
            rb.extend(TensorDict({"m": torch.tensor([0, 2])}, [2]))
        with pytest.raises(TypeError, match="member ids must be integers, got dtype torch.float32"):
            rb.extend(TensorDict({"m": torch.tensor([0.0, 1.0])}, [2]))
        with pytest.raises(ValueError, match="one member id per record, got shape"):
            rb.extend(TensorDict({"m": torch.zeros(2, 3, dtype=torch.long)}, [2]))
        rb = ReplayBufferEnsemble(*self._empty_members(2), routing_dim=1)
        with pytest.raises(ValueError, match="routing_dim 1 has size 3, expected 2"):
            rb.extend(TensorDict({"x": torch.zeros(2, 3)}, [2, 3]))
        with pytest.raises(RuntimeError, match="Use extend"):
            rb.add(TensorDict({"x": torch.zeros(())}, []))


class TestTransforms:
    def test_envs_transform_at_sampling_and_its_inverse_at_extend(self):
        envs = pytest.importorskip("rl.envs")
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10),
            transform=envs.RenameTransform(["x"], ["y"], create_copy=True),
        )
        rb.append_transform(lambda td: td.set("z", td["y"] * 2))
        rb.insert_transform(0, lambda td: td.set("w", td["x"] + 1))
        rb.extend(_td(4))
        batch = rb.sample(8)
        torch.testing.assert_close(batch["w"], batch["x"] + 1)
        torch.testing.assert_close(batch["z"], batch["x"] * 2)

    def test_inverse_applied_at_extend(self):
        class Halve(torch.nn.Module):
            def forward(self, td):
                return td.set("x", td["x"] / 2)

            def inv(self, td):
                return td.set("x", td["x"] * 2)

        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=Halve())
        rb.extend(_td(4))
        torch.testing.assert_close(rb.storage[:4]["x"], torch.arange(4.0) * 2)
        batch = rb.sample(4)
        torch.testing.assert_close(batch["x"], batch["index"].float())

    def test_inverse_returning_none_holds_the_batch_back(self):
        class HoldFirst(torch.nn.Module):  # as MultiStepTransform on its first short batch
            seen = 0

            def forward(self, td):
                return td

            def inv(self, td):
                self.seen += 1
                return None if self.seen == 1 else td

        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=HoldFirst())
        index = rb.extend(_td(4))
        assert index.shape == (0,) and index.dtype == torch.long
        assert len(rb) == 0
        assert rb.extend(_td(3)).tolist() == [0, 1, 2]
        assert len(rb) == 3


class TestTrajectories:
    def test_find_start_stop_traj_2d(self):
        end = torch.zeros(5, 3, dtype=torch.bool)
        end[1, 0] = end[3, 2] = True
        start, stop, lengths = find_start_stop_traj(end=end, at_capacity=False)
        # TorchRL 0.14.1
        assert start.tolist() == [[0, 0], [2, 0], [0, 1], [0, 2], [4, 2]]
        assert stop.tolist() == [[1, 0], [4, 0], [4, 1], [3, 2], [4, 2]]
        assert lengths.tolist() == [2, 3, 5, 4, 1]
        start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=2)
        assert start.tolist() == [[3, 0], [2, 0], [3, 1], [4, 2], [3, 2]]
        assert stop.tolist() == [[1, 0], [2, 0], [2, 1], [2, 2], [3, 2]]
        assert lengths.tolist() == [4, 1, 5, 4, 1]
        with pytest.raises(TypeError, match="Exactly one of trajectory and end .* neither"):
            find_start_stop_traj(at_capacity=False)
        with pytest.raises(TypeError, match="Exactly one of trajectory and end .* both"):
            find_start_stop_traj(trajectory=end, end=end, at_capacity=False)
        for error in (ValueError, RuntimeError):  # TorchRL raises a RuntimeError
            with pytest.raises(error, match="got an empty one of shape \\(0,\\)"):
                find_start_stop_traj(end=torch.zeros(0, dtype=torch.bool), at_capacity=True)
            with pytest.raises(error, match="cursor must not be empty"):
                find_start_stop_traj(end=end, at_capacity=True, cursor=range(0))

    @pytest.mark.parametrize("cursor", [4, torch.tensor(4), torch.tensor([2, 3, 4]), range(2, 5)])
    def test_find_start_stop_traj_cursor_forms(self, cursor):
        # the last row written counts: row 4 ends the trajectory that started at row 3
        end = torch.zeros(10, dtype=torch.bool)
        end[2] = end[7] = True
        start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=cursor)
        assert start.squeeze(-1).tolist() == [8, 3, 5]
        assert stop.squeeze(-1).tolist() == [2, 4, 7]
        assert lengths.tolist() == [5, 2, 3]

    def test_slice_sampler_given_both_keys(self):
        data = TensorDict(
            {
                "ep": torch.tensor([0, 0, 0, 1, 1, 1]),
                ("next", "done"): torch.zeros(6, 1, dtype=torch.bool),
            },
            [6],
        )
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(6),
            sampler=SliceSampler(slice_len=3, end_key=("next", "done"), traj_key="ep"),
        )
        rb.extend(data)
        for _ in range(5):  # the ids split the data: every slice is one episode
            assert rb.sample(6)["ep"].reshape(2, 3).unique(dim=1).shape[1] == 1
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(6),
            sampler=SliceSampler(slice_len=3, end_key=("next", "done"), traj_key="missing"),
        )
        rb.extend(data)
        # no "missing" key: the done flags (none set) make one trajectory of 6
        torch.manual_seed(0)  # 100 slices: each of the 4 starts is drawn (1e-12 to miss one)
        starts = rb.sample(300)["index"].reshape(100, 3)[:, 0]
        assert set(starts.tolist()) == {0, 1, 2, 3}


class TestMultiStepParity:
    def test_torchrl_values(self):
        done = torch.tensor([[False, False, True, False, False, False]]).unsqueeze(-1)
        td = TensorDict(
            {
                "observation": torch.arange(6.0).view(1, 6, 1),
                "next": {
                    "observation": torch.arange(1.0, 7.0).view(1, 6, 1),
                    "reward": torch.arange(1.0, 7.0).view(1, 6, 1),
                    "done": done,
                    "terminated": done.clone(),
                    "truncated": torch.zeros_like(done),
                },
            },
            [1, 6],
        )
        out = MultiStep(gamma=0.5, n_steps=3)(td)
        # TorchRL 0.14.1, same input
        torch.testing.assert_close(out["gamma"], torch.tensor([[0.125, 0.25, 0.5] * 2]))
        assert out["nonterminal"].tolist() == [[True, True, False] * 2]
        assert out["steps_to_next_obs"].tolist() == [[3, 2, 1] * 2]
        assert out["steps_to_next_obs"].dtype == torch.int64
        torch.testing.assert_close(
            out["next", "reward"].view(-1), torch.tensor([2.75, 3.5, 3.0, 8.0, 8.0, 6.0])
        )
        torch.testing.assert_close(out["next", "original_reward"], td["next", "reward"])
        assert out["next", "observation"].view(-1).tolist() == [3.0, 3.0, 3.0, 6.0, 6.0, 6.0]
        assert out["next", "done"].view(-1).tolist() == done.view(-1).tolist()
        assert "original_reward" not in td["next"].keys()  # the input is left unchanged

    def test_collector_mask(self):
        td = TensorDict(
            {
                "next": {"reward": torch.ones(1, 4, 1), "done": torch.zeros(1, 4, 1, dtype=bool)},
                "collector": {"mask": torch.tensor([[True, False, True, True]])},
            },
            [1, 4],
        )
        out = MultiStep(gamma=0.9, n_steps=2)(td)
        assert out["nonterminal"].tolist() == [[True, False, True, False]]


def test_list_storage_collates_numbers():
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend([1, 2, 3])
    assert isinstance(rb.sample(4), list)  # python numbers stay python numbers


class TestMoreTorchRLMethods:
    def test_buffer_methods(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        assert not rb.can_sample() and rb.initialized
        rb.extend(torch.arange(4))
        assert rb.can_sample() and rb.next().shape == (2,)
        rb.save(tmp_path)
        other = ReplayBuffer(storage=LazyTensorStorage(10))
        other.load(tmp_path)
        assert other[:].tolist() == [0, 1, 2, 3]
        other.set_storage(LazyTensorStorage(5))
        other.extend(torch.arange(7))
        assert len(other) == 5
        other.set_sampler(SamplerWithoutReplacement())
        assert sorted(other.sample(5).tolist()) == [2, 3, 4, 5, 6]
        with pytest.raises(TypeError, match="sampler must be a Sampler, got int"):
            other.set_sampler(1)

    def test_transform_factory(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform_factory=lambda: lambda x: x * 2)
        rb.extend(torch.ones(3))
        assert rb.sample(3).tolist() == [2.0, 2.0, 2.0]
        with pytest.raises(TypeError, match="transform or transform_factory, not both"):
            ReplayBuffer(transform=abs, transform_factory=lambda: abs)

    def test_mark_update_and_sampler_properties(self):
        sampler = PrioritizedSampler(8, alpha=1.0, beta=1.0, device="cpu")
        rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler)
        rb.extend(torch.arange(4))
        rb.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 5.0]))
        rb.update_priority(torch.tensor([0]), torch.tensor([0.1]))
        rb.mark_update(torch.tensor([0]))  # back to the default (largest) priority
        assert sampler._sum_tree[0] == pytest.approx(5.0)
        assert (sampler.max_size, sampler.device.type, sampler.can_sample(rb.storage, 1)) == (
            8,
            "cpu",
            True,
        )
        assert RandomSampler().default_priority == 1.0

    def test_sampler_device_and_list_device(self):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(4), sampler_device="cpu"
        )
        assert rb.sampler.device.type == "cpu"
        storage = ListStorage(4, device="cpu", compilable=True)
        storage.set(0, torch.ones(2))
        assert storage.get(0).device.type == "cpu"

    def test_write_at(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=RoundRobinWriter())
        rb.extend(torch.arange(4))
        rb.writer.write_at(torch.tensor([1, 3]), torch.tensor([10, 30]))
        assert rb[:].tolist() == [0, 10, 2, 30] and rb.write_count == 6


def test_flatten_and_contains():
    storage = LazyTensorStorage(12, ndim=2)
    rb = ReplayBuffer(storage=storage)
    rb.extend(torch.arange(6).reshape(2, 3))  # [B=2, T=3] -> storage [T, B]
    flat = storage.flatten()
    assert len(flat) == 6 and flat[:].tolist() == [0, 3, 1, 4, 2, 5]
    assert storage.contains(5) and not storage.contains(6)
    assert storage.contains(torch.tensor([0, 7])).tolist() == [True, False]
    assert LazyTensorStorage(3).flatten().ndim == 1


class TestSliceSamplerStaticBoundaries:
    def _rb(self, sampler) -> ReplayBuffer:
        rb = ReplayBuffer(storage=LazyTensorStorage(12), sampler=sampler)
        rb.extend(TensorDict({"t": torch.arange(12)}, [12]))
        return rb

    def test_ends_and_trajectories(self):
        ends = torch.zeros(12, dtype=torch.bool)
        ends[[3, 7, 11]] = True
        traj = torch.arange(12) // 4
        for sampler in (
            SliceSampler(slice_len=4, ends=ends, cache_values=True),
            SliceSampler(slice_len=4, trajectories=traj, cache_values=True),
        ):
            batch = self._rb(sampler).sample(12)["t"].reshape(3, 4)
            assert (batch[:, 0] % 4 == 0).all() and (batch[:, 1:] - batch[:, :-1] == 1).all()
        with pytest.raises(RuntimeError, match="need cache_values=True"):
            SliceSampler(slice_len=4, ends=ends)
        with pytest.raises(RuntimeError, match="exclude end_key"):
            SliceSampler(slice_len=4, ends=ends, traj_key="t", cache_values=True)

    def test_end_keys(self):
        td = TensorDict(
            {
                "t": torch.arange(8),
                ("next", "terminated"): torch.arange(8).eq(3).unsqueeze(-1),
                ("next", "truncated"): torch.arange(8).eq(7).unsqueeze(-1),
            },
            [8],
        )
        sampler = SliceSampler(
            slice_len=4, end_keys=[("next", "terminated"), ("next", "truncated"), "absent"]
        )
        rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler)
        rb.extend(td)
        assert sorted(rb.sample(8)["t"].reshape(2, 4)[:, 0].tolist()) in ([0, 0], [0, 4], [4, 4])
