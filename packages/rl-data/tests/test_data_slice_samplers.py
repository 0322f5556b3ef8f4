import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rl.data import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSliceSampler,
    ReplayBuffer,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)


def _buffer(sampler, data, capacity=200, batch_size=None):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=batch_size
    )
    rb.extend(data)
    return rb


def _check_slices(batch, slice_len):
    """Each slice holds consecutive steps of a single episode."""
    for chunk in batch.split(slice_len):
        assert chunk["episode"].unique().numel() == 1, chunk["episode"]
        steps = chunk["step"]
        torch.testing.assert_close(steps, steps[0] + torch.arange(steps.numel()))


class TestSliceSampler:
    @pytest.mark.parametrize("by", ["end_key", "traj_key"])
    @pytest.mark.parametrize("spec", [{"num_slices": 4}, {"slice_len": 5}])
    def test_slices_stay_within_episodes(self, make_episodes, by, spec):
        torch.manual_seed(0)
        kwargs = {"traj_key": "episode"} if by == "traj_key" else {}
        rb = _buffer(SliceSampler(**spec, **kwargs), make_episodes([7, 5, 12, 6, 9]))
        for _ in range(50):
            batch = rb.sample(20)
            assert batch.batch_size == torch.Size([20])
            _check_slices(batch, 5)

    def test_truncated_and_done_mark_slice_ends(self, make_episodes):
        rb = _buffer(SliceSampler(slice_len=4), make_episodes([10, 10]))
        batch = rb.sample(8)
        expected = torch.tensor([0, 0, 0, 1, 0, 0, 0, 1], dtype=torch.bool).unsqueeze(-1)
        torch.testing.assert_close(batch["next", "truncated"], expected)
        assert (batch["next", "done"] >= expected).all()
        assert batch["next", "done"].shape == (8, 1)

    @pytest.mark.parametrize("stored", [True, False])
    def test_info_holds_done_and_terminated(self, make_episodes, stored):
        # as TorchRL: done (stored or'ed with the slice ends, or the slice ends alone) and
        # terminated (stored, or zeros) beside truncated_key
        data = make_episodes([6, 6])
        terminated = data["next", "done"].clone()
        if stored:
            data["next", "terminated"] = terminated
        else:
            del data["next", "done"]
        sampler = SliceSampler(slice_len=3, traj_key="episode", truncated_key="truncated")
        storage = LazyTensorStorage(20)
        storage.set(torch.arange(12), data)
        torch.manual_seed(0)
        index, info = sampler.sample(storage, 6)
        assert set(info) == {"truncated", "done", "terminated"}
        ends = torch.tensor([0, 0, 1, 0, 0, 1], dtype=torch.bool).unsqueeze(-1)
        torch.testing.assert_close(info["truncated"], ends)
        # the flags are the item's own: an episode end (index 5, 11) is done and terminated
        episode_end = terminated[index]
        torch.testing.assert_close(info["done"], ends)
        expected_terminated = episode_end if stored else torch.zeros_like(ends)
        torch.testing.assert_close(info["terminated"], expected_terminated)

    def test_slice_starts_are_marked_is_init(self, make_episodes):
        data = make_episodes([8, 8])
        is_init = data["step"] == 0
        data["is_init"] = is_init.unsqueeze(-1)
        rb = _buffer(SliceSampler(slice_len=4, traj_key="episode"), data)
        torch.manual_seed(0)
        for _ in range(10):
            batch = rb.sample(8)
            starts = torch.zeros(8, dtype=torch.bool)
            starts[[0, 4]] = True
            expected = starts | (batch["step"] == 0)  # slice starts and the stored resets
            torch.testing.assert_close(batch["is_init"].squeeze(-1), expected)
        # without the stored key (no InitTracker) no flags are made up; init_key=None
        # leaves the stored ones as they are
        del data["is_init"]
        assert "is_init" not in _buffer(SliceSampler(slice_len=4), data).sample(8).keys()
        data["is_init"] = torch.zeros(16, 1, dtype=torch.bool)
        rb = _buffer(SliceSampler(slice_len=4, init_key=None), data)
        assert not rb.sample(8)["is_init"].any()

    def test_padded_slice_starts_are_marked_is_init(self):
        data = TensorDict(
            {"episode": torch.tensor([0, 0, 1, 1, 1, 1]), "is_init": torch.zeros(6, 1).bool()},
            batch_size=[6],
        )
        sampler = SliceSampler(
            traj_key="episode", slice_len=4, strict_length=False, pad_output=True
        )
        rb = _buffer(sampler, data)
        torch.manual_seed(1)
        for _ in range(5):
            batch = rb.sample(8)
            expected = torch.tensor([1, 0, 0, 0, 1, 0, 0, 0], dtype=torch.bool)
            torch.testing.assert_close(batch["is_init"].squeeze(-1), expected)

    def test_short_episodes_are_skipped_when_strict(self, make_episodes):
        torch.manual_seed(0)
        rb = _buffer(SliceSampler(slice_len=4), make_episodes([2, 3, 8, 1]))
        for _ in range(20):
            assert rb.sample(8)["episode"].unique().tolist() == [2]

    def test_no_long_enough_episode_raises(self, make_episodes):
        rb = _buffer(SliceSampler(slice_len=4), make_episodes([2, 3]))
        with pytest.raises(RuntimeError, match=r"slice_len=4 long \(longest: 3\)"):
            rb.sample(8)

    def test_non_strict_returns_shorter_slices(self, make_episodes):
        torch.manual_seed(0)
        rb = _buffer(SliceSampler(slice_len=4, strict_length=False), make_episodes([2, 3]))
        batch = rb.sample(8)
        assert batch.batch_size[0] <= 8
        ends = batch["next", "truncated"].squeeze(-1).nonzero().squeeze(-1)
        starts = torch.cat([torch.tensor([0]), ends[:-1] + 1])
        for s, e in zip(starts.tolist(), ends.tolist()):
            chunk = batch[s : e + 1]
            assert chunk["episode"].unique().numel() == 1
            assert chunk["step"].tolist() == list(range(chunk.batch_size[0]))

    def test_never_crosses_the_newest_write_of_a_full_storage(self):
        # one endless "episode" written into a ring: positions 5 (newest) and 6 (oldest)
        # are not consecutive in time
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10), sampler=SliceSampler(slice_len=3, traj_key="episode")
        )
        data = TensorDict(
            {"episode": torch.zeros(16, dtype=torch.int64), "t": torch.arange(16)}, [16]
        )
        rb.extend(data)
        torch.manual_seed(0)
        for _ in range(100):
            t = rb.sample(3)["t"]
            torch.testing.assert_close(t, t[0] + torch.arange(3))

    def test_argument_checks(self):
        with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
            SliceSampler()
        with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
            SliceSampler(num_slices=2, slice_len=3)
        # TorchRL accepts both keys (traj_key first, end_key as the fallback)
        both = SliceSampler(num_slices=2, end_key="d", traj_key="t")
        assert (both.end_key, both.traj_key) == ("d", "t")
        with pytest.raises(ValueError, match="slice_len must be a positive int, got 0"):
            SliceSampler(slice_len=0)

    def test_batch_size_must_divide(self, make_episodes):
        rb = _buffer(SliceSampler(num_slices=3), make_episodes([10]))
        with pytest.raises(ValueError, match="batch_size=8 is not divisible by num_slices=3"):
            rb.sample(8)

    def test_missing_key(self, make_episodes):
        # a traj_key the storage lacks falls back to end_key (as TorchRL); neither: an error
        sampler = SliceSampler(slice_len=2, traj_key="nope", end_key="nope_either")
        rb = _buffer(sampler, make_episodes([10]))
        with pytest.raises(KeyError, match="the storage holds no key 'nope'"):
            rb.sample(4)

    @pytest.mark.parametrize("storage", [ListStorage, LazyStackStorage])
    @pytest.mark.parametrize("by", ["end_key", "traj_key"])
    def test_list_of_tensordicts(self, make_episodes, storage, by):
        # items that are TensorDicts (a non-tensor entry among them, say) are sliced too
        torch.manual_seed(0)
        kwargs = {"traj_key": "episode"} if by == "traj_key" else {}
        rb = ReplayBuffer(storage=storage(100), sampler=SliceSampler(slice_len=5, **kwargs))
        rb.extend(make_episodes([7, 5, 12]))
        for _ in range(20):
            _check_slices(rb.sample(20), 5)
        new = make_episodes([6])
        new["episode"] += 3
        rb.extend(new)  # a write refreshes the sampler's trajectories
        batches = [rb.sample(20) for _ in range(20)]
        assert max(batch["episode"].max() for batch in batches) == 3
        for batch in batches:
            _check_slices(batch, 5)

    def test_list_of_tensordicts_without_the_key(self):
        rb = ReplayBuffer(storage=ListStorage(10), sampler=SliceSampler(slice_len=2))
        rb.extend(TensorDict({"x": torch.zeros(4)}, [4]))
        with pytest.raises(KeyError, match="holds items without an entry .*'done'"):
            rb.sample(2)

    def test_needs_tensor_storage(self):
        rb = ReplayBuffer(storage=ListStorage(10), sampler=SliceSampler(slice_len=2))
        rb.extend([1, 2, 3])
        with pytest.raises(TypeError, match="needs a tensor storage"):
            rb.sample(2)

    def test_cache_is_invalidated_by_writes(self, make_episodes):
        torch.manual_seed(0)
        sampler = SliceSampler(slice_len=4, cache_values=True)
        rb = _buffer(sampler, make_episodes([4, 2]))
        assert rb.sample(4)["episode"].unique().tolist() == [0]
        more = make_episodes([4, 2, 9])
        rb.extend(more[6:])
        seen = torch.cat([rb.sample(4)["episode"] for _ in range(30)]).unique().tolist()
        assert seen == [0, 2]

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],  # a stateless factory
    )
    @given(st.lists(st.integers(1, 12), min_size=1, max_size=8), st.integers(1, 4))
    def test_property_slices_are_valid(self, make_episodes, lengths, slice_len):
        if max(lengths) < slice_len:
            return
        rb = _buffer(SliceSampler(slice_len=slice_len), make_episodes(lengths))
        _check_slices(rb.sample(slice_len * 3), slice_len)


class TestSliceSamplerWithoutReplacement:
    def test_each_episode_once_per_epoch(self, make_episodes):
        torch.manual_seed(0)
        sampler = SliceSamplerWithoutReplacement(num_slices=2)
        rb = _buffer(sampler, make_episodes([5, 6, 7, 8, 9]), batch_size=6)
        batches = list(rb)
        assert [b.batch_size[0] for b in batches] == [6, 6, 3]
        episodes = [chunk["episode"][0].item() for b in batches for chunk in b.split(3)]
        assert sorted(episodes) == [0, 1, 2, 3, 4]
        for b in batches:
            _check_slices(b, 3)
        assert sampler.ran_out
        assert len(list(rb)) == 3

    def test_drop_last(self, make_episodes):
        sampler = SliceSamplerWithoutReplacement(num_slices=2, drop_last=True)
        rb = _buffer(sampler, make_episodes([5, 6, 7]), batch_size=4)
        assert [b.batch_size[0] for b in rb] == [4]

    def test_state_round_trip(self, make_episodes):
        sampler = SliceSamplerWithoutReplacement(num_slices=1, shuffle=False)
        rb = _buffer(sampler, make_episodes([3, 3, 3]), batch_size=3)
        rb.sample()
        other = SliceSamplerWithoutReplacement(num_slices=1, shuffle=False)
        other.load_state_dict(sampler.state_dict())
        rb2 = TensorDictReplayBuffer(storage=rb.storage, sampler=other, batch_size=3)
        assert rb2.sample()["episode"].tolist() == [1, 1, 1]


class TestPrioritizedSliceSampler:
    def test_high_priority_episode_dominates(self, make_episodes):
        torch.manual_seed(0)
        sampler = PrioritizedSliceSampler(
            max_capacity=200, alpha=1.0, beta=0.5, eps=0.0, slice_len=4
        )
        data = make_episodes([10, 10, 10])
        rb = _buffer(sampler, data)
        priority = (data["episode"] == 1).float() * 10 + 1e-3
        rb.update_priority(torch.arange(30), priority)
        episodes = torch.cat([rb.sample(8)["episode"] for _ in range(30)])
        assert (episodes == 1).float().mean() > 0.95
        batch = rb.sample(8)
        _check_slices(batch, 4)
        assert batch["priority_weight"].shape == (8,)

    def test_weights_follow_item_priorities(self, make_episodes):
        torch.manual_seed(0)
        sampler = PrioritizedSliceSampler(
            max_capacity=200, alpha=1.0, beta=1.0, eps=0.0, slice_len=2
        )
        data = make_episodes([4, 4])
        rb = _buffer(sampler, data)
        priority = torch.arange(1.0, 9.0)
        rb.update_priority(torch.arange(8), priority)
        batch = rb.sample(8)
        expected = 1.0 / priority[batch["index"]]
        torch.testing.assert_close(batch["priority_weight"], expected)
        batch["td_error"] = torch.full((8,), 3.0)
        rb.update_tensordict_priority(batch)
        torch.testing.assert_close(sampler._sum_tree[batch["index"]], torch.full((8,), 3.0))

    def test_short_episodes_are_avoided(self, make_episodes):
        torch.manual_seed(0)
        sampler = PrioritizedSliceSampler(max_capacity=50, alpha=1.0, beta=0.5, slice_len=3)
        rb = _buffer(sampler, make_episodes([2, 5, 1]), capacity=50)
        for _ in range(10):
            assert rb.sample(6)["episode"].unique().tolist() == [1]

    def test_state_round_trip(self, make_episodes):
        sampler = PrioritizedSliceSampler(max_capacity=50, alpha=1.0, beta=0.5, slice_len=2)
        rb = _buffer(sampler, make_episodes([4, 4]), capacity=50)
        rb.update_priority(torch.arange(8), torch.arange(8.0))
        other = PrioritizedSliceSampler(max_capacity=50, alpha=1.0, beta=0.5, slice_len=2)
        other.load_state_dict(sampler.state_dict())
        torch.testing.assert_close(
            other._sum_tree[torch.arange(8)], sampler._sum_tree[torch.arange(8)]
        )


def _three_episodes(sampler, batch_size=12):
    """Episodes of 5, 7 and 3 steps; ``obs`` is the storage position."""
    torch.manual_seed(0)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100), sampler=sampler, batch_size=batch_size
    )
    episode = torch.tensor([0] * 5 + [1] * 7 + [2] * 3)
    rb.extend(TensorDict({"episode": episode, "obs": torch.arange(15)}, [15]))
    torch.manual_seed(1)
    return rb


class TestSliceSamplerSpanAndPadding:
    """Values recorded from TorchRL 0.14 on the same data and seeds (``torch.manual_seed``)."""

    @pytest.mark.parametrize(
        "span, obs, truncated",
        [
            (False, [7, 8, 9, 10, 5, 6, 7, 8, 1, 2, 3, 4], [3, 7, 11]),
            (True, [10, 11, 5, 4], [1, 2, 3]),
            ((True, False), [7, 8, 9, 10, 5, 0, 1, 2, 3], [3, 4, 8]),
            ((0, 2), [8, 9, 10, 11, 5, 6, 7, 8, 2, 3, 4], [3, 7, 10]),
            (1, [9, 10, 11, 5, 6, 7, 2, 3, 4], [2, 5, 8]),
        ],
    )
    def test_span_matches_torchrl(self, span, obs, truncated):
        rb = _three_episodes(SliceSampler(traj_key="episode", slice_len=4, span=span))
        batch = rb.sample()
        assert batch["obs"].tolist() == obs
        assert batch["next", "truncated"].reshape(-1).nonzero().reshape(-1).tolist() == truncated
        # slices stay within one episode; a spanning slice is cut at the episode's edge
        for chunk in batch.split(1):
            assert chunk["episode"].numel() == 1

    def test_span_keeps_at_least_the_minimum(self):
        rb = _three_episodes(SliceSampler(traj_key="episode", slice_len=4, span=(1, 2)), 40)
        for _ in range(20):
            batch = rb.sample()
            ends = batch["next", "truncated"].reshape(-1).nonzero().reshape(-1)
            lengths = torch.diff(ends, prepend=torch.tensor([-1]))
            assert int(lengths.min()) >= 2 and int(lengths.max()) <= 4
            assert batch["episode"][2] != 2  # strict_length: episode 2 (3 steps) is left out

    def test_span_with_an_episode_no_longer_than_the_right_span(self):
        # one-step episode with span (0, 2): end - begin was <= 0, the draw fell one item
        # before the episode's start (into the previous episode)
        torch.manual_seed(0)
        sampler = SliceSampler(traj_key="episode", num_slices=4, strict_length=False, span=(0, 2))
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=16)
        episode = torch.tensor([0] * 5 + [1] * 7 + [2])
        rb.extend(TensorDict({"episode": episode, "obs": torch.arange(13)}, [13]))
        seen_short = False
        for _ in range(30):
            batch = rb.sample()
            ends = batch["next", "truncated"].reshape(-1).nonzero().reshape(-1).tolist()
            start = 0
            for end in ends:
                piece = batch["episode"][start : end + 1]
                assert (piece == piece[0]).all(), batch["obs"][start : end + 1]
                seen_short |= bool(piece[0] == 2)
                start = end + 1
        assert seen_short

    def test_pad_output_matches_torchrl(self):
        sampler = SliceSampler(
            traj_key="episode", num_slices=3, strict_length=False, pad_output=True
        )
        rb = _three_episodes(sampler)
        first, second = rb.sample(), rb.sample()
        assert first["obs"].tolist() == [7, 8, 9, 10, 12, 13, 14, 14, 1, 2, 3, 4]
        assert first["collector", "mask"].tolist() == [True] * 7 + [False] + [True] * 4
        assert first["next", "truncated"].reshape(-1).nonzero().reshape(-1).tolist() == [3, 6, 11]
        assert second["obs"].tolist() == [12, 13, 14, 14] * 3
        assert second["collector", "mask"].tolist() == [True, True, True, False] * 3
        # without padding the same draws give a ragged batch and no mask
        plain = _three_episodes(SliceSampler(traj_key="episode", num_slices=3, strict_length=False))
        batch = plain.sample()
        assert batch["obs"].tolist() == [7, 8, 9, 10, 12, 13, 14, 1, 2, 3, 4]
        assert ("collector", "mask") not in batch.keys(True)

    def test_errors(self):
        with pytest.raises(ValueError, match="pad_output=True is incompatible with strict_length"):
            SliceSampler(slice_len=4, pad_output=True)
        with pytest.raises(
            ValueError, match=r"the right span \(4\) must be lower than slice_len=4"
        ):
            SliceSampler(slice_len=4, span=(0, 4))
        with pytest.raises(ValueError, match="span must be a bool, a non-negative int or a pair"):
            SliceSampler(slice_len=4, span=(1, 2, 3))
        with pytest.raises(ValueError, match="fragmented=True needs step_key"):
            SliceSampler(slice_len=4, fragmented=True, traj_key="episode", step_key=None)
        with pytest.raises(NotImplementedError, match="span is not supported with fragmented"):
            SliceSampler(slice_len=4, fragmented=True, step_key="step", span=True)
        # TorchRL's SliceSamplerWithoutReplacement takes no fragmented / span / pad_output
        with pytest.raises(TypeError, match="unexpected keyword argument 'fragmented'"):
            SliceSamplerWithoutReplacement(slice_len=4, fragmented=True, step_key="step")
        with pytest.raises(NotImplementedError, match=r"does not support span \(got span=True\)"):
            PrioritizedSliceSampler(max_capacity=10, alpha=1.0, beta=1.0, slice_len=2, span=True)
        with pytest.raises(TypeError, match="unexpected keyword argument 'pad_output'"):
            PrioritizedSliceSampler(10, 1.0, 1.0, slice_len=2, pad_output=True)
        # a span that lets no slice run over an edge is the default
        assert PrioritizedSliceSampler(10, 1.0, 1.0, slice_len=2, span=[False, False])

    def test_torchrl_keywords_reach_the_sampler(self):
        keys = dict(
            end_key=("next", "end"),
            truncated_key=("next", "trunc"),
            init_key="first",
            strict_length=False,
        )
        wor = SliceSamplerWithoutReplacement(num_slices=2, drop_last=True, shuffle=False, **keys)
        prio = PrioritizedSliceSampler(
            10, 0.5, 0.4, 1e-6, torch.float64, "min", num_slices=2, **keys
        )
        for sampler in (wor, prio):
            assert sampler.num_slices == 2 and sampler.strict_length is False
            assert sampler.end_key == ("next", "end") and sampler.init_key == "first"
            assert sampler.truncated_key == ("next", "trunc")
        assert wor.drop_last and not wor.shuffle
        assert (prio.alpha, prio.beta) == (0.5, 0.4)
        assert prio._priority._eps == 1e-6 and prio._priority.dtype == torch.float64


class TestPrioritizedSliceSamplerNdim2:
    def test_slices_follow_columns_and_priorities(self):
        # two environments of 8 steps ([B, T] data, stored with time along dim 0)
        torch.manual_seed(0)
        sampler = PrioritizedSliceSampler(
            max_capacity=64, alpha=1.0, beta=1.0, eps=0.0, slice_len=4, traj_key="episode"
        )
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(32, ndim=2), sampler=sampler, batch_size=8
        )
        episode = torch.arange(2)[:, None].expand(2, 8)
        step = torch.arange(8).expand(2, 8)
        data = TensorDict({"episode": episode, "step": step}, batch_size=[2, 8])
        rb.extend(data)
        # every item of column 1 has a high priority, column 0 almost none
        rows, cols = torch.meshgrid(torch.arange(8), torch.arange(2), indexing="ij")
        priority = torch.where(cols == 1, 10.0, 1e-4).reshape(-1)
        rb.update_priority((rows.reshape(-1), cols.reshape(-1)), priority)
        episodes = torch.cat([rb.sample()["episode"] for _ in range(20)])
        assert (episodes == 1).float().mean() > 0.95
        batch = rb.sample()
        _check_slices(batch, 4)
        assert batch["index"].shape == (8, 2)  # (row, column) coordinates
        # weights are (p / p_min) ** -beta of each item's own priority
        item_priority = torch.where(batch["index"][:, 1] == 1, 10.0, 1e-4)
        torch.testing.assert_close(batch["priority_weight"], 1e-4 / item_priority)


class TestFragmentedSliceSampler:
    def buffer(self, traj, step):
        sampler = SliceSampler(traj_key="traj", step_key="step", fragmented=True, slice_len=3)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=9)
        n = len(traj)
        data = {"traj": torch.tensor(traj), "step": torch.tensor(step), "obs": torch.arange(n)}
        rb.extend(TensorDict(data, [n]))
        return rb

    def test_interleaved_trajectories_match_torchrl(self):
        # two trajectories written interleaved; trajectory 1 misses step 3 (two runs)
        torch.manual_seed(0)
        rb = self.buffer([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1], [0, 0, 1, 1, 2, 2, 3, 4, 4, 5, 6])
        torch.manual_seed(1)
        # values recorded from TorchRL 0.14 on the same data and seeds
        expected = [
            [1, 3, 5, 7, 9, 10, 4, 6, 8],
            [7, 9, 10, 7, 9, 10, 7, 9, 10],
            [1, 3, 5, 7, 9, 10, 1, 3, 5],
        ]
        for obs in expected:
            batch = rb.sample()
            assert batch["obs"].tolist() == obs
            for chunk in batch.split(3):  # one trajectory, consecutive steps
                assert chunk["traj"].unique().numel() == 1
                assert torch.equal(chunk["step"], chunk["step"][0] + torch.arange(3))

    def test_default_step_key_is_step_count(self):
        # TorchRL's default: the steps StepCounter writes
        sampler = SliceSampler(traj_key="traj", fragmented=True, slice_len=2)
        assert sampler.step_key == "step_count"
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=4)
        traj, step = torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1])
        rb.extend(TensorDict({"traj": traj, "step_count": step, "obs": torch.arange(4)}, [4]))
        for chunk in rb.sample().split(2):  # one trajectory, consecutive steps
            assert chunk["traj"].unique().numel() == 1
            assert chunk["step_count"].tolist() == [0, 1]

    def test_errors(self):
        with pytest.raises(
            ValueError, match="unique .trajectory, step. pairs, got trajectory 0 step 1"
        ):
            self.buffer([0, 0, 0], [0, 1, 1]).sample()
        sampler = SliceSampler(traj_key="traj", step_key="t", fragmented=True, slice_len=2)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=2)
        rb.extend(TensorDict({"traj": torch.zeros(4, dtype=torch.long)}, [4]))
        with pytest.raises(KeyError, match="step numbers .'t'.; the storage lacks 't'"):
            rb.sample()


class TestSliceSamplerKeyDetection:
    """Neither traj_key nor end_key given: ids first, then "episode", then done flags."""

    @staticmethod
    def _sample(data, num_slices=2, batch_size=6):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(len(data)),
            sampler=SliceSampler(num_slices=num_slices),
            batch_size=batch_size,
        )
        rb.extend(data)
        return rb.sampler, rb.sample().reshape(num_slices, -1)

    def test_collector_ids_win_over_episode_and_done(self):
        ids = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
        done = torch.zeros(8, 1, dtype=torch.bool)  # no done flag: only the ids split
        data = TensorDict(
            {("collector", "traj_ids"): ids, "episode": torch.zeros(8), ("next", "done"): done},
            batch_size=[8],
        )
        sampler, sample = self._sample(data)
        assert sampler.traj_key == ("collector", "traj_ids") and sampler._fetch_traj
        for row in sample:
            assert row["collector", "traj_ids"].unique().numel() == 1

    def test_episode_then_done(self):
        episode = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
        sampler, sample = self._sample(TensorDict({"episode": episode}, batch_size=[8]))
        assert sampler.traj_key == "episode"
        for row in sample:
            assert row["episode"].unique().numel() == 1
        done = torch.zeros(9, 1, dtype=torch.bool)
        done[[2, 5, 8]] = True
        obs = torch.arange(9)
        sampler, sample = self._sample(
            TensorDict({"obs": obs, ("next", "done"): done}, batch_size=[9]), 3, 9
        )
        assert sampler.traj_key is None and not sampler._fetch_traj
        for row in sample["obs"].tolist():  # each slice is one whole trajectory
            assert row in ([0, 1, 2], [3, 4, 5], [6, 7, 8])


def test_end_key_and_end_keys_are_exclusive():
    with pytest.raises(
        RuntimeError, match=r"end_key and end_keys are exclusive.*\('next', 'done'\)"
    ):
        SliceSampler(slice_len=2, end_key=("next", "done"), end_keys=[("next", "truncated")])
