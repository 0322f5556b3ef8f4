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
    TensorDictMaxValueWriter,
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

    def test_state_dict_records_the_settings_and_load_keeps_the_constructors(self, tmp_path):
        rb = buffer("final", her_ratio=0.25)
        state = rb.state_dict()
        assert state["_her"] == {
            "her_ratio": 0.25,
            "strategy": "final",
            "goal_key": "desired_goal",
            "achieved_goal_key": "achieved_goal",
            "reward_key": ("next", "reward"),
            "end_key": ("next", "done"),
        }
        # as TorchRL 0.14: the data is restored, the relabeling settings stay as built
        other = HERReplayBuffer(
            reward_fn=reward_fn, her_ratio=0.0, storage=LazyTensorStorage(100), batch_size=64
        )
        other.load_state_dict(state)
        assert (other.her_ratio, other.strategy) == (0.0, HindsightStrategy.FUTURE)
        assert "_her" in state  # the caller's dict is not modified
        assert len(other) == 15
        assert torch.equal(other[:]["achieved_goal"], rb[:]["achieved_goal"])
        assert bool((other.sample()["desired_goal"] == -1).all())  # her_ratio 0: none relabeled
        rb.dumps(tmp_path / "rb")  # through torch.load(weights_only=True) and back
        third = HERReplayBuffer(
            reward_fn=reward_fn,
            her_ratio=0.5,
            strategy="final",
            storage=LazyTensorStorage(100),
            batch_size=64,
        )
        third.loads(tmp_path / "rb")
        assert (third.her_ratio, third.strategy) == (0.5, HindsightStrategy.FINAL)
        batch = third.sample()
        assert bool((batch["desired_goal"][32:] == -1).all())
        assert bool((batch["desired_goal"][:32] >= 0).all())
        lengths = torch.tensor([4, 6, 5])  # final: the last step of the same episode
        own = batch["achieved_goal"][:32, 0].long()
        assert torch.equal(batch["desired_goal"][:32, 1], (lengths[own] - 1).float())

    def test_load_state_dict_accepts_torchrls_her_entry(self):
        rb = buffer("final")
        rb.sample()  # fills the episode-ends cache
        state = rb.state_dict()
        # the "_her" entry as TorchRL 0.14.1's HERReplayBuffer.state_dict writes it: no
        # end_key, and its own episode-ends cache
        state["_her"] = {
            "goal_key": "desired_goal",
            "achieved_goal_key": "achieved_goal",
            "reward_key": ("next", "reward"),
            "her_ratio": 0.8,
            "strategy": "future",
            "episode_ends_cache": torch.tensor([0]),
            "last_cache_key": (-1, None, False),
        }
        other = buffer("final", data=episodes((3, 3)))
        other.sample()
        other.load_state_dict(state)
        assert (other.her_ratio, other.strategy) == (1.0, HindsightStrategy.FINAL)
        assert other._episode_ends(other.storage).tolist() == [3, 9, 14]  # not the stale [2, 5]
        batch = other.sample()
        lengths = torch.tensor([4, 6, 5])
        own = batch["achieved_goal"][:, 0].long()
        assert torch.equal(batch["desired_goal"][:, 1], (lengths[own] - 1).float())

    def test_episode_ends_follow_every_write(self):
        rb = buffer("final")
        first = rb._episode_ends(rb.storage)
        assert first.tolist() == [3, 9, 14]
        assert rb._episode_ends(rb.storage) is first  # no write since: the cached ends
        rb.extend(episodes((2,)))  # one more episode of 2 steps at 15-16
        assert rb._episode_ends(rb.storage).tolist() == [3, 9, 14, 16]
        rb.empty()  # the write count starts again: the same count must not reuse the cache
        rb.extend(episodes((7, 10)))  # 17 items, as before the empty
        assert rb._episode_ends(rb.storage).tolist() == [6, 16]

    def test_episode_ends_follow_a_max_value_writer_after_the_storage_is_full(self):
        # TensorDictMaxValueWriter overwrites slots without moving the storage's length or
        # write end: its write_count is what tells the cache the episodes changed
        rb = HERReplayBuffer(
            reward_fn=reward_fn,
            her_ratio=1.0,
            strategy="final",
            storage=LazyTensorStorage(4),
            writer=TensorDictMaxValueWriter(rank_key="r"),
            batch_size=32,
            generator=torch.Generator().manual_seed(0),
        )
        first = episodes((4,))
        first["r"] = torch.ones(4)
        rb.extend(first)
        batch = rb.sample()
        assert rb.write_count == 4 and rb._episode_ends(rb.storage).tolist() == [3]
        assert bool((batch["desired_goal"] == torch.tensor([0.0, 3.0])).all())
        second = episodes((2, 2))  # higher ranked: replaces every stored item
        second["achieved_goal"][:, 0] += 1  # episodes 1 and 2
        second["r"] = torch.full((4,), 5.0)
        rb.extend(second)
        assert rb.write_count == 8
        assert rb[:]["achieved_goal"][:, 0].tolist() == [1.0, 1.0, 2.0, 2.0]
        assert rb._episode_ends(rb.storage).tolist() == [1, 3]
        batch = rb.sample()
        goal, own = batch["desired_goal"], batch["achieved_goal"]
        assert torch.equal(goal[:, 0], own[:, 0])  # the goal comes from the same episode
        assert bool((goal[:, 1] == 1).all())  # its final step
        assert torch.equal(batch["next", "reward"], reward_fn(batch))

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


def env_batches(ends, steps=8, start=0):
    """``[B, T]`` steps of B envs: achieved goal = [env, step, episode]; ``ends[b]``: the
    steps where env b's episodes end (in ``[start, start + steps)``)."""
    b = len(ends)
    step = torch.arange(start, start + steps).expand(b, steps)
    done = torch.zeros(b, steps, dtype=torch.bool)
    for i, env_ends in enumerate(ends):
        for t in env_ends:
            if start <= t < start + steps:
                done[i, t - start] = True
    episode = torch.stack(
        [torch.searchsorted(torch.tensor(sorted(e)), step[i]) for i, e in enumerate(ends)]
    )
    env = torch.arange(b).unsqueeze(-1).expand(b, steps)
    achieved = torch.stack([env, step, episode], -1).float()
    return TensorDict(
        {
            "desired_goal": -torch.ones(b, steps, 3),
            "achieved_goal": achieved,
            "next": {"reward": torch.zeros(b, steps, 1), "done": done.unsqueeze(-1)},
        },
        batch_size=[b, steps],
    )


class TestHERMultiDimStorage:
    """``ndim=2`` storages fed ``[B, T]`` batches: one sequence per env (TorchRL 0.14.1
    raises NotImplementedError there; these check the relabeling against the layout)."""

    ENDS = ([2, 7], [4], [0, 3, 5])  # env 1's second episode is still running at t=7

    def make(self, strategy, capacity=64, her_ratio=1.0):
        rb = HERReplayBuffer(
            reward_fn=lambda td: (
                (td["achieved_goal"] == td["desired_goal"]).all(-1, keepdim=True).float()
            ),
            her_ratio=her_ratio,
            strategy=strategy,
            storage=LazyTensorStorage(capacity, ndim=2),
            batch_size=256,
            generator=torch.Generator().manual_seed(1),
        )
        rb.extend(env_batches(self.ENDS))
        return rb

    @pytest.mark.parametrize("strategy", list(HindsightStrategy))
    def test_goals_stay_in_the_env_and_episode(self, strategy):
        rb = self.make(strategy)
        assert rb.storage.shape == (8, 3)
        batch = rb.sample()
        own, goal = batch["achieved_goal"], batch["desired_goal"]
        # the sampled coordinates are (time, env)
        assert torch.equal(own[:, 0], batch["index"][:, 1].float())
        assert torch.equal(own[:, 1], batch["index"][:, 0].float())
        if strategy != "random":
            assert torch.equal(goal[:, 0], own[:, 0])  # same env
            assert torch.equal(goal[:, 2], own[:, 2])  # same episode
        else:
            assert bool((goal[:, 0] != own[:, 0]).any())
        if strategy == "future":
            assert bool((goal[:, 1] >= own[:, 1]).all()) and bool((goal[:, 1] > own[:, 1]).any())
        if strategy == "final":
            last = {}
            for env, env_ends in enumerate(self.ENDS):
                bounds = sorted({*env_ends, 7})
                for ep, end in enumerate(bounds):
                    last[(env, ep)] = end
            expected = torch.tensor(
                [last[(int(e), int(ep))] for e, ep in zip(own[:, 0], own[:, 2])]
            ).float()
            torch.testing.assert_close(goal[:, 1], expected)
        if strategy == "episode":
            # every step of the sampled episodes is drawn, earlier ones included
            assert bool((goal[:, 1] < own[:, 1]).any())
        torch.testing.assert_close(batch["next", "reward"], rb.reward_fn(batch))

    def test_same_goals_as_the_1d_buffer_for_final(self):
        # laying the envs' sequences end to end in a 1-D storage gives the same FINAL goals
        rb2 = self.make("final")
        flat = env_batches(self.ENDS)
        flat["next", "done"][:, -1] = True  # a 1-D storage needs the sequence ends marked
        rb1 = HERReplayBuffer(
            reward_fn=lambda td: torch.zeros(td.shape[0], 1),
            her_ratio=1.0,
            strategy="final",
            storage=LazyTensorStorage(64),
        )
        rb1.extend(flat.reshape(-1))
        lookup = {
            tuple(a.tolist()): tuple(g.tolist())
            for a, g in zip(*(lambda b: (b["achieved_goal"], b["desired_goal"]))(rb1.sample(400)))
        }
        batch = rb2.sample()
        for a, g in zip(batch["achieved_goal"], batch["desired_goal"]):
            assert lookup.get(tuple(a.tolist()), tuple(g.tolist())) == tuple(g.tolist())

    def test_ratio_and_storage_untouched(self):
        rb = self.make("final", her_ratio=0.5)
        batch = rb.sample()
        assert bool((batch["desired_goal"][128:] == -1).all())
        assert bool((batch["desired_goal"][:128] >= 0).all())
        assert bool((rb.storage._storage["desired_goal"][:8] == -1).all())

    def test_episodes_do_not_cross_the_wrap(self):
        # capacity 8 rows x 3 envs; a second write of 5 steps wraps: rows 0..4 hold steps
        # 8..12, rows 5..7 the older steps 5..7; the newest write (row 4) ends the sequences
        rb = self.make("future", capacity=24)
        rb.extend(env_batches(([10], [], [12]), steps=5, start=8))
        stored = rb.storage._storage["achieved_goal"]
        assert stored[4, :, 1].tolist() == [12.0, 12.0, 12.0]
        for _ in range(5):
            batch = rb.sample()
            own, goal = batch["achieved_goal"], batch["desired_goal"]
            assert torch.equal(goal[:, 0], own[:, 0])
            newer = own[:, 1] >= 8
            assert bool((goal[newer, 1] >= own[newer, 1]).all())
            assert bool((goal[newer, 1] <= 12).all())
            # the older rows never take a goal from the newest steps (the wrap is a boundary)
            older = ~newer
            assert bool((goal[older, 1] <= 7).all()) and bool((goal[older, 1] >= 5).all())


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

    def test_state_dict_round_trip(self):
        rb = OfflineToOnlineReplayBuffer(self.offline(), online_capacity=50, batch_size=10)
        rb.extend(TensorDict({"source": torch.arange(1.0, 21.0)}, [20]))
        rb.anneal(1, 2)
        state = rb.state_dict()
        assert state["offline_fraction"] == 0.25 and state["base_offline_fraction"] == 0.5
        other = OfflineToOnlineReplayBuffer(
            self.offline(), online_capacity=50, offline_fraction=0.9, batch_size=10
        )
        other.load_state_dict(state)
        assert other.offline_fraction == 0.25
        assert other.online_buffer[:]["source"].tolist() == list(range(1, 21))
        other.anneal(0, 2)  # annealing starts again from the restored base, 0.5
        assert other.offline_fraction == 0.5

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
        with pytest.raises(ValueError, match="batch_size must be provided .*'d4rl:hopper"):
            OfflineToOnlineReplayBuffer("d4rl:hopper-medium-v2", online_capacity=5)
        # a name goes through rl.data.datasets.load_dataset; D4RL is download-only there
        with pytest.raises(NotImplementedError, match="'d4rl' dataset 'hopper-medium-v2'"):
            OfflineToOnlineReplayBuffer("d4rl:hopper-medium-v2", online_capacity=5, batch_size=4)
        with pytest.raises(NotImplementedError, match="'openx' dataset 'x'"):
            prefill_replay_buffer(ReplayBuffer(), "openx:x")
        with pytest.raises(ValueError, match=r"\['root'\]\) are only forwarded when"):
            OfflineToOnlineReplayBuffer(self.offline(), online_capacity=5, root="r")
        with pytest.raises(ValueError, match="online_capacity, not both"):
            OfflineToOnlineReplayBuffer(
                self.offline(), online_capacity=5, online_storage=LazyTensorStorage(5)
            )
        with pytest.raises(ValueError, match="sample.. needs a batch_size"):
            OfflineToOnlineReplayBuffer(self.offline(), online_capacity=5).sample()
