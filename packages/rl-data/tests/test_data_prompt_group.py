"""PromptGroupSampler: batches of whole groups sharing a key."""

import warnings

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rl.data import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PromptGroupSampler,
    ReplayBuffer,
)


def _buffer(sampler, batch_size, data, storage=None):
    rb = ReplayBuffer(
        storage=storage if storage is not None else LazyStackStorage(100),
        sampler=sampler,
        batch_size=batch_size,
    )
    rb.extend(TensorDict(data, batch_size=[len(next(iter(data.values())))]))
    return rb


class TestPromptGroupSampler:
    @pytest.mark.parametrize("storage_cls", [LazyStackStorage, LazyTensorStorage])
    def test_batches_are_whole_groups(self, storage_cls):
        torch.manual_seed(0)
        prompt = torch.arange(12) // 4  # three groups of four
        rb = _buffer(
            PromptGroupSampler(num_groups=2, group_key="prompt"),
            8,
            {"prompt": prompt, "id": torch.arange(12)},
            storage_cls(100),
        )
        for _ in range(10):
            batch = rb.sample()
            groups = batch["prompt"].reshape(2, 4)
            assert (groups == groups[:, :1]).all() and groups[0, 0] != groups[1, 0]
            assert sorted(batch["id"].tolist()) == sorted(
                i for g in groups[:, 0].tolist() for i in range(4 * g, 4 * g + 4)
            )  # every item of a group, none twice

    def test_string_and_nested_keys(self):
        torch.manual_seed(0)
        rb = _buffer(
            PromptGroupSampler(samples_per_group=2, group_key="q"),
            4,
            {"q": NonTensorStack("a", "a", "b", "b", "c", "c"), "v": torch.arange(6)},
        )
        batch = rb.sample()
        q = list(batch["q"])
        assert q[0] == q[1] and q[2] == q[3] and q[0] != q[2]
        rb = _buffer(
            PromptGroupSampler(num_groups=3, group_key=("text", "prompt")),
            3,
            {"text": TensorDict({"prompt": torch.tensor([0, 1, 2])}, [3])},
        )
        assert sorted(rb.sample()["text", "prompt"].tolist()) == [0, 1, 2]

    def test_recency_takes_the_newest(self):
        rb = _buffer(
            PromptGroupSampler(samples_per_group=2, group_key="p", strategy="recency"),
            2,
            {"p": torch.zeros(4, dtype=torch.long), "id": torch.arange(4)},
            LazyStackStorage(4),
        )
        assert sorted(rb.sample()["id"].tolist()) == [2, 3]
        rb.add(TensorDict({"p": 0, "id": 4}, []))  # overwrites slot 0 (id 0)
        assert sorted(rb.sample()["id"].tolist()) == [3, 4]
        restored = PromptGroupSampler(samples_per_group=2, group_key="p", strategy="recency")
        restored.load_state_dict(rb.sampler.state_dict())
        index, _ = restored.sample(rb.storage, 2)
        assert sorted(rb.storage[index]["id"].tolist()) == [3, 4]

    def test_reward_and_variance(self):
        reward = {"next": TensorDict({"reward": torch.tensor([1.0, 2.0, 3.0, 9.0, 8.0, 7.0])}, [6])}
        rb = _buffer(
            PromptGroupSampler(samples_per_group=2, group_key="p", strategy="reward"),
            4,
            {"p": torch.tensor([0, 0, 0, 1, 1, 1]), **reward},
        )
        assert sorted(rb.sample()["next", "reward"].tolist()) == [2.0, 3.0, 8.0, 9.0]
        # variance: the 3 of [2, -7, 10, 1] of largest (population) variance, by brute force
        rewards = torch.tensor([2.0, -7.0, 10.0, 1.0])
        best = max(
            ((a, b, c) for a in range(4) for b in range(a + 1, 4) for c in range(b + 1, 4)),
            key=lambda s: (
                rewards[list(s)].var(unbiased=False).item(),
                rewards[list(s)].sum().item(),
            ),
        )
        rb = _buffer(
            PromptGroupSampler(num_groups=1, group_key="p", strategy="variance"),
            3,
            {"p": torch.zeros(4, dtype=torch.long), "next": TensorDict({"reward": rewards}, [4])},
        )
        assert sorted(rb.sample()["next", "reward"].tolist()) == sorted(
            rewards[list(best)].tolist()
        )
        # the subset of 2 of [0, 0, 1, 1] with the largest variance holds a 0 and a 1
        rb = _buffer(
            PromptGroupSampler(num_groups=1, group_key="p", strategy="variance"),
            2,
            {
                "p": torch.zeros(4, dtype=torch.long),
                "next": TensorDict({"reward": torch.tensor([0.0, 0.0, 1.0, 1.0])}, [4]),
            },
        )
        assert sorted(rb.sample()["next", "reward"].tolist()) == [0.0, 1.0]

    def test_small_groups_are_completed_with_a_warning(self):
        rb = _buffer(
            PromptGroupSampler(samples_per_group=4, group_key="p"), 4, {"p": torch.tensor([3, 3])}
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = rb.sample()
            rb.sample()
        assert batch["p"].tolist() == [3] * 4
        assert sum("with replacement" in str(w.message) for w in caught) == 1  # once

    def test_groups_follow_the_storage(self):
        storage = LazyTensorStorage(6)
        reader = ReplayBuffer(
            storage=storage, sampler=PromptGroupSampler(num_groups=2, group_key="p"), batch_size=4
        )
        writer = ReplayBuffer(storage=storage)
        writer.extend(TensorDict({"p": torch.tensor([0, 0, 0, 1, 1, 1])}, [6]))
        reader.sample()
        writer.add(TensorDict({"p": torch.tensor(1)}, []))  # slot 0 moves to group 1
        torch.manual_seed(0)
        for _ in range(10):
            assert sorted(reader.sample()["p"].tolist()) == [0, 0, 1, 1]
        groups = reader.sampler._groups(storage)
        assert groups[0].tolist() == [1, 2] and groups[1].tolist() == [0, 3, 4, 5]

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({}, TypeError, "exactly one of num_groups and samples_per_group"),
            ({"num_groups": 2, "samples_per_group": 2}, TypeError, "exactly one"),
            ({"num_groups": True}, TypeError, "num_groups must be a positive int, got True"),
            ({"num_groups": 1.5}, TypeError, "got 1.5"),
            (
                {"samples_per_group": 0},
                ValueError,
                "samples_per_group must be a positive int, got 0",
            ),
            ({"num_groups": 2, "strategy": "bogus"}, ValueError, "strategy must be one of"),
        ],
    )
    def test_construction_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            PromptGroupSampler(**kwargs)

    def test_sampling_errors(self):
        rb = _buffer(
            PromptGroupSampler(num_groups=3, group_key="p"), 8, {"p": torch.arange(6) // 2}
        )
        with pytest.raises(ValueError, match="batch_size=8 is not divisible by num_groups=3"):
            rb.sample()
        rb = _buffer(
            PromptGroupSampler(num_groups=1, group_key="p"),
            2,
            {"p": torch.zeros(2)},
            ListStorage(4),
        )
        with pytest.raises(TypeError, match="Plain ListStorage is not supported"):
            rb.sample()
        rb = _buffer(
            PromptGroupSampler(num_groups=1, group_key="p", strategy="reward", reward_key="r"),
            2,
            {"p": torch.tensor([0, 0]), "r": NonTensorStack("x", "y")},
        )
        with pytest.raises(TypeError, match="requires reward_key='r' to hold a tensor"):
            rb.sample()
        rb = ReplayBuffer(
            storage=LazyTensorStorage(100, ndim=2),
            sampler=PromptGroupSampler(num_groups=1, group_key="p"),
        )
        rb.extend(TensorDict({"p": torch.zeros(4, 5)}, [4, 5]))
        with pytest.raises(NotImplementedError, match="1-dimensional storages, got ndim=2"):
            rb.sample(2)
