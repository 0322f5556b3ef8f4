"""Snippets of TorchRL 0.14's replay-buffer documentation, run with ``torchrl.data``
replaced by ``rl.data`` (nothing else changed unless a comment says why).

Each test asserts the output the docs print. Where the docs print a seeded random
sample, the expected value was checked against TorchRL 0.14.1 run on the same code:
the uniform samplers draw the same numbers from the same seed.
"""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    CompressedListStorage,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    find_start_stop_traj,
)
from rl.data.replay_buffers.scheduler import LinearScheduler, SchedulerList, StepScheduler


class TestReplayBufferDocs:
    def test_list_storage_sampling_and_iteration(self):
        # ReplayBuffer docstring (data as a tensor: TorchRL 0.14.1 itself fails to stack
        # the python ints of ``range(10)`` that the docstring extends with)
        torch.manual_seed(0)
        rb = ReplayBuffer(storage=ListStorage(max_size=1000), batch_size=5)
        rb.extend(torch.arange(10))
        assert rb.sample().tolist() == [4, 9, 3, 0, 3]
        assert rb.sample(batch_size=3).tolist() == [9, 7, 3]
        batches = []
        for i, batch in enumerate(rb):
            batches.append(batch.tolist())
            if i == 3:
                break
        assert batches == [[7, 3, 1, 6, 6], [9, 8, 6, 6, 8], [4, 3, 6, 9, 1], [4, 4, 1, 9, 9]]

    def test_arbitrary_objects(self):
        torch.manual_seed(0)
        buffer = ReplayBuffer(storage=ListStorage(100), collate_fn=lambda x: x)
        buffer.extend(["a", 1, None])
        assert buffer.sample(3) == [None, "a", None]

    def test_dim_extend_add_and_extend_are_equivalent(self):
        data = torch.arange(12).reshape(3, 4)
        rb = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), dim_extend=1)
        for d in data.unbind(1):
            rb.add(d)
        rb2 = ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), dim_extend=1)
        rb2.extend(data)
        torch.testing.assert_close(rb[:], data)
        torch.testing.assert_close(rb2[:], data)
        assert len(rb) == len(rb2) == 12

    def test_generator(self):
        g = torch.Generator().manual_seed(3)
        rb = ReplayBuffer(storage=LazyTensorStorage(100), generator=g, batch_size=6)
        rb.extend(torch.arange(100))
        torch.manual_seed(123)  # the buffer's generator, not the global seed, decides
        assert rb.sample().tolist() == [86, 48, 37, 67, 60, 80]


class TestTensorDictReplayBufferDocs:
    def test_sample_keeps_the_index(self):
        torch.manual_seed(0)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=5)
        data = TensorDict({"a": torch.ones(10, 3), ("b", "c"): torch.zeros(10, 1, 1)}, [10])
        rb.extend(data)
        sample = rb.sample(3)
        assert set(sample.keys(True, True)) == {"a", ("b", "c"), "index"}
        assert sample["a"].shape == (3, 3) and sample["b", "c"].shape == (3, 1, 1)
        assert sample["index"].tolist() == [4, 9, 3]
        shapes = []
        for i, batch in enumerate(rb):
            shapes.append(batch["a"].shape)
            if i == 2:
                break
        assert shapes == [torch.Size([5, 3])] * 3

    def test_prioritized_docstring(self):
        torch.manual_seed(0)
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=1.1, storage=LazyTensorStorage(10), batch_size=5
        )
        data = TensorDict({"a": torch.ones(10, 3), ("b", "c"): torch.zeros(10, 3, 1)}, [10])
        rb.extend(data)
        assert len(rb) == 10
        sample = rb.sample(5)
        assert {"priority_weight", "a", ("b", "c"), "index"} <= set(sample.keys(True, True))
        assert sample["index"].dtype == torch.int64
        sample.set("td_error", 100 * torch.ones(sample.shape))
        rb.update_tensordict_priority(sample)
        # "the new sample should have a high overlap with the previous one"
        chosen = set(sample["index"].tolist())
        again = torch.cat([rb.sample(5)["index"] for _ in range(20)])
        assert sum(i in chosen for i in again.tolist()) > 0.9 * again.numel()

    def test_max_value_writer(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(1),
            sampler=SamplerWithoutReplacement(),
            batch_size=1,
            writer=TensorDictMaxValueWriter(rank_key="key"),
        )
        seen = []
        for lo in (0, 10, 0):
            td = TensorDict(
                {"key": torch.tensor(range(lo, lo + 10)), "obs": torch.tensor(range(lo, lo + 10))},
                batch_size=10,
            )
            rb.extend(td)
            seen.append(rb.sample().get("obs").item())
        assert seen == [9, 19, 19]


class TestPrioritizedDocs:
    def test_prioritized_sampler_docstring(self):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10),
            sampler=PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0),
        )
        priority = torch.tensor([0, 1000])
        data_0 = TensorDict({"reward": 0, "obs": [0], "action": [0], "priority": priority[0]}, [])
        data_1 = TensorDict({"reward": 1, "obs": [1], "action": [2], "priority": priority[1]}, [])
        rb.add(data_0)
        rb.add(data_1)
        rb.update_priority(torch.tensor([0, 1]), priority=priority)
        sample, info = rb.sample(10, return_info=True)
        assert sample["obs"].shape == (10, 1) and sample["reward"].shape == (10,)
        assert info["index"].tolist() == [1] * 10
        torch.testing.assert_close(info["priority_weight"], torch.full((10,), 1e-11))

    def test_tensordict_buffer_reads_the_priority_key(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10),
            sampler=PrioritizedSampler(max_capacity=10, alpha=1.0, beta=1.0),
            priority_key="priority",
        )
        priority = torch.tensor([0, 1000])
        data_0 = TensorDict({"reward": 0, "obs": [0], "action": [0], "priority": priority[0]}, [])
        data_1 = TensorDict({"reward": 1, "obs": [1], "action": [2], "priority": priority[1]}, [])
        data = torch.stack([data_0, data_1])
        rb.extend(data)
        rb.update_priority(data)  # reads the "priority" key as given to the constructor
        sample, info = rb.sample(10, return_info=True)
        assert sample["index"].tolist() == [1] * 10

    def test_prioritized_replay_buffer_weights(self):
        torch.manual_seed(0)
        rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.9, storage=ListStorage(10))
        rb.extend(torch.arange(10))
        sample, info = rb.sample(5, return_info=True)
        torch.testing.assert_close(info["priority_weight"], torch.ones(5))
        rb.update_priority(info["index"], torch.ones(5) * 5)
        weights = torch.cat([rb.sample(50, return_info=True)[1]["priority_weight"]])
        # documented: the updated items come back with weight 0.36278465 = 5 ** (-0.7 * 0.9)
        assert weights.min().item() == pytest.approx(0.36278465, rel=1e-5)

    def test_linear_scheduler_comments(self):
        # "Assuming sampler uses initial beta = 0.6: 0.7, 0.8, 0.9, then 1.0"
        sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
        scheduler = LinearScheduler(sampler, param_name="beta", final_value=1.0, num_steps=4)
        betas = []
        for _ in range(6):
            scheduler.step()
            betas.append(round(sampler.beta, 6))
        assert betas == [0.7, 0.8, 0.9, 1.0, 1.0, 1.0]

    def test_step_scheduler_comments(self):
        # "beta = 0.6 if 0 <= step < 10, 0.7 if 10 <= step < 20 ... 1.0 if 40 <= step"
        rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.6, storage=ListStorage(10))
        scheduler = SchedulerList(
            StepScheduler(
                rb, param_name="beta", gamma=0.1, n_steps=10, mode="additive", max_value=1.0
            )
        )
        betas = []
        for _ in range(50):
            betas.append(round(rb.sampler.beta, 6))
            scheduler.step()
        assert betas[0] == betas[9] == 0.6
        assert betas[10] == 0.7 and betas[39] == 0.9 and betas[40] == betas[49] == 1.0


class TestSliceSamplerDocs:
    @staticmethod
    def _episodes() -> TensorDict:
        episode = torch.zeros(1000, dtype=torch.int)
        episode[:300] = 1
        episode[300:550] = 2
        episode[550:700] = 3
        episode[700:] = 4
        return TensorDict(
            {
                "episode": episode,
                "obs": torch.randn((3, 4, 5)).expand(1000, 3, 4, 5),
                "act": torch.randn((20,)).expand(1000, 20),
                "other": torch.randn((20, 50)).expand(1000, 20, 50),
            },
            [1000],
        )

    def test_slice_sampler(self, tmp_path):
        torch.manual_seed(0)
        # LazyMemmapStorage(1_000_000) in the docs: 4 GB of files, cut to 2000 items here
        rb = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(2000, scratch_dir=tmp_path),
            sampler=SliceSampler(cache_values=True, num_slices=10),
            batch_size=320,
        )
        rb.extend(self._episodes())
        sample = rb.sample()
        assert sample.shape == (320,)
        for chunk in sample["episode"].split(32):
            assert chunk.unique().numel() == 1
        assert set(sample["episode"].unique().tolist()) <= {1, 2, 3, 4}

    def test_slice_sampler_without_replacement(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(1000),
            sampler=SliceSamplerWithoutReplacement(num_slices=10),
            batch_size=320,
        )
        rb.extend(self._episodes())
        sample = rb.sample()
        # "we only get 4 x 32 = 128 transitions in this batch"
        assert sample.shape == (128,)
        assert sample.get("episode").unique().tolist() == [1, 2, 3, 4]

    def test_seeded_slices_match_torchrl(self):
        torch.manual_seed(0)
        rb = ReplayBuffer(
            storage=LazyTensorStorage(8),
            sampler=SliceSampler(slice_len=2, traj_key="ep"),
            batch_size=6,
        )
        rb.extend(TensorDict({"ep": torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])}, [8]))
        assert rb.sample()["ep"].tolist() == [2, 2, 0, 0, 2, 2]

    def test_find_start_stop_traj(self):
        end = torch.zeros(10, dtype=torch.bool)
        end[2] = end[7] = True
        start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=4)
        assert start.squeeze(-1).tolist() == [8, 3, 5]
        assert stop.squeeze(-1).tolist() == [2, 4, 7]
        assert lengths.tolist() == [5, 2, 3]
        trajectory = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])
        start, stop, lengths = find_start_stop_traj(trajectory=trajectory, at_capacity=True)
        assert (start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()) == (
            [8, 3, 5],
            [2, 4, 7],
            [5, 2, 3],
        )


class TestStorageDocs:
    @pytest.mark.parametrize("cls", [LazyTensorStorage, LazyMemmapStorage])
    def test_only_the_first_dim_is_indexable(self, cls):
        data = TensorDict(
            {"some data": torch.randn(10, 11), ("some", "nested", "data"): torch.randn(10, 11, 12)},
            batch_size=[10, 11],
        )
        storage = cls(100)
        storage.set(range(10), data)
        assert len(storage) == 10
        item = storage.get(0)
        assert item.batch_size == (11,) and item["some", "nested", "data"].shape == (11, 12)
        storage.set(0, storage.get(0).zero_())  # zeros the data along index 0
        assert (storage.get(0)["some data"] == 0).all()

    def test_lazy_stack_storage(self):
        torch.manual_seed(0)
        rb = ReplayBuffer(storage=LazyStackStorage(max_size=1000, stack_dim=-1))
        data0 = TensorDict(a=torch.randn((10,)), b=torch.rand(4), c="a string!")
        data1 = TensorDict(a=torch.randn((11,)), b=torch.rand(4), c="another string!")
        rb.add(data0)
        rb.add(data1)
        sample = rb.sample(10)
        assert sample.batch_size == (10,)
        assert sample["b"].shape == (10, 4)
        assert set(sample["c"].tolist()) <= {"a string!", "another string!"}
        assert {t["a"].shape[0] for t in sample.tensordicts} <= {10, 11}

    def test_compressed_list_storage(self):
        storage = CompressedListStorage(max_size=1000, compression_level=3)
        rb = ReplayBuffer(storage=storage, batch_size=5)
        images = torch.randn(10, 3, 84, 84)
        data = TensorDict({"obs": images}, batch_size=[10])
        rb.extend(data)
        sample = rb.sample(3)
        assert sample["obs"].shape == torch.Size([3, 3, 84, 84])
        torch.testing.assert_close(rb[[4]]["obs"], images[4:5])

    def test_round_robin_generations(self):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(4),
            writer=RoundRobinWriter(track_generations=True),
        )
        index = rb.extend(torch.arange(4))
        assert rb.writer.generations_of(index).tolist() == [0, 0, 0, 0]
        rb.extend(torch.arange(4, 6))  # overwrites slots 0 and 1
        assert rb.writer.generations_of(index).tolist() == [1, 1, 0, 0]


class TestEnsembleDocs:
    def test_replay_buffer_ensemble(self, tmp_path):
        envs = pytest.importorskip("rl.envs")
        Compose, ToTensorImage = envs.Compose, envs.ToTensorImage
        Resize, RenameTransform = envs.Resize, envs.RenameTransform
        rb0 = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(10, scratch_dir=tmp_path / "0"),
            transform=Compose(
                ToTensorImage(in_keys=["pixels", ("next", "pixels")]),
                Resize(32, in_keys=["pixels", ("next", "pixels")]),
                RenameTransform([("some", "key")], ["renamed"]),
            ),
        )
        rb1 = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(10, scratch_dir=tmp_path / "1"),
            transform=Compose(
                ToTensorImage(in_keys=["pixels", ("next", "pixels")]),
                Resize(32, in_keys=["pixels", ("next", "pixels")]),
                RenameTransform(["another_key"], ["renamed"]),
            ),
        )
        rb = ReplayBufferEnsemble(
            rb0,
            rb1,
            p=[0.5, 0.5],
            transform=Resize(33, in_keys=["pixels"], out_keys=["pixels33"]),
        )
        data0 = TensorDict(
            {
                "pixels": torch.randint(255, (10, 244, 244, 3)),
                ("next", "pixels"): torch.randint(255, (10, 244, 244, 3)),
                ("some", "key"): torch.randn(10),
            },
            batch_size=[10],
        )
        data1 = TensorDict(
            {
                "pixels": torch.randint(255, (10, 64, 64, 3)),
                ("next", "pixels"): torch.randint(255, (10, 64, 64, 3)),
                "another_key": torch.randn(10),
            },
            batch_size=[10],
        )
        rb[0].extend(data0)
        rb[1].extend(data1)
        for _ in range(2):
            sample = rb.sample(10)
            assert sample["next", "pixels"].shape == torch.Size([2, 5, 3, 32, 32])
            assert sample["pixels"].shape == torch.Size([2, 5, 3, 32, 32])
            assert sample["pixels33"].shape == torch.Size([2, 5, 3, 33, 33])
            assert sample["renamed"].shape == torch.Size([2, 5])


class TestLLMNamesAtTopLevel:
    """``torchrl.data`` exports its LLM data names; ``rl.data`` gives the same objects as
    ``rl.data.llm``, loaded on first use."""

    def test_the_names_are_rl_data_llm_s(self):
        # that rl.data does not import rl.data.llm is checked in tests/test_lazy_imports.py
        import rl.data
        import rl.data.llm as llm

        for name in rl.data._LLM_NAMES:
            assert getattr(rl.data, name) is getattr(llm, name), name
            assert name in rl.data.__all__, name

    def test_an_unknown_name_raises_attribute_error(self):
        import rl.data

        with pytest.raises(AttributeError, match="no attribute 'NotAName'"):
            rl.data.NotAName  # noqa: B018
