"""HERReplayBuffer and the offline-to-online buffers (TorchRL 0.14's torchrl.data names)."""

import pytest
import torch
from tensordict import TensorDict

from rl.data import (
    HERReplayBuffer,
    HindsightStrategy,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    prefill_replay_buffer,
)
from rl.data.replay_buffers._utils import KeyMismatchError


def episodes(lengths=(4, 6, 5)):
    """Achieved goal = [episode, step]; desired goal = -1; episodes end with done."""
    ep = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths]).unsqueeze(-1)
    achieved = torch.stack([ep, step], -1).float()
    n = ep.shape[0]
    return TensorDict(
        {
            "desired_goal": -torch.ones(n, 2),
            "achieved_goal": achieved,
            "next": {
                "desired_goal": -torch.ones(n, 2),
                "reward": torch.zeros(n, 1),
                "done": done,
            },
        },
        batch_size=[n],
    )


def reward_fn(td):
    return (td["achieved_goal"] == td["desired_goal"]).all(-1, keepdim=True).float()


def buffer(strategy="future", her_ratio=1.0, data=None, **kwargs):
    rb = HERReplayBuffer(
        reward_fn=reward_fn,
        her_ratio=her_ratio,
        strategy=strategy,
        storage=LazyTensorStorage(kwargs.pop("capacity", 100)),
        batch_size=64,
        generator=torch.Generator().manual_seed(0),
        **kwargs,
    )
    rb.extend(episodes() if data is None else data)
    return rb


class TestHERReplayBuffer:
    @pytest.mark.parametrize("strategy", list(HindsightStrategy))
    def test_goals_come_from_the_strategy(self, strategy):
        rb = buffer(strategy)
        batch = rb.sample()
        own, goal = batch["achieved_goal"], batch["desired_goal"]
        lengths = torch.tensor([4, 6, 5])
        assert torch.equal(batch["next", "desired_goal"], goal)
        if strategy != "random":
            assert torch.equal(goal[:, 0], own[:, 0])  # same episode
        if strategy == "future":
            assert bool((goal[:, 1] >= own[:, 1]).all())
            assert bool((goal[:, 1] > own[:, 1]).any())
        if strategy == "final":
            assert torch.equal(goal[:, 1], (lengths[own[:, 0].long()] - 1).float())
        if strategy == "random":
            assert goal[:, 0].unique().numel() > 1 and bool((goal[:, 0] != own[:, 0]).any())
        # the reward is recomputed from the relabeled goal
        assert torch.equal(batch["next", "reward"], reward_fn(batch))

    def test_only_the_her_ratio_is_relabeled_and_storage_is_untouched(self):
        rb = buffer("final", her_ratio=0.25)
        batch = rb.sample()
        assert bool((batch["desired_goal"][16:] == -1).all())
        assert bool((batch["desired_goal"][:16] >= 0).all())
        assert batch["next", "reward"][16:].sum() == 0
        assert bool((rb.storage._storage["desired_goal"][:15] == -1).all())

    def test_episodes_do_not_cross_the_wrap(self):
        # capacity 12: 15 steps wrap; the newest write (index 2) ends an episode
        rb = buffer("future", capacity=12)
        data = rb.storage._storage
        for _ in range(5):
            batch = rb.sample()
            index = batch["index"]
            goal = batch["desired_goal"]
            assert bool((goal[:, 0] == batch["achieved_goal"][:, 0]).all())
            wrapped = index <= 2  # items 0..2 hold the last steps of episode 2
            assert bool((goal[wrapped, 1] <= data["achieved_goal"][2, 1]).all())

    def test_errors(self):
        with pytest.raises(ValueError, match=r"her_ratio must be in \[0, 1\], got 1.5"):
            HERReplayBuffer(reward_fn, her_ratio=1.5)
        with pytest.raises(ValueError, match="strategy must be one of"):
            HERReplayBuffer(reward_fn, strategy="past")
        data = episodes().exclude("achieved_goal")
        with pytest.raises(
            KeyMismatchError, match="achieved_goal_key='achieved_goal' is not stored"
        ):
            buffer(data=data).sample()
        data = episodes().exclude(("next", "done"))
        with pytest.raises(KeyMismatchError, match="holds neither .*'done'.* nor .*'terminated'"):
            buffer(data=data).sample()
        rb = HERReplayBuffer(
            reward_fn=lambda td: torch.zeros(3), her_ratio=1.0, storage=LazyTensorStorage(50)
        )
        rb.extend(episodes())
        with pytest.raises(ValueError, match=r"reward_fn returned \(3,\), expected \(8, 1\)"):
            rb.sample(8)


class TestOfflineToOnline:
    def offline(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(100))
        rb.extend(TensorDict({"source": torch.zeros(100)}, [100]))
        return rb

    def test_exact_split_and_anneal(self):
        rb = OfflineToOnlineReplayBuffer(self.offline(), online_capacity=50, batch_size=10)
        assert rb.sample()["source"].tolist() == [0.0] * 10  # online empty: all offline
        rb.extend(TensorDict({"source": torch.ones(20)}, [20]))
        assert rb.sample()["source"].tolist() == [0.0] * 5 + [1.0] * 5
        assert len(rb) == 120 and len(rb.online_buffer) == 20 and len(rb.offline_buffer) == 100
        rb.anneal(3, 5)
        assert rb.offline_fraction == pytest.approx(0.2)
        assert rb.sample()["source"].sum() == 8
        rb.anneal(10, 5)
        assert rb.offline_fraction == 0.0 and rb.sample()["source"].tolist() == [1.0] * 10

    def test_prefill(self):
        target = ReplayBuffer(storage=LazyTensorStorage(1000))
        assert (
            len(prefill_replay_buffer(target, self.offline(), n_samples=250, chunk_size=60)) == 100
        )
        target = ReplayBuffer(storage=LazyTensorStorage(1000))
        assert len(prefill_replay_buffer(target, self.offline(), n_samples=70, chunk_size=30)) == 70

    def test_errors(self):
        with pytest.raises(ValueError, match="exactly one of online_storage and online_capacity"):
            OfflineToOnlineReplayBuffer(self.offline())
        with pytest.raises(ValueError, match=r"offline_fraction must be in \(0, 1\), got 1.0"):
            OfflineToOnlineReplayBuffer(self.offline(), online_capacity=5, offline_fraction=1.0)
        with pytest.raises(NotImplementedError, match="need a download"):
            OfflineToOnlineReplayBuffer("d4rl:hopper-medium-v2", online_capacity=5)
        with pytest.raises(NotImplementedError, match="need a download"):
            prefill_replay_buffer(ReplayBuffer(), "minari:x")
        with pytest.raises(ValueError, match="sample.. needs a batch_size"):
            OfflineToOnlineReplayBuffer(self.offline(), online_capacity=5).sample()
