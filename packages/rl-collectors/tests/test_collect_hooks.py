"""TorchRL's pre_collect_hook / post_collect_hook: when they run, what they get, where."""

import os

import pytest
import torch

from rl.collectors import Collector, MultiSyncCollector
from rl.data import LazyTensorStorage, ReplayBuffer
from rl.envs import PendulumEnv


def _collector(**kwargs):
    return Collector(PendulumEnv(), None, frames_per_batch=16, total_frames=64, **kwargs)


def test_hooks_run_once_per_batch_and_post_gets_the_yielded_batch():
    calls = []

    def postproc(batch):
        batch = batch.clone()
        batch.set("marked", torch.ones(batch.batch_size, dtype=torch.bool))
        return batch

    collector = _collector(
        postproc=postproc,
        pre_collect_hook=lambda: calls.append("pre"),
        post_collect_hook=lambda batch: calls.append(batch),
    )
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 4
    assert calls[0::2] == ["pre"] * 4
    received = calls[1::2]
    assert all(got is batch for got, batch in zip(received, batches, strict=True))
    assert all("marked" in got.keys() for got in received)
    assert sum(b.numel() for b in received) == 64


def test_hooks_default_to_none_and_can_be_set_later():
    collector = _collector()
    assert collector.pre_collect_hook is None and collector.post_collect_hook is None
    counts = {"pre": 0, "post": 0}
    collector.pre_collect_hook = lambda: counts.__setitem__("pre", counts["pre"] + 1)
    collector.post_collect_hook = lambda b: counts.__setitem__("post", counts["post"] + 1)
    n = len(list(collector))
    collector.shutdown()
    assert counts == {"pre": n, "post": n} and n == 4


def test_post_hook_runs_when_batches_go_to_a_replay_buffer():
    seen = []
    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    collector = _collector(replay_buffer=rb, post_collect_hook=lambda b: seen.append(b.numel()))
    out = list(collector)
    collector.shutdown()
    assert out == [None] * 4 and seen == [16] * 4 and len(rb) == 64


def test_a_hook_error_propagates():
    def hook(batch):
        raise RuntimeError("hook failed")

    collector = _collector(post_collect_hook=hook)
    with pytest.raises(RuntimeError, match="hook failed"):
        list(collector)
    collector.shutdown()


def test_multiprocess_hooks_run_in_the_workers():
    manager = torch.multiprocessing.Manager()
    calls = manager.list()

    def pre():
        calls.append(("pre", os.getpid()))

    def post(batch):
        calls.append(("post", os.getpid(), batch.numel()))

    collector = MultiSyncCollector(
        [PendulumEnv, PendulumEnv],
        None,
        frames_per_batch=16,
        total_frames=64,
        pre_collect_hook=pre,
        post_collect_hook=post,
    )
    try:
        list(collector)
        assert collector.post_collect_hook is post
        with pytest.raises(NotImplementedError, match="pass post_collect_hook= to the constructor"):
            collector.post_collect_hook = None
    finally:
        collector.shutdown()
    entries = list(calls)
    manager.shutdown()
    pids = {entry[1] for entry in entries}
    assert len(pids) == 2 and os.getpid() not in pids
    assert sorted(e[0] for e in entries) == ["post"] * 8 + ["pre"] * 8
    assert {e[2] for e in entries if e[0] == "post"} == {8}
