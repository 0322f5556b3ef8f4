"""Trajectory views, the traj query language and ReplayBuffer.query against hand-cut episodes."""

import doctest
import warnings

import pytest
import torch
from tensordict import TensorDict, lazy_stack

import rl.data.replay_buffers._query as query_module
from rl.data import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
    Trajectory,
    TrajectoryPredicate,
    filter_trajectories,
    iter_trajectories,
    traj,
)


def episodes(lengths, *, ids=True, done=True, first_id=0):
    """Transitions of consecutive episodes; episode i has reward i + 1 at every step and
    observation equal to its global step number."""
    total = sum(lengths)
    episode = torch.cat([torch.full((n,), i + first_id) for i, n in enumerate(lengths)])
    ends = torch.zeros(total, 1, dtype=torch.bool)
    ends[torch.cumsum(torch.tensor(lengths), 0) - 1] = True
    data = TensorDict(
        observation=torch.arange(total, dtype=torch.float32).unsqueeze(-1),
        action=torch.zeros(total, 2),
        next=TensorDict(
            observation=torch.arange(1, total + 1, dtype=torch.float32).unsqueeze(-1),
            reward=(episode.float() + 1).unsqueeze(-1),
            batch_size=[total],
        ),
        batch_size=[total],
    )
    if ids:
        data["collector", "traj_ids"] = episode
    if done:
        data["next", "done"] = ends
    return data


class Scale:
    """A replay-buffer transform that multiplies one entry, counting its calls."""

    def __init__(self, key, factor):
        self.in_keys = self.out_keys = [key]
        self.factor = factor
        self.calls = 0

    def __call__(self, data):
        self.calls += 1
        key = self.in_keys[0]
        data[key] = data[key] * self.factor
        return data


class Opaque:
    """A transform that does not say what it writes."""

    def __init__(self):
        self.calls = 0

    def __call__(self, data):
        self.calls += 1
        return data


class TestTrajectory:
    def test_root_then_next_lookup(self):
        trajectory = Trajectory(episodes([4]))
        assert trajectory.length == len(trajectory) == 4
        assert trajectory.observation[:, 0].tolist() == [0, 1, 2, 3]  # root entry
        assert trajectory.reward[:, 0].tolist() == [1, 1, 1, 1]  # found under next
        assert trajectory["next", "observation"][:, 0].tolist() == [1, 2, 3, 4]
        assert trajectory.total_reward.item() == 4.0

    def test_slicing_and_stacking_keep_the_type(self):
        trajectory = Trajectory(episodes([5]))
        part = trajectory[1:3]
        assert isinstance(part, Trajectory) and part.length == 2
        assert part.observation[:, 0].tolist() == [1, 2]
        stacked = lazy_stack([trajectory, Trajectory(episodes([2]))])
        assert isinstance(stacked, Trajectory) and stacked[1].length == 2
        assert isinstance(trajectory.clone(), Trajectory)
        assert (
            repr(part)
            == "Trajectory(length=2, keys=['action', 'collector', 'next', 'observation'])"
        )

    def test_missing_entry(self):
        with pytest.raises(AttributeError, match="no entry 'pixels'.*'next', 'pixels'"):
            _ = Trajectory(episodes([2])).pixels

    def test_two_batch_dims(self):
        with pytest.raises(ValueError, match="single batch dimension.*\\(2, 2\\)"):
            Trajectory(episodes([4]).reshape(2, 2))


class TestIterTrajectories:
    def test_split_by_ids(self):
        found = list(iter_trajectories(episodes([3, 1, 4])))
        assert [t.length for t in found] == [3, 1, 4]
        assert [t.observation[0, 0].item() for t in found] == [0, 3, 4]

    def test_ids_without_done_flags(self):
        assert [t.length for t in iter_trajectories(episodes([2, 5], done=False))] == [2, 5]

    def test_ids_do_not_warn(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            list(iter_trajectories(episodes([2, 2])))

    def test_split_by_done_flags_warns(self):
        with pytest.warns(UserWarning, match="end-of-episode flags \\(\\('next', 'done'\\),\\)"):
            found = list(iter_trajectories(episodes([3, 1, 4], ids=False)))
        assert [t.length for t in found] == [3, 1, 4]

    def test_terminated_or_truncated(self):
        data = episodes([2, 3], ids=False, done=False)
        data["next", "terminated"] = torch.tensor([[0], [1], [0], [0], [0]], dtype=torch.bool)
        data["next", "truncated"] = torch.tensor([[0], [0], [0], [0], [1]], dtype=torch.bool)
        with pytest.warns(UserWarning):
            assert [t.length for t in iter_trajectories(data)] == [2, 3]

    def test_last_step_ends_a_trajectory(self):
        data = episodes([2, 3], ids=False)
        data["next", "done"][-1] = False
        with pytest.warns(UserWarning):
            assert [t.length for t in iter_trajectories(data)] == [2, 3]

    def test_explicit_key(self):
        data = episodes([1, 2], ids=False, done=False)
        data["run"] = torch.tensor([7, 8, 8])
        assert [t.length for t in iter_trajectories(data, trajectory_key="run")] == [1, 2]

    def test_errors(self):
        with pytest.raises(KeyError, match="trajectory_key 'run' not found"):
            list(iter_trajectories(episodes([2]), trajectory_key="run"))
        with pytest.raises(KeyError, match="Cannot split data into trajectories"):
            list(iter_trajectories(episodes([2], ids=False, done=False)))
        with pytest.raises(TypeError, match="TensorDictBase"):
            list(iter_trajectories(torch.zeros(3)))
        with pytest.raises(ValueError, match="single batch dimension"):
            list(iter_trajectories(episodes([4]).reshape(2, 2)))


class TestTrajQuery:
    # rewards: episode 0 -> 1 per step (3 steps), episode 1 -> 2 (1 step), episode 2 -> 3 (4 steps)
    data = episodes([3, 1, 4])

    def lengths(self, predicate):
        return [t.length for t in filter_trajectories(self.data, predicate)]

    def test_reductions(self):
        assert self.lengths(traj.reward.sum() == 3.0) == [3]  # 3 * 1
        assert self.lengths(traj.reward.sum() > 2.5) == [3, 4]  # 3, 2, 12
        assert self.lengths(traj.reward.mean() >= 2) == [1, 4]
        assert self.lengths(traj.observation.max() >= 7) == [4]
        assert self.lengths(traj.observation.min() == 3) == [1]
        assert self.lengths(traj.observation.first() == 4) == [4]
        assert self.lengths(traj.observation.last() == 2) == [3]
        assert self.lengths(traj.total_reward < 5) == [3, 1]

    def test_length_and_combinators(self):
        assert self.lengths(traj.length >= 3) == [3, 4]
        assert self.lengths((traj.length >= 3) & (traj.reward.mean() < 2)) == [3]
        assert self.lengths((traj.length == 1) | (traj.reward.sum() > 10)) == [1, 4]
        assert self.lengths(~(traj.length >= 3)) == [1]
        assert self.lengths(traj.length != 1) == [3, 4]

    def test_stepwise(self):
        assert self.lengths((traj.observation > 6).any()) == [4]
        assert self.lengths((traj.observation <= 3).all()) == [3, 1]
        assert self.lengths((traj[("collector", "traj_ids")] == 1).all()) == [1]

    def test_unreduced_stepwise_comparison(self):
        with pytest.raises(TypeError, match="Call .any\\(\\) or .all\\(\\)"):
            filter_trajectories(self.data, traj.reward > 1)

    def test_callable_and_none(self):
        assert self.lengths(lambda t: t.length % 2 == 1) == [3, 1]
        assert self.lengths(None) == [3, 1, 4]

    def test_unknown_field(self):
        with pytest.raises(KeyError, match="'pixels' not found"):
            filter_trajectories(self.data, traj.pixels.sum() > 0)

    def test_required_keys(self):
        assert (traj.length > 1).required_keys() == frozenset()
        assert (traj.total_reward > 1).required_keys() == frozenset({"reward"})
        both = (traj.reward.sum() > 1) | (traj[("next", "done")] == 1).any()
        assert both.required_keys() == frozenset({"reward", ("next", "done")})
        assert TrajectoryPredicate(lambda t: True).required_keys() is None
        mixed = TrajectoryPredicate(lambda t: True) & (traj.reward.sum() > 1)
        assert mixed.required_keys() is None

    def test_repr(self):
        assert repr((traj.reward.sum() > 1) & ~(traj.length < 2)) == (
            "TrajectoryPredicate(((traj.reward.sum() > 1) & ~(traj.length < 2)))"
        )


class TestReplayBufferQuery:
    def test_all_and_filtered(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
        rb.extend(episodes([3, 1, 4]))
        assert [t.length for t in rb.query()] == [3, 1, 4]
        kept = rb.query(traj.reward.sum() > 2.5)
        assert [t.observation[0, 0].item() for t in kept] == [0, 4]

    def test_empty(self):
        assert ReplayBuffer(storage=LazyTensorStorage(4)).query() == []

    def test_wrapped_buffer_is_read_oldest_first(self):
        # capacity 8: episodes of 4 and 3 (rows 0-6), then one of 3 written at rows 7, 0, 1
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        rb.extend(episodes([4, 3]))
        rb.extend(episodes([3], first_id=2))
        found = rb.query()
        # episode 0 lost rows 0-1; episode 2 runs across the wrap point
        assert [t.length for t in found] == [2, 3, 3]
        assert found[0].observation[:, 0].tolist() == [2, 3]
        assert found[2].reward[:, 0].tolist() == [3, 3, 3]
        assert found[2].observation[:, 0].tolist() == [0, 1, 2]

    def test_two_dim_storage(self):
        # two lanes of 5 steps: lane 0 holds episodes (2, 3), lane 1 holds (5,)
        lane0, lane1 = episodes([2, 3]), episodes([5], first_id=2)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10, ndim=2))
        rb.extend(torch.stack([lane0, lane1]))
        found = rb.query()
        assert [t.length for t in found] == [2, 3, 5]
        assert [t.reward[0, 0].item() for t in found] == [1, 2, 3]

    def test_list_storage(self):
        rb = ReplayBuffer(storage=ListStorage(10))
        rb.extend(list(episodes([2, 3]).unbind(0)))
        assert [t.length for t in rb.query(traj.reward.first() == 2)] == [3]

    def test_list_storage_of_non_tensordicts(self):
        rb = ReplayBuffer(storage=ListStorage(10))
        rb.extend([1, 2])
        with pytest.raises(TypeError, match="tensordict-backed storage, got items of type int"):
            rb.query()

    def test_transforms_apply_before_the_predicate(self):
        scale = Scale(("next", "reward"), 10.0)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), transform=scale)
        rb.extend(episodes([3, 1, 4]))
        kept = rb.query(traj.reward.sum() > 25)  # sums 30, 20, 120
        assert [t.reward[0, 0].item() for t in kept] == [10.0, 30.0]

    def test_unneeded_transforms_are_skipped(self):
        scale = Scale("observation", 2.0)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), transform=scale)
        rb.extend(episodes([3, 1, 4]))
        assert rb.query(traj.length > 10) == []
        assert scale.calls == 0
        (kept,) = rb.query(traj.length == 1)
        assert scale.calls == 1  # on the matching trajectory only
        assert kept.observation[:, 0].tolist() == [6.0]
        # the stored data is untouched
        assert rb.storage[:]["observation"][3, 0].item() == 3.0

    def test_opaque_transform_runs_once_on_everything(self):
        opaque = Opaque()
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), transform=opaque)
        rb.extend(episodes([3, 1, 4]))
        assert len(rb.query(traj.reward.sum() > 0)) == 3
        assert opaque.calls == 1


def test_docstring_examples():
    result = doctest.testmod(query_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
