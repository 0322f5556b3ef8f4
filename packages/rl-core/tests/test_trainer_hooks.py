"""The ready hooks: what each one does at its point, its errors and its state."""

from __future__ import annotations

import gc
import random
import weakref

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import ExplorationType, exploration_type
from rl.core.trainers import (
    REWARD_KEY,
    BatchSubSampler,
    ClearCudaCache,
    CountFramesLog,
    LogScalar,
    LogTiming,
    LogValidationReward,
    LRSchedulerHook,
    OptimizerHook,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
    TargetNetUpdaterHook,
    Trainer,
    UpdateWeights,
    UTDRHook,
    ValueEstimatorHook,
    load_checkpoint,
)

MASK = ("collector", "mask")


def _trainer(batches, optim_steps=1, **kwargs):
    w = torch.nn.Parameter(torch.ones(2))
    defaults = dict(
        collector=batches,
        total_frames=10**6,
        frame_skip=1,
        optim_steps_per_batch=optim_steps,
        loss_module=lambda td: TensorDict(loss=(w * w).sum()),
        optimizer=torch.optim.SGD([w], lr=0.1),
        progress_bar=False,
    )
    defaults.update(kwargs)
    return Trainer(**defaults)


class TestOptimizerHook:
    def test_loss_components_select_what_is_minimized(self):
        a, b = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
        hook = OptimizerHook(torch.optim.SGD([a, b], lr=0.5), ["loss_a"])
        losses = TensorDict(loss_a=(a * a).sum(), loss_b=(b * b).sum())
        hook(losses, True, None, 3)
        assert a.item() == 0.0 and b.item() == 1.0
        assert float(losses["grad_norm_3"]) == 2.0

    def test_errors(self):
        w = torch.nn.Parameter(torch.ones(1))
        with pytest.raises(ValueError, match="loss_components cannot be empty"):
            OptimizerHook(torch.optim.SGD([w], lr=1), [])
        hook = OptimizerHook(torch.optim.SGD([w], lr=1), ["loss_pi"])
        with pytest.raises(ValueError, match="no entry 'loss_pi'; they have \\['loss_q'\\]"):
            hook(TensorDict(loss_q=w.sum()))

    def test_two_optimizers(self):
        a, b = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
        trainer = Trainer(
            collector=[TensorDict(batch_size=[1])],
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=lambda td: TensorDict(loss_a=(a * a).sum(), loss_b=(b * b).sum()),
            progress_bar=False,
        )
        OptimizerHook(torch.optim.SGD([a], lr=0.5), ["loss_a"]).register(trainer, "opt_a")
        OptimizerHook(torch.optim.SGD([b], lr=0.25), ["loss_b"]).register(trainer, "opt_b")
        trainer.train()
        assert a.item() == 0.0 and b.item() == 0.5
        assert set(trainer.last_losses.keys()) >= {"grad_norm_0", "grad_norm_1"}


class TestLRSchedulerHook:
    def test_steps_only_after_optimization(self):
        batches = [TensorDict(batch_size=[4]) for _ in range(4)]
        collector = type("C", (), {"init_random_frames": 9, "__iter__": lambda s: iter(batches)})
        trainer = _trainer(collector())
        sched = torch.optim.lr_scheduler.StepLR(trainer.optimizer, 1, gamma=0.5)
        hook = LRSchedulerHook(sched)
        hook.register(trainer)
        trainer.train()
        # frames 4, 8: warm-up without optimization; 12, 16: one step each
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
        assert hook.state_dict()["last_optim_count"] == 2

    def test_optim_interval_and_errors(self):
        trainer = _trainer([TensorDict(batch_size=[1])] * 2, optim_steps=3)
        LRSchedulerHook(
            torch.optim.lr_scheduler.StepLR(trainer.optimizer, 1, gamma=0.5), interval="optim"
        ).register(trainer)
        trainer.train()
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**6)
        with pytest.raises(ValueError, match="interval must be 'batch' or 'optim', got 'epoch'"):
            LRSchedulerHook(None, interval="epoch")


class TestTargetNetUpdaterHook:
    def test_steps_after_each_optimization_and_saves_its_counter(self):
        class Hard:
            _counter = 0

            def step(self):
                self._counter += 1

        trainer = _trainer([TensorDict(batch_size=[1])] * 3, optim_steps=2)
        hook = TargetNetUpdaterHook(Hard())
        hook.register(trainer)
        trainer.train()
        assert hook.state_dict() == {"counter": 6}
        other = TargetNetUpdaterHook(Hard())
        other.load_state_dict(hook.state_dict())
        assert other.target_params_updater._counter == 6
        with pytest.raises(TypeError, match="with a step\\(\\) method .* got int"):
            TargetNetUpdaterHook(3)


class TestUpdateWeights:
    def test_interval_and_state(self):
        class Collector:
            pushes = 0

            def update_policy_weights_(self):
                self.pushes += 1

        hook = UpdateWeights(Collector(), 3)
        for _ in range(7):
            hook()
        assert hook.collector.pushes == 2 and hook.state_dict() == {"counter": 7}
        with pytest.raises(ValueError, match="must be a positive int, got 0"):
            UpdateWeights(Collector(), 0)
        with pytest.raises(ValueError, match="interval_unit must be 'batches' or 'optim_steps'"):
            UpdateWeights(Collector(), 1, interval_unit="frames")

    def test_getter_map_and_sender(self):
        class Collector:
            def __init__(self):
                self.calls = []

            def update_policy_weights_(self, weights=None, **kwargs):
                self.calls.append((weights, kwargs))

        weights = TensorDict(w=torch.ones(2))
        hook = UpdateWeights(Collector(), 1, policy_weights_getter=lambda: weights)
        hook()
        assert hook.collector.calls == [(weights, {})]

        class Holder:
            loss_module = torch.nn.Module()

        Holder.loss_module.actor_network = torch.nn.Linear(2, 1)
        hook = UpdateWeights(
            Collector(),
            2,
            weight_update_map={"policy": "loss_module.actor_network"},
            trainer=Holder(),
        )
        hook()
        assert hook.collector.calls == []
        hook()
        ((w, kwargs),) = hook.collector.calls
        assert w is None and set(kwargs) == {"weights_dict"}
        sent = kwargs["weights_dict"]["policy"]
        assert torch.equal(sent["weight"], Holder.loss_module.actor_network.weight)

        class Sender:
            pushes = 0

            def update_weights(self):
                self.pushes += 1

        hook = UpdateWeights(update_weights_interval=1, sender=Sender())
        hook()
        hook()
        assert hook.collector is None and hook.sender.pushes == 2
        with pytest.raises(ValueError, match="needs a collector or a sender"):
            UpdateWeights()
        with pytest.raises(ValueError, match="sender is exclusive"):
            UpdateWeights(sender=Sender(), policy_weights_getter=lambda: weights)
        with pytest.raises(ValueError, match="weight_update_map needs the trainer"):
            UpdateWeights(Collector(), weight_update_map={"policy": "loss_module"})
        bad = UpdateWeights(
            Collector(), weight_update_map={"policy": "loss.actor"}, trainer=Holder()
        )
        with pytest.raises(AttributeError, match="Holder has no attribute 'loss'"):
            bad()


class TestBatchSubSampler:
    def test_windows_are_consecutive_steps_of_one_trajectory(self):
        td = TensorDict(x=torch.arange(40).reshape(4, 10), batch_size=[4, 10])
        torch.manual_seed(0)
        out = BatchSubSampler(batch_size=12, sub_traj_len=4)(td)
        assert out.shape == (3, 4)
        x = out["x"]
        assert (x.diff(dim=1) == 1).all() and (x // 10 == x[:, :1] // 10).all()

    def test_masked_batches_give_valid_steps_only(self):
        mask = torch.arange(10).expand(3, 10) < torch.tensor([[6], [10], [8]])
        td = TensorDict({"x": torch.arange(30).reshape(3, 10), MASK: mask}, [3, 10])
        torch.manual_seed(1)
        for _ in range(20):
            out = BatchSubSampler(batch_size=8, sub_traj_len=4)(td)
            assert out[MASK].all() and out.shape == (2, 4)

    def test_flat_batches_and_errors(self):
        td = TensorDict(x=torch.arange(10), batch_size=[10])
        out = BatchSubSampler(batch_size=4)(td)
        assert out.shape == (4,) and out["x"].unique().numel() == 4
        td2 = TensorDict(x=torch.zeros(2, 5), batch_size=[2, 5])
        with pytest.raises(ValueError, match="sub_traj_len=6 is outside \\[1, 5\\]"):
            BatchSubSampler(batch_size=12, sub_traj_len=6)(td2)
        with pytest.raises(ValueError, match="batch_size=2 is smaller than sub_traj_len=3"):
            BatchSubSampler(batch_size=2, sub_traj_len=3)(td2)


class TestRewardNormalizer:
    def test_matches_decayed_statistics(self):
        norm = RewardNormalizer(decay=0.5)
        r1, r2 = torch.tensor([[1.0], [2.0]]), torch.tensor([[4.0], [0.0], [3.0]])
        for r in (r1, r2):
            norm.update_reward_stats(TensorDict({("next", "reward"): r}, [r.shape[0]]))
        s = 0.5 * 3.0 + 7.0
        ssq = 0.5 * 5.0 + 25.0
        n = 0.5 * 2 + 3
        mean, std = s / n, ((ssq - s * s / n) / (n - 1)) ** 0.5
        td = TensorDict({("next", "reward"): torch.tensor([[1.0]])}, [1])
        out = norm.normalize_reward(td)
        assert out["next", "reward"].item() == pytest.approx((1.0 - mean) / std, rel=1e-6)
        assert td["next", "reward"].item() == 1.0  # the input is not modified
        clone = RewardNormalizer(decay=0.5)
        clone.load_state_dict(norm.state_dict())
        assert torch.equal(clone.normalize_reward(td)["next", "reward"], out["next", "reward"])

    def test_normalize_before_update(self):
        with pytest.raises(RuntimeError, match="before update_reward_stats"):
            RewardNormalizer().normalize_reward(
                TensorDict({("next", "reward"): torch.ones(1, 1)}, [1])
            )


class TestLogHooks:
    def test_select_keys(self):
        td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
        with pytest.raises(TypeError, match="sequence of keys, got the string 'a'"):
            SelectKeys("a")
        with pytest.raises(KeyError, match="no key 'c'"):
            SelectKeys(["c"])(td)

    def test_reward_key_is_the_default_key(self):
        assert REWARD_KEY == ("next", "reward")
        td = TensorDict({REWARD_KEY: torch.tensor([[1.0], [3.0]])}, [2])
        assert LogScalar(REWARD_KEY, "r")(td)["r"] == LogScalar(logname="r")(td)["r"] == 2.0

    def test_log_scalar_masked_reductions(self):
        reward = torch.tensor([[1.0], [5.0], [3.0], [100.0]])
        td = TensorDict({("next", "reward"): reward, MASK: torch.tensor([1, 1, 1, 0]).bool()}, [4])
        assert LogScalar(logname="r")(td)["r"] == 3.0
        assert LogScalar(logname="r", reduction="max")(td)["r"] == 5.0
        assert LogScalar(logname="r")(td)["r_std"] == pytest.approx(2.0)
        with pytest.raises(ValueError, match="reduction must be one of"):
            LogScalar(reduction="median")
        with pytest.raises(KeyError, match="no key 'action'"):
            LogScalar("action")(td)

    def test_count_frames(self):
        count = CountFramesLog(frame_skip=4)
        td = TensorDict({MASK: torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()}, [2, 3])
        assert count(td)["n_frames"] == 12 and count(td)["n_frames"] == 24
        other = CountFramesLog(frame_skip=1)
        other.load_state_dict(count.state_dict())
        assert other.frame_count == 24
        with pytest.raises(TypeError, match="frame_skip"):
            CountFramesLog()  # required, as TorchRL


class FakeEnv:
    """``rollout`` returns a fixed reward pattern; records what the policy saw."""

    def __init__(self):
        self.transform = [Dumper(), object()]
        self.seen = []

    def rollout(self, max_steps, policy, auto_reset=True, break_when_any_done=False):
        self.seen.append((exploration_type(), policy.training))
        torch.rand(5)  # consumes RNG: must not leak into the training run
        np.random.rand()
        random.random()
        reward = torch.tensor([1.0, 1.0, 1.0, 2.0, 2.0, 0.5])[:max_steps, None]
        done = torch.tensor([False, False, True, False, True, False])[:max_steps, None]
        return TensorDict({("next", "reward"): reward, ("next", "done"): done}, [max_steps])

    def state_dict(self):
        return {"calls": len(self.seen)}

    def load_state_dict(self, state):
        self.loaded = state


class Dumper:
    def __init__(self):
        self.dumps = []

    def dump(self, suffix=None):
        self.dumps.append(suffix)


class TestLogValidationReward:
    def test_evaluation_episodes(self):
        env, policy = FakeEnv(), torch.nn.Linear(1, 1)
        hook = LogValidationReward(
            record_interval=2, record_frames=6, policy_exploration=policy, environment=env
        )
        state = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
        out = hook()
        assert torch.equal(torch.get_rng_state(), state[0])
        assert (np.random.get_state()[1] == state[1]).all() and random.getstate() == state[2]
        assert out["r_evaluation"] == pytest.approx(7.5 / 6)
        assert out["total_r_evaluation"] == pytest.approx((3.0 + 4.0) / 2)  # two episodes
        # RANDOM by default, as TorchRL
        assert env.seen == [(ExplorationType.RANDOM, False)] and policy.training
        assert env.transform[0].dumps == [None]
        assert hook() is None and hook() is not None  # every 2nd call
        assert hook.state_dict() == {"count": 3, "environment": {"calls": 2}}

    def test_needs_an_env(self):
        with pytest.raises(ValueError, match="needs an evaluation environment"):
            LogValidationReward(record_interval=1, record_frames=1, policy_exploration=None)


class TestReplayBufferTrainer:
    def test_by_value_round_trip(self):
        data = pytest.importorskip("rl.data")
        td = TensorDict(
            {"obs": torch.arange(12.0).reshape(2, 6), MASK: torch.ones(2, 6, dtype=torch.bool)},
            [2, 6],
        )
        rb = data.TensorDictReplayBuffer(storage=data.LazyTensorStorage(20), batch_size=4)
        hook = ReplayBufferTrainer(rb, flatten_tensordicts=True)
        hook.extend(td)
        assert len(rb) == 12 and hook.sample()["obs"].shape == (4,)
        other_rb = data.TensorDictReplayBuffer(storage=data.LazyTensorStorage(20), batch_size=4)
        other = ReplayBufferTrainer(other_rb)
        other.load_state_dict(hook.state_dict())
        assert len(other_rb) == 12
        assert torch.equal(other_rb.storage.get(slice(0, 12))["obs"], torch.arange(12.0))

    def test_iterate_ends_the_optimization_steps(self):
        data = pytest.importorskip("rl.data")
        rb = data.ReplayBuffer(
            storage=data.ListStorage(10), batch_size=2, sampler=data.SamplerWithoutReplacement()
        )
        hook = ReplayBufferTrainer(rb, iterate=True)
        hook.extend(TensorDict(obs=torch.arange(5.0), batch_size=[5]))
        trainer = _trainer([TensorDict(obs=torch.zeros(1), batch_size=[1])], optim_steps=10)
        hook.register(trainer)
        seen = []
        trainer.register_op("post_loss", lambda td: seen.append(td["obs"].numel()))
        trainer.train()
        # 6 items (5 + the collected 1) in batches of 2: 3 steps, then the iterator ends
        # (the attempt that found it exhausted is not a step)
        assert seen == [2, 2, 2] and trainer._optim_count == 3
        # the exhausted iterator was replaced: the next round iterates from the start
        assert sum(hook.sample()["obs"].numel() for _ in range(3)) == 6
        with pytest.raises(StopIteration):
            hook.sample()

    def test_no_step_count_runs_until_the_iterator_ends(self):
        data = pytest.importorskip("rl.data")
        rb = data.ReplayBuffer(
            storage=data.ListStorage(10), batch_size=2, sampler=data.SamplerWithoutReplacement()
        )
        hook = ReplayBufferTrainer(rb, iterate=True)
        hook.extend(TensorDict(obs=torch.arange(7.0), batch_size=[7]))
        trainer = _trainer([TensorDict(obs=torch.zeros(1), batch_size=[1])], optim_steps=None)
        hook.register(trainer)
        seen = []
        trainer.register_op("post_loss", lambda td: seen.append(td["obs"].numel()))
        trainer.train()
        # optim_steps_per_batch=None (TorchRL): 8 items in batches of 2, 4 steps
        assert seen == [2, 2, 2, 2]

    def test_memmap_storage_is_saved_by_reference(self, tmp_path):
        data = pytest.importorskip("rl.data")

        def make(dir_):
            storage = data.LazyMemmapStorage(16, scratch_dir=dir_)
            return data.TensorDictReplayBuffer(storage=storage, batch_size=4)

        rb = make(tmp_path / "buf")
        hook = ReplayBufferTrainer(rb)
        hook.extend(TensorDict(obs=torch.arange(6.0), batch_size=[6]))
        state = hook.state_dict()
        tensors = [v for v in state["memmap_ref"].values() if isinstance(v, torch.Tensor)]
        assert not tensors and state["memmap_ref"]["len"] == 6
        hook.extend(TensorDict(obs=torch.arange(6.0, 10.0), batch_size=[4]))  # after the checkpoint
        del rb, hook
        reopened = make(tmp_path / "buf")  # the killed process's data is on disk
        assert len(reopened) == 10
        ReplayBufferTrainer(reopened).load_state_dict(state)
        assert len(reopened) == 6
        assert torch.equal(reopened.storage.get(slice(0, 6))["obs"], torch.arange(6.0))
        with pytest.raises(ValueError, match="lives in the memory-mapped storage at"):
            ReplayBufferTrainer(make(tmp_path / "other")).load_state_dict(state)

    def test_overwritten_memmap_is_reported(self, tmp_path):
        data = pytest.importorskip("rl.data")
        storage = data.LazyMemmapStorage(8, scratch_dir=tmp_path / "buf")
        rb = data.TensorDictReplayBuffer(storage=storage, batch_size=2)
        hook = ReplayBufferTrainer(rb)
        hook.extend(TensorDict(obs=torch.arange(4.0), batch_size=[4]))
        state = hook.state_dict()
        hook.extend(TensorDict(obs=torch.arange(6.0), batch_size=[6]))  # wraps around
        with pytest.warns(UserWarning, match="written past its capacity after the checkpoint"):
            hook.load_state_dict(state)


class TestCheckpointedHooks:
    def test_bound_methods_register_their_hook(self, tmp_path):
        """TorchRL's docs register bound methods; their hook's state is still saved."""
        trainer = _trainer([TensorDict({("next", "reward"): torch.ones(2, 1)}, [2])])
        norm = RewardNormalizer()
        trainer.register_op("batch_process", norm.update_reward_stats)
        trainer.register_op("process_optim_batch", norm.normalize_reward)
        trainer.save_trainer_file = tmp_path / "ckpt.pt"
        trainer.train()
        assert set(load_checkpoint(tmp_path / "ckpt.pt")["hooks"]) == {
            "optimizer",
            "reward_normalizer",
        }

    def test_inexact_resume_is_reported_when_saving(self, tmp_path):
        trainer = _trainer([TensorDict(batch_size=[1])], save_trainer_file=tmp_path / "a.pt")
        with pytest.warns(UserWarning, match="has no state_dict\\(\\).* not exact"):
            trainer.train()

        class Unpicklable:
            def __iter__(self):
                yield TensorDict(batch_size=[1])

            def state_dict(self):
                return {"root": {"observation": torch.zeros(1)}}  # no "env_state"

        trainer = _trainer(Unpicklable(), save_trainer_file=tmp_path / "b.pt")
        with pytest.warns(UserWarning, match="has no env_state .* not be bit-identical"):
            trainer.train()

    @pytest.mark.parametrize(
        "state",
        [
            {"frames": 1, "exact": False, "workers": [{"env_state": torch.zeros(1)}]},
            {"frames": 1, "exact": True, "workers": [{"root": None}]},
        ],
        ids=["async-order", "worker-env-unsaved"],
    )
    def test_multiprocess_collector_inexact_resume_is_reported(self, tmp_path, state):
        class MultiProcess:
            def __iter__(self):
                yield TensorDict(batch_size=[1])

            def state_dict(self):
                return state

        trainer = _trainer(MultiProcess(), save_trainer_file=tmp_path / "c.pt")
        with pytest.warns(UserWarning, match="runs in worker processes .* not be bit-identical"):
            trainer.train()


class TestClearCudaCache:
    def test_clears_every_interval_calls(self, monkeypatch):
        cleared = []
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cleared.append(True))
        hook = ClearCudaCache(3)
        for _ in range(7):
            hook()
        assert hook.count == 7 and len(cleared) == 2
        restored = ClearCudaCache(3)
        restored.load_state_dict(hook.state_dict())
        restored()
        restored()  # the 9th call
        assert len(cleared) == 3

    def test_registered_before_each_optimization_loop(self, monkeypatch):
        cleared = []
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cleared.append(True))
        trainer = _trainer([TensorDict(batch_size=[2]) for _ in range(5)], optim_steps=3)
        hook = ClearCudaCache(2)
        hook.register(trainer)
        assert trainer._modules["clear_cuda_cache"] is hook
        assert [op for op, _ in trainer._ops["pre_optim_steps"]] == [hook]
        trainer.train()
        # one call per batch (not per optimization step): batches 2 and 4 clear
        assert hook.count == 5 and len(cleared) == 2

    def test_without_cuda_it_only_counts(self):
        hook = ClearCudaCache(1)
        hook()  # no CUDA here: emptying the cache does nothing
        assert hook.count == 1

    @pytest.mark.parametrize("interval", [0, -2, 1.5, True])
    def test_bad_interval(self, interval):
        with pytest.raises(ValueError, match="interval must be a positive int, got"):
            ClearCudaCache(interval)


class TestLogTiming:
    @staticmethod
    def _fake_clock(monkeypatch):
        import rl.core.trainers._trainer as module

        clock = iter(range(10**6))
        monkeypatch.setattr(module.time, "perf_counter", lambda: float(next(clock)))

    @pytest.mark.parametrize(
        "percall, erase, expected",
        [(False, False, [2.0, 4.0]), (True, False, [1.0, 1.0]), (False, True, [2.0, 2.0])],
    )
    def test_per_call_total_and_erase(self, monkeypatch, percall, erase, expected):
        self._fake_clock(monkeypatch)
        trainer = _trainer([TensorDict(batch_size=[2]) for _ in range(2)], optim_steps=2)
        # TorchRL's documented way: register_op alone (the hook is bound to the trainer)
        trainer.register_op("post_steps_log", LogTiming(prefix="t", percall=percall, erase=erase))
        trainer.train()
        # each timed call lasts one tick; the optimizer runs twice per batch
        assert trainer._log_dict["t/hook/optimizer"] == expected
        # named by the hooks' module names
        assert "t/hook/log_timing" in trainer._log_dict

    def test_trainer_option_registers_one(self):
        trainer = _trainer([], log_timings=True)
        (hook,) = [op for op, _ in trainer._ops["post_steps_log"] if isinstance(op, LogTiming)]
        assert (hook.prefix, hook.percall) == ("time", True)
        assert not any(isinstance(m, LogTiming) for m in trainer._modules.values())
        # the op is the whole state of the option: no flag that could disagree with it
        assert "log_timings" not in vars(trainer)
        assert not any(isinstance(op, LogTiming) for op, _ in _trainer([])._ops["post_steps_log"])

    @pytest.mark.parametrize(("saved", "resumed"), [(False, True), (True, False)])
    def test_the_option_does_not_change_the_checkpoint(self, tmp_path, saved, resumed):
        batches = [TensorDict(batch_size=[2]) for _ in range(2)]
        trainer = _trainer(batches, log_timings=saved)
        trainer.save_trainer_file = tmp_path / "ckpt.pt"
        trainer.train()
        restored = _trainer([], log_timings=resumed)
        restored.load_from_file(tmp_path / "ckpt.pt")  # raised: hook 'log_timing' not in it
        assert sorted(restored._modules) == sorted(trainer._modules)

    def test_state_and_errors(self):
        hook = LogTiming(prefix="p", percall=False, erase=True)
        restored = LogTiming()
        restored.load_state_dict(hook.state_dict())
        assert (restored.prefix, restored.percall, restored.erase) == ("p", False, True)
        with pytest.raises(RuntimeError, match="LogTiming reads the hook timings of the trainer"):
            LogTiming()()


class FakeBuffer:
    def __init__(self, write_count=0, batch_size=16):
        self.write_count = write_count
        self.batch_size = batch_size


class TestUTDRHook:
    def test_ratio(self):
        trainer = _trainer([], replay_buffer=FakeBuffer(200, 16))
        trainer._optim_count = 5
        out = UTDRHook(trainer)()
        assert out == {"utd_ratio": 0.4, "write_count": 200, "update_count": 5, "log_pbar": False}
        trainer.replay_buffer.write_count = 0
        assert UTDRHook(trainer)() == {}

    def test_collectors_buffer_and_missing_batch_size(self):
        class Collector(list):
            replay_buffer = FakeBuffer(10, None)

        trainer = _trainer(Collector())
        trainer._optim_count = 4
        with pytest.warns(UserWarning, match="no batch_size; the ratio counts one sample"):
            assert UTDRHook(trainer)()["utd_ratio"] == 0.4

    def test_no_buffer(self):
        trainer = _trainer([])  # the hook holds it weakly: keep it alive
        with pytest.raises(RuntimeError, match="UTDRHook needs the replay buffer the collector"):
            UTDRHook(trainer)()

    def test_logged_when_the_collector_fills_the_buffer(self):
        buffer = FakeBuffer(batch_size=4)

        def collector():
            for _ in range(3):
                buffer.write_count += 8
                yield None  # the collector wrote into the buffer itself

        w = torch.nn.Parameter(torch.ones(1))
        trainer = Trainer(
            collector=collector(),
            total_frames=24,
            frame_skip=1,
            optim_steps_per_batch=2,
            loss_module=lambda td: TensorDict(loss=w.sum()),
            optimizer=torch.optim.SGD([w], lr=0.1),
            replay_buffer=buffer,
            progress_bar=False,
        )
        trainer.register_op("process_optim_batch", lambda td: TensorDict(batch_size=[4]))
        hook = UTDRHook(trainer)
        hook.register(trainer)
        assert trainer._modules["utdr_hook"] is hook
        trainer.train()
        # before each batch's steps: 4 * (0, 2, 4) / (8, 16, 24)
        assert trainer._log_dict["utd_ratio"] == [0.0, 0.5, pytest.approx(2 / 3)]

    def test_holds_the_trainer_weakly(self):
        trainer = _trainer([], replay_buffer=FakeBuffer(10, 2))
        hook = UTDRHook(trainer)
        hook.register(trainer)
        ref = weakref.ref(trainer)
        assert hook.trainer is trainer
        del trainer
        gc.collect()
        # the trainer -> hook -> trainer cycle no longer keeps the trainer alive by reference
        assert ref() is None
        with pytest.raises(RuntimeError, match="UTDRHook's trainer no longer exists"):
            hook()

    def test_register_rebinds_to_the_trainer_it_is_put_in(self):
        first = _trainer([], replay_buffer=FakeBuffer(10, 2))
        second = _trainer([], replay_buffer=FakeBuffer(20, 2))
        second._optim_count = 5
        hook = UTDRHook(first)
        hook.register(second)
        assert hook.trainer is second and hook()["utd_ratio"] == 0.5

    def test_steps_that_ended_in_stop_iteration_are_not_counted(self):
        buffer = FakeBuffer(batch_size=2)
        sizes = iter([3, 2])  # sub-batches available after each collected batch

        def collector():
            for _ in range(2):
                buffer.write_count += 6
                yield None

        w = torch.nn.Parameter(torch.ones(1))
        trainer = Trainer(
            collector=collector(),
            total_frames=12,
            frame_skip=1,
            optim_steps_per_batch=None,  # until process_optim_batch runs out
            loss_module=lambda td: TensorDict(loss=w.sum()),
            optimizer=torch.optim.SGD([w], lr=0.1),
            replay_buffer=buffer,
            progress_bar=False,
        )
        left = {"n": 0}

        def sample(td):
            if left["n"] == 0:
                left["n"] = next(sizes, 0)
                raise StopIteration
            left["n"] -= 1
            return TensorDict(batch_size=[2])

        trainer.register_op("process_optim_batch", sample)
        UTDRHook(trainer).register(trainer)
        trainer.register_op("post_steps", lambda: trainer._log(after=trainer._optim_count))
        trainer.train()
        # batch 1: one empty attempt (StopIteration), nothing trained; batch 2: 3 steps,
        # then the iterator ends: update_count counts the 3 steps, not the 2 attempts
        assert trainer._log_dict["after"] == [0, 3]
        assert trainer._log_dict["update_count"] == [0, 0]
        assert trainer._log_dict["utd_ratio"] == [0.0, 0.0]
        assert UTDRHook(trainer)()["utd_ratio"] == 2 * 3 / 12


class TestValueEstimatorHook:
    def test_estimates_each_epoch_before_the_sub_batches(self):
        value = torch.nn.Linear(1, 1, bias=False)
        calls = []

        def estimator(td):
            calls.append(float(value.weight))
            with torch.no_grad():
                return td.set("advantage", td["next", "reward"] - value(td["obs"]))

        batch = TensorDict({"obs": torch.ones(4, 1), ("next", "reward"): torch.ones(4, 1)}, [4])
        trainer = Trainer(
            collector=[batch],
            total_frames=4,
            frame_skip=1,
            optim_steps_per_batch=1,
            num_epochs=2,
            loss_module=lambda td: TensorDict(
                loss=(value(td["obs"]) - td["next", "reward"]).pow(2).mean()
            ),
            optimizer=torch.optim.SGD(value.parameters(), lr=0.25),
            progress_bar=False,
        )
        seen = []
        trainer.register_op("process_optim_batch", lambda td: seen.append(td["advantage"][0]))
        with torch.no_grad():
            value.weight.fill_(0.0)
        hook = ValueEstimatorHook(estimator)
        hook.register(trainer)
        assert trainer._modules["value_estimator"] is hook
        trainer.train()
        # epoch 1 at w=0: advantage 1; one SGD step on (w - 1)^2: w = 0.5; epoch 2: 0.5
        assert calls == [0.0, 0.5]
        assert [a.item() for a in seen] == [1.0, 0.5]

    def test_no_batch_passes_through(self):
        calls = []
        hook = ValueEstimatorHook(lambda td: calls.append(td))
        assert hook(None) is None and calls == []

    def test_state_of_a_module_estimator(self):
        hook = ValueEstimatorHook(torch.nn.Linear(3, 1))
        assert ValueEstimatorHook(lambda td: td).state_dict() == {}
        other = torch.nn.Linear(3, 1)
        ValueEstimatorHook(other).load_state_dict(hook.state_dict())
        torch.testing.assert_close(other.weight, hook.value_estimator.weight)

    def test_not_callable(self):
        with pytest.raises(TypeError, match="expects a callable value estimator .*got int"):
            ValueEstimatorHook(3)


def test_batch_hooks_log_nothing_without_a_batch():
    """When the collector writes into the buffer itself, the log points receive None."""
    assert LogScalar()(None) is None
    count = CountFramesLog(frame_skip=1)
    assert count(None) is None and count.frame_count == 0


def test_new_hooks_round_trip_through_a_checkpoint_file(tmp_path):
    """Their state is read back with weights_only=True: tensors and plain containers."""

    def build():
        trainer = _trainer([TensorDict(obs=torch.ones(2, 2), batch_size=[2]) for _ in range(3)])
        value_net = TensorDictModule(torch.nn.Linear(2, 1), in_keys=["obs"], out_keys=["value"])
        hooks = (
            ClearCudaCache(2),
            LogTiming(prefix="p", percall=False),
            ValueEstimatorHook(value_net),
            UTDRHook(trainer),
        )
        for hook in hooks:
            hook.register(trainer)
        return trainer, hooks

    trainer, (clear, timing, value, _) = build()
    trainer.replay_buffer = FakeBuffer(6, 2)
    trainer.save_trainer_file = tmp_path / "ckpt.pt"
    trainer.train()
    restored, (clear2, timing2, value2, _) = build()
    restored.load_from_file(tmp_path / "ckpt.pt")
    assert clear2.count == clear.count == 3
    assert (timing2.prefix, timing2.percall) == ("p", False)
    torch.testing.assert_close(
        value2.value_estimator.module.weight, value.value_estimator.module.weight
    )
