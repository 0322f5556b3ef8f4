"""``trajs_per_batch`` / ``traj_format``: batches of whole trajectories, as TorchRL 0.14.1."""

import warnings

import pytest
import torch

from rl.collectors import Collector, MultiSyncCollector
from rl.data import LazyTensorStorage, ReplayBuffer
from rl.envs import GymEnv, PendulumEnv, StepCounter, TransformedEnv


def _cartpole(seed=0):
    env = GymEnv("CartPole-v1")
    env.set_seed(seed)
    return env


def _check_trajectory(traj):
    """One trajectory: one id, done only at its last step, each root the previous next."""
    ids = traj["collector", "traj_ids"]
    assert (ids == ids[0]).all()
    done = traj["next", "done"].squeeze(-1)
    assert done[-1] and not done[:-1].any()
    torch.testing.assert_close(traj["observation"][1:], traj["next", "observation"][:-1])


def test_padded_batches_hold_whole_trajectories():
    torch.manual_seed(0)
    collector = Collector(
        _cartpole(), None, frames_per_batch=32, total_frames=640, trajs_per_batch=3,
        traj_format="padded",
    )  # fmt: skip
    batches = list(collector)
    collector.shutdown()
    assert len(batches) >= 2
    seen = set()
    for batch in batches:
        assert batch.batch_size[0] == 3
        mask = batch["collector", "mask"]
        lengths = mask.sum(-1)
        assert batch.batch_size[1] == int(lengths.max())
        for row, n in enumerate(lengths.tolist()):
            assert mask[row, :n].all() and not mask[row, n:].any()
            _check_trajectory(batch[row, :n])
            assert (batch[row, n:]["observation"] == 0).all()  # zero padding
            seen.add(int(batch["collector", "traj_ids"][row, 0]))
    assert len(seen) == 3 * len(batches)  # no trajectory twice


def test_cat_format_and_trajectories_spanning_batches():
    # 5-step episodes, 4-frame batches: every episode spans two collected batches
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=5))
    collector = Collector(env, None, frames_per_batch=4, total_frames=40, trajs_per_batch=2,
                          traj_format="cat")  # fmt: skip
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 4 and all(b.batch_size == (10,) for b in batches)
    for batch in batches:
        assert ("collector", "mask") not in batch.keys(True)
        assert batch["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist() == [4, 9]
        for half in (batch[:5], batch[5:]):
            _check_trajectory(half)
            assert half["step_count"].squeeze(-1).tolist() == [0, 1, 2, 3, 4]
    assert collector._frames == 40


def test_format_default_warns_where_it_matters():
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=2))
    with pytest.warns(FutureWarning, match="will change to 'cat'"):
        c = Collector(env, None, frames_per_batch=4, trajs_per_batch=2)
    assert c.traj_format == "padded"
    for kwargs in (
        {"trajs_per_batch": 2, "traj_format": "cat"},
        {},
        {"trajs_per_batch": 2, "replay_buffer": ReplayBuffer(storage=LazyTensorStorage(10))},
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Collector(env, None, frames_per_batch=4, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"trajs_per_batch": 2, "traj_format": "flat"}, ValueError, "must be 'padded' or 'cat'"),
        ({"traj_format": "cat"}, ValueError, "pass trajs_per_batch"),
        ({"trajs_per_batch": 0, "traj_format": "cat"}, ValueError, "positive int"),
        ({"trajs_per_batch": 2.0, "traj_format": "cat"}, TypeError, "positive int"),
        ({"trajs_per_batch": 2, "traj_format": "cat", "split_trajs": True}, ValueError, "split"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Collector(PendulumEnv(), None, frames_per_batch=4, **kwargs)


def test_reset_drops_episodes_in_flight_and_queued():
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))
    collector = Collector(env, None, frames_per_batch=10, trajs_per_batch=2, traj_format="cat")
    it = iter(collector)
    first = next(it)
    assert first.batch_size == (6,)
    trajs = collector._trajs
    assert len(trajs.complete) == 1 and len(trajs.partial) == 1  # 10 frames: 3 done + 1 step
    collector.reset()
    assert not trajs.complete and not trajs.partial
    second = next(it)
    assert second["step_count"].squeeze(-1).tolist() == [0, 1, 2, 0, 1, 2]
    collector.shutdown()


def test_multiprocess_collector_assembles_across_workers():
    make = lambda: TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))  # noqa: E731
    collector = MultiSyncCollector(
        [make, make], None, frames_per_batch=8, total_frames=48, trajs_per_batch=4,
        traj_format="padded",
    )  # fmt: skip
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert batches and all(b.batch_size == (4, 3) for b in batches)
    for batch in batches:
        assert batch["collector", "mask"].all()
        ids = batch["collector", "traj_ids"][:, 0].tolist()
        assert len(set(ids)) == 4
        for row in range(4):
            _check_trajectory(batch[row])


class _Recorder:
    """A replay buffer stand-in recording each ``extend``."""

    def __init__(self):
        self.writes = []

    def extend(self, data):
        self.writes.append(data.clone())


@pytest.mark.parametrize(("per_write", "sizes"), [(None, [9, 9]), (2, [6, 3, 6, 3]), (1, [3] * 6)])
def test_replay_buffer_gets_whole_trajectories_flat(per_write, sizes):
    # 3-step episodes, 10-frame batches: batch 1 completes 3 trajectories (1 step in
    # flight), batch 2 completes 3 more (its first is the one in flight)
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))
    rb = _Recorder()
    collector = Collector(
        env, None, frames_per_batch=10, total_frames=20, replay_buffer=rb, trajs_per_batch=2,
        trajs_per_write=per_write,
    )  # fmt: skip
    try:
        assert list(collector) == [None, None]
    finally:
        collector.shutdown()
    assert [w.batch_size[0] for w in rb.writes] == sizes
    flat = torch.cat(rb.writes, 0)
    assert flat.ndim == 1
    ends = flat["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist()
    assert ends == [2, 5, 8, 11, 14, 17]
    for start in range(0, 18, 3):
        _check_trajectory(flat[start : start + 3])


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"trajs_per_write": 2}, ValueError, "needs trajs_per_batch and replay_buffer"),
        ({"trajs_per_write": 0, "trajs_per_batch": 2}, ValueError, "positive int"),
        ({"trajs_per_write": 1.5, "trajs_per_batch": 2}, TypeError, "positive int"),
    ],
)
def test_trajs_per_write_checked(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Collector(PendulumEnv(), None, frames_per_batch=4, replay_buffer=_Recorder(), **kwargs)


def test_trajectories_take_the_storage_device():
    class OnCpu(_Recorder):
        class storage:  # noqa: N801  (a buffer's public storage attribute)
            device = torch.device("cpu")

    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))
    rb = OnCpu()
    collector = Collector(
        env, None, frames_per_batch=10, total_frames=10, replay_buffer=rb, trajs_per_batch=1,
        postproc=lambda td: td.clear_device_(),
    )  # fmt: skip
    try:
        list(collector)
    finally:
        collector.shutdown()
    assert rb.writes and all(w.device == torch.device("cpu") for w in rb.writes)
