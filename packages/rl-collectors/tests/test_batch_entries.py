"""Which entries the batches of every collector carry: private entries are left out,
and batches of random actions (``init_random_frames``) hold the policy's entries too (as
TorchRL's collectors)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential

from rl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from rl.envs import PendulumEnv

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import FakeBuffer  # noqa: E402

pytestmark = pytest.mark.timeout(120)

_KINDS = ["single", "sync", "async"]


def _collector(kind: str, policy, frames_per_batch: int = 10, **kwargs):
    if kind == "single":
        return Collector(PendulumEnv(), policy, frames_per_batch=frames_per_batch, **kwargs)
    cls = MultiSyncCollector if kind == "sync" else MultiAsyncCollector
    return cls([PendulumEnv] * 2, policy, frames_per_batch=frames_per_batch, **kwargs)


def _leaves(batch) -> set:
    return set(batch.keys(True, True))


class Constant(torch.nn.Module):
    def __init__(self, value: float, size: int):
        super().__init__()
        self.value, self.size = value, size

    def forward(self, obs):
        return torch.full((*obs.shape[:-1], self.size), self.value)


def _private_policy():
    """Acts 0, and writes a private copy of the observation at the root and nested."""
    return TensorDictSequential(
        TensorDictModule(Constant(0.0, 1), in_keys=["observation"], out_keys=["action"]),
        TensorDictModule(lambda o: o.clone(), in_keys=["observation"], out_keys=["_dummy"]),
        TensorDictModule(
            lambda o: o.clone(), in_keys=["observation"], out_keys=[("out", "_dummy")]
        ),
        TensorDictModule(lambda o: o * 2, in_keys=["observation"], out_keys=[("_out", "kept")]),
        TensorDictModule(lambda o: o * 3, in_keys=["observation"], out_keys=[("out", "public")]),
    )


def _recurrent_policy():
    """Acts 0.5, writes a hidden state (2 features) at the root and under "next"."""
    return TensorDictSequential(
        TensorDictModule(Constant(0.5, 1), in_keys=["observation"], out_keys=["action"]),
        TensorDictModule(Constant(1.0, 2), in_keys=["observation"], out_keys=["hidden"]),
        TensorDictModule(Constant(2.0, 2), in_keys=["observation"], out_keys=[("next", "hidden")]),
    )


class TestPrivateEntries:
    @pytest.mark.parametrize("kind", _KINDS)
    def test_private_entries_are_left_out(self, kind):
        collector = _collector(kind, _private_policy(), total_frames=20)
        try:
            batch = next(iter(collector))
        finally:
            collector.shutdown()
        leaves = _leaves(batch)
        assert ("out", "public") in leaves
        torch.testing.assert_close(batch["out", "public"], batch["observation"] * 3)
        for key in ("_dummy", ("out", "_dummy"), ("_out", "kept")):
            assert key not in leaves, key
        assert not any(key.startswith("_") for key in batch.keys())

    def test_they_are_kept_on_request(self):
        collector = _collector("single", _private_policy(), total_frames=20)
        collector._exclude_private_keys = False  # TorchRL's switch
        try:
            batch = next(iter(collector))
        finally:
            collector.shutdown()
        torch.testing.assert_close(batch["_dummy"], batch["observation"])
        torch.testing.assert_close(batch["_out", "kept"], batch["observation"] * 2)

    @pytest.mark.parametrize("kind", ["single", "async"])
    def test_the_replay_buffer_gets_no_private_entry(self, kind):
        buffer = FakeBuffer()
        collector = _collector(kind, _private_policy(), total_frames=20, replay_buffer=buffer)
        try:
            list(collector)
        finally:
            collector.shutdown()
        assert len(buffer) == 20
        for item in buffer.items:
            assert not any(
                part.startswith("_")
                for key in _leaves(item)
                for part in (key if isinstance(key, tuple) else (key,))
            )

    def test_fake_tensordict_matches_the_batches(self):
        collector = _collector("single", _private_policy(), total_frames=20)
        try:
            assert _leaves(collector.fake_tensordict()) == _leaves(next(iter(collector)))
        finally:
            collector.shutdown()


class TestRandomFramesEntries:
    @pytest.mark.parametrize("kind", _KINDS)
    def test_random_batches_hold_the_policy_entries_zeroed(self, kind):
        # 20 random frames: 2 batches of 10 (1 per worker of the multiprocess ones)
        collector = _collector(
            kind, _recurrent_policy(), frames_per_batch=10, total_frames=60, init_random_frames=20
        )
        try:
            batches = list(collector)
        finally:
            collector.shutdown()
        keys = [_leaves(batch) for batch in batches]
        assert all(k == keys[-1] for k in keys), keys
        assert {"hidden", ("next", "hidden")} <= keys[0]
        random = [b for b in batches if not b["action"].eq(0.5).all()]
        acted = [b for b in batches if b["action"].eq(0.5).all()]
        assert random and acted
        for batch in random:
            assert batch["hidden"].shape == (*batch.shape, 2)
            assert batch["hidden"].eq(0).all() and batch["next", "hidden"].eq(0).all()
        for batch in acted:
            assert batch["hidden"].eq(1).all() and batch["next", "hidden"].eq(2).all()

    def test_the_policy_call_moves_no_generator(self):
        """The entries are found with one policy call that leaves torch's generator where
        it was: the random actions are those of a collector without the policy."""
        kwargs = {"frames_per_batch": 10, "total_frames": 10, "init_random_frames": 10}
        with_policy = Collector(PendulumEnv(), _recurrent_policy(), **kwargs)
        without = Collector(PendulumEnv(), None, **kwargs)
        try:
            with_policy.set_seed(3)
            got = next(iter(with_policy))
            without.set_seed(3)
            expected = next(iter(without))
        finally:
            with_policy.shutdown()
            without.shutdown()
        torch.testing.assert_close(got["action"], expected["action"])
        torch.testing.assert_close(got["next", "observation"], expected["next", "observation"])
