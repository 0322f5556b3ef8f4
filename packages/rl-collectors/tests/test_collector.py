"""Collector (single process): batches against env.rollout, ids, frames, errors, state."""

from __future__ import annotations

import doctest
import importlib
import pickle
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.collectors import Collector, SyncDataCollector
from rl.core import Composite, ExplorationType, Unbounded, exploration_type
from rl.envs import EnvBase, GymEnv, PendulumEnv

sys.path.insert(0, str(Path(__file__).parent))
from _collector_helpers import (  # noqa: E402
    FakeBuffer,
    cartpole,
    pole_policy,
    sampling_policy,
    serial_cartpole,
)

ENVS = {
    "gym": lambda: cartpole(1),
    "gym-vector": lambda: cartpole(3),
    "serial": lambda: serial_cartpole(3),
}


def _traj_ids_loop(done: torch.Tensor) -> torch.Tensor:
    """Reference: the ids a step-by-step collector assigns ([n, T] done flags)."""
    n, steps = done.shape
    current = torch.arange(n)
    next_id = n
    ids = torch.empty(n, steps, dtype=torch.int64)
    for t in range(steps):
        ids[:, t] = current
        for i in range(n):
            if done[i, t]:
                current[i] = next_id
                next_id += 1
    return ids


@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_traj_ids_over_batches_with_and_without_ends(path, monkeypatch):
    """Batches where no trajectory ends (ids carried as they are) and batches where some
    do give the ids of one step-by-step pass over the whole sequence; a yielded id
    tensor written in place changes nothing that follows. CPU batches are numbered in
    numpy; every batch goes through the torch path (other devices') in the second case."""
    from rl.collectors._common import TrajIds

    gen = torch.Generator().manual_seed(0)
    n, steps, batches = 3, 5, 8
    done = torch.rand(n, steps * batches, generator=gen) < 0.15
    done[:, : 2 * steps] = False  # two whole batches without an end
    done[:, 5 * steps : 6 * steps] = False
    done[:, 7 * steps - 1] = True  # every env ends at a batch's last step
    monkeypatch.setattr(TrajIds, "_numpy_path", lambda self, d: path == "numpy")
    torch_calls = []
    assign_torch = TrajIds._assign_torch
    monkeypatch.setattr(
        TrajIds,
        "_assign_torch",
        lambda self, d, e: torch_calls.append(e) or assign_torch(self, d, e),
    )
    traj = TrajIds(torch.Size([n]))
    parts = []
    for b in range(batches):
        ids = traj.assign(done[:, b * steps : (b + 1) * steps, None])
        parts.append(ids.clone())
        ids.fill_(-1)
    torch.testing.assert_close(torch.cat(parts, 1), _traj_ids_loop(done))
    assert traj.next_id == n + int(done.sum())
    batches_with_ends = sum(
        bool(done[:, b * steps : (b + 1) * steps].any()) for b in range(batches)
    )
    assert len(torch_calls) == (batches_with_ends if path == "torch" else 0)
    one = TrajIds(torch.Size([]))  # an unbatched env: [T] ids
    assert one.assign(torch.zeros(4, 1, dtype=torch.bool)).tolist() == [0, 0, 0, 0]
    ends = torch.tensor([[False], [True], [False], [False]])
    assert one.assign(ends).tolist() == [0, 0, 1, 1]


def test_end_of_traj_reads_step_flags_and_group_flags():
    """A step's flag (``[*B, T, 1]``) ends a trajectory where it is set; a group's
    (``[*B, T, n, 1]``) where any member's is; two flags where either is."""
    from rl.collectors._common import end_of_traj

    gen = torch.Generator().manual_seed(0)
    done = torch.rand(3, 6, 1, generator=gen) < 0.3
    agents = torch.rand(3, 6, 4, 1, generator=gen) < 0.1
    truncated = torch.zeros(3, 6, 1, dtype=torch.bool)
    truncated[1, 2] = True
    td = TensorDict(
        {"done": done, "truncated": truncated, "agents": {"done": agents}}, batch_size=[3, 6]
    )
    mask = end_of_traj(td, ["done"], 2)
    assert torch.equal(mask, done[..., 0])
    assert mask.data_ptr() == done.data_ptr()  # a bool step flag is viewed, not copied
    assert torch.equal(end_of_traj(td, [("agents", "done")], 2), agents.flatten(2).any(-1))
    both = end_of_traj(td, ["done", "truncated"], 2)
    assert torch.equal(both, done[..., 0] | truncated[..., 0]) and both.shape == (3, 6)
    assert torch.equal(end_of_traj(td, ["done"], 1), done.flatten(1).any(-1))
    with pytest.raises(KeyError, match="no done flag"):
        end_of_traj(td, [], 2)
    # flags stored as integers or floats: a bool mask all the same, combinable
    td.set("done", done.to(torch.uint8))
    td.set("truncated", truncated.float())
    mixed = end_of_traj(td, ["done", "truncated"], 2)
    assert mixed.dtype == torch.bool and torch.equal(mixed, both)


def test_traj_ids_of_integer_flags_are_integers():
    """Done flags stored as integers are numbered as bools are, in int64."""
    from rl.collectors._common import TrajIds

    traj = TrajIds(torch.Size([2]))
    flags = torch.tensor([[0, 1, 0], [1, 0, 0]], dtype=torch.uint8)
    ids = traj.assign(flags)
    assert ids.dtype == torch.int64 and traj.current.dtype == torch.int64
    assert ids.tolist() == [[0, 0, 3], [1, 2, 2]]
    # a batch without an end keeps the ids, whatever the flags' dtype (numpy has no bfloat16)
    for dtype in (torch.uint8, torch.float32, torch.bfloat16):
        assert traj.assign(torch.zeros(2, 2, dtype=dtype)).tolist() == [[3, 3], [2, 2]]
    ends = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.bfloat16)
    assert traj.assign(ends).tolist() == [[3, 3], [2, 4]]


class TestCollector:
    @pytest.mark.parametrize("kind", sorted(ENVS))
    def test_batches_continue_one_rollout(self, kind):
        """Consecutive batches are exactly one long env.rollout cut in pieces."""
        env = ENVS[kind]()
        env.set_seed(0)
        n = max(env.batch_size.numel(), 1)
        collector = Collector(env, pole_policy(), frames_per_batch=25 * n, total_frames=100 * n)
        batches = list(collector)
        assert [b.batch_size[-1] for b in batches] == [25] * 4
        data = torch.cat(batches, -1)
        ref_env = ENVS[kind]()
        ref_env.set_seed(0)
        ref = ref_env.rollout(100, pole_policy(), break_when_any_done=False)
        assert set(ref.keys(True, True)) | {("collector", "traj_ids")} == set(data.keys(True, True))
        for key in ref.keys(True, True):
            torch.testing.assert_close(data[key], ref[key], msg=str(key))
        assert bool(ref["next", "done"].any())  # episodes ended inside the batches
        done = ref["next", "done"].reshape(n, 100)
        torch.testing.assert_close(
            data["collector", "traj_ids"].reshape(n, 100), _traj_ids_loop(done)
        )
        collector.shutdown()

    def test_old_name_and_env_keyword(self):
        assert SyncDataCollector is Collector
        collector = Collector(env=cartpole(2), frames_per_batch=4, total_frames=8)
        assert [b.batch_size for b in collector] == [torch.Size([2, 2])] * 2

    def test_exact_frames(self):
        """The last batch is shortened: frames add up to total_frames exactly."""
        collector = Collector(cartpole(2), frames_per_batch=30, total_frames=100)
        sizes = [b.numel() for b in collector]
        assert sizes == [30, 30, 30, 10]
        assert len(collector) == 4

    def test_endless_until_shutdown(self):
        collector = Collector(cartpole(2), frames_per_batch=10, total_frames=-1)
        for i, _ in enumerate(collector):
            if i == 5:
                collector.shutdown()
        assert i == 5
        with pytest.raises(RuntimeError, match="shut down"):
            collector.next()

    def test_frames_not_divisible_round_up(self):
        # as TorchRL: frames_per_batch rounded up to whole steps of every env (a warning);
        # total_frames reached with whole steps (the last batch shortened)
        with pytest.warns(UserWarning, match=r"frames_per_batch \(7\) is not exactly divisible"):
            collector = Collector(cartpole(2), frames_per_batch=7, total_frames=15)
        try:
            assert collector.frames_per_batch == 8
            assert [b.batch_size for b in collector] == [(2, 4), (2, 4)]
            assert collector._frames == 16
        finally:
            collector.shutdown()

    @pytest.mark.parametrize(
        ("frames", "total", "match"),
        [(0, 8, "frames_per_batch must be a positive int"), (8, 0, "total_frames=0 must be -1")],
    )
    def test_bad_frames(self, frames, total, match):
        with pytest.raises(ValueError, match=match):
            Collector(cartpole(2), frames_per_batch=frames, total_frames=total)

    def test_random_policy_and_init_random_frames(self):
        collector = Collector(cartpole(2), None, frames_per_batch=20, total_frames=40)
        batch = next(iter(collector))
        assert set(batch["action"].unique().tolist()) <= {0, 1}
        collector = Collector(
            cartpole(2), pole_policy(), frames_per_batch=20, total_frames=60,
            init_random_frames=20,
        )  # fmt: skip
        batches = list(collector)
        # random first batch: actions do not follow the policy; then they do
        follows = [
            bool((b["action"] == (b["observation"][..., 2] > 0).long()).all()) for b in batches
        ]
        assert follows == [False, True, True]

    def test_policy_action_outside_spec(self):
        bad = TensorDictModule(
            lambda obs: torch.full(obs.shape[:-1], 5, dtype=torch.long),
            in_keys=["observation"],
            out_keys=["action"],
        )
        collector = Collector(cartpole(2), bad, frames_per_batch=4, total_frames=8)
        # the collector passes it on (as TorchRL); gymnasium refuses it, and the env
        # names the key, the spec and the value
        with pytest.raises(ValueError, match=r"action 'action' \(sub-env 0\) holds 5.*Categorical"):
            next(iter(collector))

    def test_action_of_the_spec_size_in_another_shape_passes(self):
        class Counter(EnvBase):
            """Adds its (1,)-spec action to a counter; reads it whatever its shape."""

            def __init__(self):
                super().__init__()
                self.observation_spec = Composite(count=Unbounded(shape=(1,)))
                self.action_spec = Unbounded(shape=(1,))
                self.reward_spec = Unbounded(shape=(1,))

            def _reset(self, td):
                self.count = torch.zeros(1)
                return TensorDict({"count": self.count.clone()}, [])

            def _step(self, td):
                self.count = self.count + td["action"].reshape(1)
                return TensorDict(
                    {"count": self.count.clone(), "reward": torch.zeros(1),
                     "done": torch.zeros(1, dtype=torch.bool),
                     "terminated": torch.zeros(1, dtype=torch.bool)}, [],
                )  # fmt: skip

            def _set_seed(self, seed):
                return seed

        scalar = TensorDictModule(
            lambda obs: torch.ones(obs.shape[:-1]), in_keys=["count"], out_keys=["action"]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            batch = next(iter(Collector(Counter(), scalar, frames_per_batch=4, total_frames=4)))
        assert batch["next", "count"].reshape(-1).tolist() == [1.0, 2.0, 3.0, 4.0]
        wide = TensorDictModule(
            lambda obs: torch.ones((*obs.shape[:-1], 3)), in_keys=["count"], out_keys=["action"]
        )
        with pytest.raises(ValueError, match=r"shape \(3,\), expected \(1,\)"):
            next(iter(Collector(Counter(), wide, frames_per_batch=4, total_frames=4)))

    def test_multi_action_env_collects_chunks(self):
        from rl.envs import MultiAction, TransformedEnv

        env = TransformedEnv(PendulumEnv(), MultiAction())  # action spec (-1, 1)
        chunk = TensorDictModule(
            lambda obs: torch.zeros(*obs.shape[:-1], 4, 1), ["observation"], ["action"]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            batch = next(iter(Collector(env, chunk, frames_per_batch=4, total_frames=8)))
        assert batch["action"].shape == (4, 4, 1)

    def test_action_of_another_shape_with_the_same_size_raises(self):
        from rl.collectors._common import check_actions

        env = PendulumEnv()
        env.action_spec = Unbounded(shape=(2, 3))
        data = TensorDict({"action": torch.zeros(5, 3, 2)}, [5])
        with pytest.raises(ValueError, match=r"shape \(3, 2\), expected \(2, 3\)"):
            check_actions(env, data, None)

    def test_discrete_action_outside_spec_warns(self):
        from rl.collectors._common import check_actions

        env = cartpole(2)  # batch [2]; a [2, T] batch of actions 7 for Categorical(2)
        data = TensorDict({"action": torch.full((2, 3), 7)}, [2, 3])
        with pytest.warns(UserWarning, match=r"action 'action' = tensor\(\[7, 7\]\).*as is"):
            check_actions(env, data, None)
        env.close()

    def test_continuous_action_beyond_bounds_warns(self):
        loud = TensorDictModule(
            lambda obs: torch.full((*obs.shape[:-1], 1), 3.0),
            in_keys=["observation"],
            out_keys=["action"],
        )
        collector = Collector(PendulumEnv(), loud, frames_per_batch=4, total_frames=4)
        with pytest.warns(UserWarning, match=r"action 'action' = tensor\(\[3\.\]\).*Bounded"):
            batch = next(iter(collector))
        assert (batch["action"] == 3.0).all()

    def test_exploration_type_set_while_acting(self):
        seen = []

        def policy(td):
            seen.append(exploration_type())
            td["action"] = torch.zeros(td.batch_size, dtype=torch.long)
            return td

        for mode in (ExplorationType.RANDOM, ExplorationType.DETERMINISTIC):
            seen.clear()
            collector = Collector(
                cartpole(2), policy, frames_per_batch=4, total_frames=4, exploration_type=mode
            )
            list(collector)
            assert seen and set(seen) == {mode}

    def test_replay_buffer_extend(self):
        buffer = FakeBuffer()
        collector = Collector(
            cartpole(2), pole_policy(), frames_per_batch=10, total_frames=30, replay_buffer=buffer
        )
        assert list(collector) == [None, None, None]
        assert [item.batch_size for item in buffer.items] == [torch.Size([10])] * 3
        ids = torch.cat([item["collector", "traj_ids"] for item in buffer.items])
        assert ids.min() == 0

    def test_split_trajs(self):
        collector = Collector(
            cartpole(2), pole_policy(), frames_per_batch=80, total_frames=80, split_trajs=True
        )
        out = next(iter(collector))
        mask = out["collector", "mask"]
        ids = out["collector", "traj_ids"]
        assert out.ndim == 2 and mask.sum() == 80
        for row in range(out.shape[0]):
            valid = ids[row][mask[row]]
            assert (valid == valid[0]).all()
            assert (ids[row][~mask[row]] == 0).all()
            # only the last valid step of a row may be done
            assert not out["next", "done"][row][mask[row]][:-1].any()

    def test_set_truncated_and_max_frames_per_traj(self):
        collector = Collector(
            PendulumEnv(batch_size=[2]), None, frames_per_batch=14, total_frames=28,
            max_frames_per_traj=5, set_truncated=True,
        )  # fmt: skip
        batches = list(collector)
        trunc = torch.cat([b["next", "truncated"] for b in batches], 1).squeeze(-1)
        expected = torch.zeros(2, 14, dtype=torch.bool)
        expected[:, [4, 9]] = True  # max_frames_per_traj (the env truncates and resets)
        expected[:, [6, 13]] = True  # the last step of each batch (in the data only)
        assert torch.equal(trunc, expected)
        # the env continued its episode across the batch end: step counts go on
        counts = torch.cat([b["next", "step_count"] for b in batches], 1)[0].squeeze(-1)
        assert counts.tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4]
        assert not torch.cat([b["next", "terminated"] for b in batches], 1).any()

    def test_set_truncated_needs_a_truncated_key(self):
        # TorchRL 0.14.1 raises at construction: no truncated key, nothing to mark
        env = PendulumEnv(batch_size=[2])
        env.full_done_spec = env.full_done_spec.exclude("truncated")
        assert env.done_keys == ["done", "terminated"]
        with pytest.raises(
            RuntimeError,
            match=r"needs a 'truncated' entry in the done spec, got done keys \['done', "
            r"'terminated'\]: call env.add_truncated_keys\(\) before passing the env to the "
            r"collector$",
        ):
            Collector(env, None, frames_per_batch=4, total_frames=4, set_truncated=True)
        env.add_truncated_keys()
        batch = next(
            iter(Collector(env, None, frames_per_batch=6, total_frames=6, set_truncated=True))
        )
        last = [False, False, True]
        assert batch["next", "truncated"][..., 0].tolist() == [last, last]
        assert batch["next", "done"][..., 0].tolist() == [last, last]
        assert not batch["next", "terminated"].any()

    def test_reset_at_each_iter(self):
        collector = Collector(
            PendulumEnv(batch_size=[2]), None, frames_per_batch=6, total_frames=12,
            max_frames_per_traj=100, reset_at_each_iter=True,
        )  # fmt: skip
        a, b = list(collector)
        assert b["step_count"][:, 0].eq(0).all()
        assert (a["collector", "traj_ids"][:, 0] == torch.tensor([0, 1])).all()
        assert (b["collector", "traj_ids"][:, 0] == torch.tensor([2, 3])).all()

    def test_reset_starts_new_trajectories(self):
        collector = Collector(
            PendulumEnv(batch_size=[2]), None, frames_per_batch=6, total_frames=-1,
            max_frames_per_traj=100,
        )  # fmt: skip
        collector.next()
        collector.reset()
        batch = collector.next()
        assert batch["step_count"][:, 0].eq(0).all()
        assert batch["collector", "traj_ids"][:, 0].tolist() == [2, 3]
        collector.shutdown()

    def test_update_policy_weights(self):
        module = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        collector = Collector(PendulumEnv(), module, frames_per_batch=4, total_frames=-1)
        new = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        torch.nn.init.zeros_(new.module.weight)
        torch.nn.init.constant_(new.module.bias, 0.5)
        collector.update_policy_weights_(new)
        batch = collector.next()
        assert torch.equal(batch["action"], torch.full((4, 1), 0.5))
        collector.update_policy_weights_({"module.weight": torch.zeros(1, 3),
                                          "module.bias": torch.full((1,), -0.25)})  # fmt: skip
        assert torch.equal(collector.next()["action"], torch.full((4, 1), -0.25))
        collector.shutdown()

    def test_state_dict_resume_is_exact(self, tmp_path):
        def make():
            env = cartpole(3)
            return Collector(env, sampling_policy(), frames_per_batch=30, total_frames=150)

        torch.manual_seed(0)
        collector = make()
        collector.set_seed(0)
        it = iter(collector)
        next(it), next(it)
        torch.save(collector.state_dict(), tmp_path / "c.pt")
        rest = list(it)
        state = torch.load(tmp_path / "c.pt", weights_only=True)
        resumed = make()
        resumed.load_state_dict(state)
        again = list(resumed)
        assert len(again) == len(rest) == 3
        for x, y in zip(rest, again):
            for key in x.keys(True, True):
                torch.testing.assert_close(x[key], y[key], msg=str(key))

    def test_background_collection(self):
        buffer = FakeBuffer()
        collector = Collector(
            cartpole(2), pole_policy(), frames_per_batch=10, total_frames=-1, replay_buffer=buffer
        )
        collector.start()
        deadline = time.monotonic() + 10
        while len(buffer) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert collector.is_running()
        collector.async_shutdown()
        assert not collector.is_running()
        count = len(buffer)
        assert count >= 50 and count % 10 == 0
        time.sleep(0.05)
        assert len(buffer) == count
        with pytest.raises(RuntimeError, match="replay_buffer="):
            Collector(cartpole(2), frames_per_batch=2).start()

    def test_docstrings(self):
        for name in ("_single", "_utils", "_base"):
            module = importlib.import_module(f"rl.collectors.{name}")
            assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


class TestSplitTrajectories:
    def test_against_loop(self):
        from rl.collectors.utils import split_trajectories

        ids = torch.tensor([[0, 0, 2, 2, 2], [1, 3, 3, 4, 4]])
        td = TensorDict(
            obs=torch.arange(10).reshape(2, 5),
            collector=TensorDict(traj_ids=ids, batch_size=[2, 5]),
            next=TensorDict(reward=torch.arange(10.0).reshape(2, 5, 1), batch_size=[2, 5]),
            batch_size=[2, 5],
        )
        out = split_trajectories(td)
        assert out.batch_size == (5, 3)
        expected = [[0, 1], [2, 3, 4], [5], [6, 7], [8, 9]]
        for row, values in enumerate(expected):
            n = len(values)
            assert out["obs"][row, :n].tolist() == values
            assert out["next", "reward"][row, :n, 0].tolist() == [float(v) for v in values]
            assert out["collector", "mask"][row].tolist() == [True] * n + [False] * (3 - n)
            assert out["obs"][row, n:].eq(0).all()

    def test_needs_ids_or_done(self):
        from rl.collectors.utils import split_trajectories

        with pytest.raises(KeyError, match="needs the trajectory ids"):
            split_trajectories(TensorDict(obs=torch.zeros(3), batch_size=[3]))

    @staticmethod
    def _two_envs() -> TensorDict:
        # env 0: steps 0..5, done after step 1 and step 4 -> trajectories [0, 1], [2, 3, 4], [5]
        # env 1: steps 6..11, done after step 8 -> trajectories [6, 7, 8], [9, 10, 11]
        done = torch.zeros(2, 6, 1, dtype=torch.bool)
        done[0, 1] = done[0, 4] = done[1, 2] = True
        return TensorDict(
            obs=torch.arange(12.0).reshape(2, 6, 1).expand(2, 6, 3).clone(),
            step=torch.arange(12).reshape(2, 6),
            next=TensorDict(done=done, batch_size=[2, 6]),
            batch_size=[2, 6],
        )

    @pytest.mark.parametrize("as_nested", [True, torch.strided, torch.jagged])
    def test_nested_against_hand_split(self, as_nested):
        from rl.collectors.utils import split_trajectories

        out = split_trajectories(self._two_envs(), as_nested=as_nested)
        expected = [[0, 1], [2, 3, 4], [5], [6, 7, 8], [9, 10, 11]]
        assert out.batch_size == (5, -1)
        assert "mask" not in out.keys()  # every trajectory keeps its own length
        for key in ("obs", "step", ("next", "done"), "traj_ids"):
            assert out[key].is_nested and out[key].layout == torch.strided
        steps = out["step"].unbind()
        assert [t.tolist() for t in steps] == expected
        for traj, values in zip(out["obs"].unbind(), expected, strict=True):
            assert traj.shape == (len(values), 3)
            torch.testing.assert_close(
                traj, torch.tensor(values, dtype=torch.float32)[:, None].expand(-1, 3)
            )
        # done sits on the last step of the trajectories that ended, nowhere else
        dones = [t[:, 0].tolist() for t in out["next", "done"].unbind()]
        assert dones == [
            [False, True],
            [False, False, True],
            [False],
            [False, False, True],
            [False, False, False],
        ]
        # ids are derived from the done flags and written under "traj_ids"
        assert [t.tolist() for t in out["traj_ids"].unbind()] == [
            [i] * len(v) for i, v in enumerate(expected)
        ]
        assert out[1]["step"].tolist() == [2, 3, 4]

    def test_nested_padded_equals_padded_output(self):
        from rl.collectors.utils import split_trajectories

        ids = torch.tensor([[0, 0, 2, 2, 2], [1, 3, 3, 4, 4]])
        td = TensorDict(
            obs=torch.arange(10).reshape(2, 5),
            collector=TensorDict(traj_ids=ids, batch_size=[2, 5]),
            batch_size=[2, 5],
        )
        padded = split_trajectories(td)
        nested = split_trajectories(td, as_nested=True)
        assert ("collector", "mask") not in nested.keys(True)
        assert [t.tolist() for t in nested["collector", "traj_ids"].unbind()] == [
            [0, 0],
            [2, 2, 2],
            [1],
            [3, 3],
            [4, 4],
        ]
        assert (nested.to_padded_tensor(mask_key=("collector", "mask")) == padded).all()


class TestEnvStateLoading:
    """A collector's env state is tensors and plain data: resuming never unpickles."""

    def test_gym_state_round_trip(self, tmp_path):
        def make():
            collector = Collector(
                lambda: GymEnv("CartPole-v1"), None, frames_per_batch=50, total_frames=-1
            )
            collector.set_seed(3)
            return collector

        collector = make()
        batches = iter(collector)
        next(batches)
        torch.save(collector.state_dict(), tmp_path / "c.pt")
        expected = next(batches)
        collector.shutdown()
        resumed = make()
        resumed.load_state_dict(torch.load(tmp_path / "c.pt", weights_only=True))
        got = next(iter(resumed))
        resumed.shutdown()
        torch.testing.assert_close(got, expected, rtol=0, atol=0)

    @staticmethod
    def _payload(marker):
        # the attack found by the hostile test: gymnasium's CloudpickleWrapper unpickles
        # its payload with plain pickle.loads
        inner = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
        return (
            b"cgymnasium.vector.utils.misc\nCloudpickleWrapper\n)\x81C"
            + bytes([len(inner)])
            + inner
            + b"b."
        )

    @pytest.mark.parametrize("where", ["env_state", "object"])
    def test_crafted_checkpoint_is_refused_without_side_effect(self, tmp_path, where):
        marker = tmp_path / "pwned"
        payload = torch.frombuffer(bytearray(self._payload(marker)), dtype=torch.uint8)
        collector = Collector(
            lambda: GymEnv("CartPole-v1"), None, frames_per_batch=10, total_frames=-1
        )
        next(iter(collector))
        state = collector.state_dict()
        if where == "env_state":
            state["env_state"] = payload  # the format of older checkpoints
        else:
            state["env_state"]["object"] = payload
        torch.save(state, tmp_path / "c.pt")
        loaded = torch.load(tmp_path / "c.pt", weights_only=True)
        with pytest.raises(ValueError, match="cannot restore the state of GymEnv"):
            collector.load_state_dict(loaded)
        collector.shutdown()
        assert not marker.exists()
        # the payload really is an attack: plain pickle runs it
        pickle.loads(self._payload(marker))
        assert marker.exists()

    def test_unsaveable_env_is_refused_at_save_time(self):
        import gymnasium as gym

        from rl.envs import GymWrapper

        collector = Collector(
            lambda: GymWrapper(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")),
            None,
            frames_per_batch=10,
            total_frames=-1,
        )
        next(iter(collector))
        with pytest.raises(TypeError, match="keeps the sub-envs in gymnasium's worker processes"):
            collector.state_dict()
        collector.shutdown()


class TestCudagraphPolicy:
    @pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU fallback")
    def test_without_cuda_the_policy_runs_eagerly(self):
        from tensordict.nn import TensorDictModule

        from rl.envs import PendulumEnv

        policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        with pytest.warns(UserWarning, match="cudagraph_policy needs a CUDA policy device"):
            collector = Collector(
                PendulumEnv(), policy, frames_per_batch=4, total_frames=4, cudagraph_policy=True
            )
        data = next(iter(collector))
        torch.testing.assert_close(data["action"], policy.module(data["observation"]))
        collector.shutdown()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_env_batches_carry_trajectory_ids_on_the_device():
    """A batched env living on the GPU: the trajectory ids are computed there, and match
    the ids of the same rollout collected on the CPU."""
    from rl.envs import CartPoleEnv

    batches = {}
    for device in ("cpu", "cuda:0"):
        torch.manual_seed(0)
        env = CartPoleEnv(batch_size=[8], device=device)
        env.set_seed(0)
        collector = Collector(env, None, frames_per_batch=8 * 50, total_frames=8 * 100)
        batches[device] = [b for b in collector]
        collector.shutdown()
    for cpu, cuda in zip(batches["cpu"], batches["cuda:0"], strict=True):
        ids = cuda["collector", "traj_ids"]
        assert ids.device.type == "cuda"
        done = cuda["next", "done"].squeeze(-1)
        # a new id after each end, shared by every step of one trajectory
        assert (ids[:, 1:][done[:, :-1]] != ids[:, :-1][done[:, :-1]]).all()
        assert (ids[:, 1:][~done[:, :-1]] == ids[:, :-1][~done[:, :-1]]).all()
        if torch.equal(cpu["next", "done"], cuda["next", "done"].cpu()):
            torch.testing.assert_close(ids.cpu(), cpu["collector", "traj_ids"])
