"""A collector iterating in a thread of its own keeps its exploration type to that thread:
the main thread's blocks do not reach its policy, and its block does not reach (or stay
set in) the main thread."""

import sys
import threading
from pathlib import Path

import torch
from tensordict.nn import TensorDictModule

from rl.collectors import Collector
from rl.core import ExplorationType, exploration_type, set_exploration_type

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import cartpole  # noqa: E402


class _Gate(torch.nn.Module):
    """Records the exploration type each call reads; the first call made outside the
    main thread waits until the main thread releases it."""

    def __init__(self):
        super().__init__()
        self.seen: list = []
        self.inside = threading.Event()
        self.release = threading.Event()

    def forward(self, obs):
        if threading.current_thread() is not threading.main_thread():
            self.seen.append(exploration_type())
            if not self.inside.is_set():
                self.inside.set()
                self.release.wait(30)
        return (obs[..., 2] > 0).long()


def test_collector_in_a_thread_keeps_its_exploration_type_to_itself():
    gate = _Gate()
    policy = TensorDictModule(gate, in_keys=["observation"], out_keys=["action"])
    collector = Collector(
        cartpole(),
        policy,
        frames_per_batch=8,
        total_frames=16,
        exploration_type=ExplorationType.RANDOM,
    )
    batches = []
    thread = threading.Thread(target=lambda: batches.extend(collector), daemon=True)
    assert exploration_type() is None
    try:
        thread.start()
        assert gate.inside.wait(30)
        # the collector's block is its thread's: the main thread still reads no type
        assert exploration_type() is None
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            gate.release.set()
            thread.join(30)
            assert not thread.is_alive()
            assert exploration_type() is ExplorationType.DETERMINISTIC
    finally:
        gate.release.set()
        thread.join(30)
        collector.shutdown()
    # the blocks ended in the other order than they began: nothing stays set
    assert exploration_type() is None
    assert len(batches) == 2
    # every call in the collector's thread read the collector's type, the main thread's
    # DETERMINISTIC block included
    assert len(gate.seen) >= 16
    assert set(gate.seen) == {ExplorationType.RANDOM}
