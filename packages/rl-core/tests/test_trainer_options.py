"""Trainer options of TorchRL 0.14.1: optimization steppers, epochs, timings, logging,
checkpoint objects, asynchronous collection and the (local-only) learner back-end."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core.trainers import GRPOTrainer, Trainer


def _batches(n, size=4):
    return [
        TensorDict(
            obs=torch.full((size, 3), float(i)), target=torch.ones(size, 1), batch_size=[size]
        )
        for i in range(n)
    ]


class Logger:
    def __init__(self):
        self.calls = []

    def log_scalar(self, name, value, step=None):
        self.calls.append((name, float(value), step))


def _trainer(batches, **kwargs):
    net = torch.nn.Linear(3, 1)

    def loss(td):
        return TensorDict(loss_mse=(net(td["obs"]) - td["target"]).pow(2).mean())

    defaults = dict(
        collector=batches,
        total_frames=10**6,
        frame_skip=1,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
        progress_bar=False,
        log_interval=0,
    )
    defaults.update(kwargs)
    return Trainer(**defaults), net


class Stepper:
    """Counts its steps; a plain SGD step on the trainer's optimizer."""

    def __init__(self):
        self.steps = 0
        self.registered = None

    def register(self, trainer, name="optimization_stepper"):
        trainer.register_module(name, self)
        self.registered = name

    def step(self, trainer, sub_batch):
        losses = trainer.compute_loss(sub_batch)
        losses["loss_mse"].backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        self.steps += 1
        return TensorDict(
            loss_mse=losses["loss_mse"].detach(), step=torch.tensor(float(self.steps))
        )

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


class TestOptimizationStepper:
    def test_stepper_runs_each_step(self):
        stepper = Stepper()
        seen = []
        trainer, net = _trainer(_batches(3), optimization_stepper=stepper)
        trainer.register_op("post_optim", lambda: seen.append("post_optim"))
        assert stepper.registered == "optimization_stepper"
        assert trainer._ops["optimizer"] == []  # no OptimizerHook beside the stepper
        before = net.weight.detach().clone()
        trainer.train()
        assert stepper.steps == 6 and seen == ["post_optim"] * 6
        assert not torch.equal(net.weight, before)
        # the mean of the stepper's metrics over the batch's two steps
        assert trainer.last_losses["step"].item() == pytest.approx((5 + 6) / 2)
        assert trainer.state_dict()["hooks"]["optimization_stepper"] == {"steps": 6}


class TestEpochsAndLogging:
    def test_num_epochs_repeats_the_steps(self):
        trainer, _ = _trainer(_batches(2), num_epochs=3)
        trainer.train()
        assert trainer._optim_count == 2 * 2 * 3
        with pytest.raises(ValueError, match="num_epochs must be a positive int, got 0"):
            _trainer(_batches(1), num_epochs=0)

    @pytest.mark.parametrize("auto", [True, False])
    def test_auto_log_optim_steps(self, auto):
        logger = Logger()
        trainer, _ = _trainer(_batches(2), logger=logger, auto_log_optim_steps=auto)
        trainer.train()
        names = {name for name, _, _ in logger.calls}
        assert ({"optim_steps", "loss_mse"} <= names) is auto
        assert not auto or ("optim_steps", 4.0, 8) in logger.calls

    def test_log_timings(self, monkeypatch):
        import rl.core.trainers._trainer as module

        clock = iter(range(1000))
        monkeypatch.setattr(module.time, "perf_counter", lambda: float(next(clock)))
        logger = Logger()
        trainer, _ = _trainer(_batches(2), logger=logger, log_timings=True)

        def slow(batch):
            return batch

        trainer.register_op("batch_process", slow)
        trainer.train()
        timed = {name: value for name, value, _ in logger.calls if name.startswith("time/")}
        # the fake clock advances by one per reading: each timed call lasts 1 "second"
        assert timed["time/hook/slow"] == 1.0
        assert timed["time/hook/optimizer"] == 1.0  # the OptimizerHook, by its module name


class TestLearnerBackend:
    def test_only_local(self):
        with pytest.raises(NotImplementedError, match="learner_backend='ray'"):
            _trainer(_batches(1), learner_backend="ray")
        with pytest.raises(ValueError, match="must be 'local' or 'ray', got 'gpu'"):
            _trainer(_batches(1), learner_backend="gpu")
        with pytest.raises(ValueError, match="learner_backend_options configure a remote"):
            _trainer(_batches(1), learner_backend_options={"num_gpus": 1})
        with pytest.raises(ValueError, match="learner_poll_interval must be positive"):
            _trainer(_batches(1), learner_poll_interval=0)
        with pytest.raises(ValueError, match="polling interval of a remote learner"):
            _trainer(_batches(1), learner_poll_interval=0.5)
        trainer, _ = _trainer(_batches(1), learner_backend_options={})
        assert trainer.learner_backend == "local"

    def test_replay_buffer_and_batch_size(self):
        class Buffer:
            batch_size = 32
            write_count = 0

        trainer, _ = _trainer(_batches(1), replay_buffer=Buffer(), target_net_updater=None)
        assert trainer.batch_size == 32
        trainer, _ = _trainer(_batches(1), replay_buffer=Buffer(), batch_size=8)
        assert trainer.batch_size == 8


class FakeCheckpoint:
    def __init__(self):
        self.components = {}
        self.saved = []

    def __contains__(self, name):
        return name in self.components

    def register(self, name, component):
        self.components[name] = component

    def save(self, path):
        self.saved.append((path, {k: v.state_dict() for k, v in self.components.items()}))

    def load(self, path):
        state = dict(self.saved)[path]
        for name, component in self.components.items():
            component.load_state_dict(state[name])


class FakeRotation:
    def __init__(self):
        self.saves = []

    def save(self, checkpoint, step, metadata):
        self.saves.append((step, metadata, sorted(checkpoint.components)))


class TestCheckpointObjects:
    def test_checkpoint_save_and_load(self, tmp_path):
        ckpt = FakeCheckpoint()
        path = tmp_path / "run"
        trainer, net = _trainer(
            _batches(3), checkpoint=ckpt, save_trainer_file=path, save_trainer_interval=8
        )
        trainer.train()
        assert [p for p, _ in ckpt.saved] == [path, path]  # at 8 frames and at the end
        # TorchRL's component names; the list collector has no state_dict: skipped
        assert set(ckpt.components) == {"optimizer", "trainer_state"}  # the hook's is "optimizer"
        state = ckpt.saved[-1][1]["trainer_state"]
        assert state["collected_frames"] == 12 and state["_optim_count"] == 6
        trainer.collected_frames = 0
        trainer.load_from_file(path)
        assert trainer.collected_frames == 12 and trainer._optim_count == 6

    def test_rotation_and_metadata(self):
        ckpt, rotation = FakeCheckpoint(), FakeRotation()
        trainer, _ = _trainer(
            _batches(2),
            checkpoint=ckpt,
            checkpoint_rotation=rotation,
            checkpoint_metadata=lambda t: {"tag": "x", "frames_seen": t.collected_frames},
            save_trainer_interval=4,
        )
        trainer.train()
        steps = [step for step, _, _ in rotation.saves]
        assert steps == [4, 8, 8]  # every 4 frames and the final (forced) save
        step, metadata, names = rotation.saves[0]
        assert metadata == {"tag": "x", "frames_seen": 4, "collected_frames": 4, "optim_steps": 2}
        assert "trainer_state" in names

    def test_errors(self, tmp_path):
        with pytest.raises(ValueError, match="checkpoint_rotation requires checkpoint"):
            _trainer(_batches(1), checkpoint_rotation=FakeRotation())
        with pytest.raises(ValueError, match="cannot both be set"):
            _trainer(
                _batches(1),
                checkpoint=FakeCheckpoint(),
                checkpoint_rotation=FakeRotation(),
                save_trainer_file=tmp_path / "x",
            )
        with pytest.raises(ValueError, match="checkpoint_metadata requires checkpoint_rotation"):
            _trainer(_batches(1), checkpoint=FakeCheckpoint(), checkpoint_metadata=dict)
        with pytest.raises(TypeError, match="checkpoint_metadata must be callable"):
            _trainer(
                _batches(1),
                checkpoint=FakeCheckpoint(),
                checkpoint_rotation=FakeRotation(),
                checkpoint_metadata=3,
            )


class TestAsyncCollection:
    def test_trains_while_the_collector_fills_the_buffer(self):
        class Buffer:
            batch_size = 4

            def __init__(self):
                self.write_count = 0

            def sample(self, batch_size=None):
                # each sample stands for collection progress in the background
                self.write_count += 4
                return _batches(1)[0]

        buffer = Buffer()

        class Collector:
            started = False

            def start(self):
                self.started = True
                buffer.write_count = 4

        collector = Collector()
        trainer, _ = _trainer(
            collector, replay_buffer=buffer, total_frames=20, async_collection=True
        )
        trainer.register_op("process_optim_batch", lambda batch: buffer.sample())
        trainer.train()
        assert collector.started
        # 4 frames at start, +8 per loop of 2 steps: stops once 20 are written
        assert buffer.write_count == 20 and trainer._optim_count == 4
        # frames are counted before each loop (TorchRL's order): 4, then 12
        assert trainer.collected_frames == 12

    def test_needs_a_buffer(self):
        trainer, _ = _trainer(object(), async_collection=True, total_frames=8)
        with pytest.raises(RuntimeError, match="needs the replay buffer the collector writes"):
            trainer.train()


def test_grpo_trainer_with_a_stepper():
    stepper = Stepper()
    net = torch.nn.Linear(3, 1)

    def loss(td):
        return TensorDict(loss_mse=(net(td["obs"]) - td["target"]).pow(2).mean())

    trainer = GRPOTrainer(
        collector=_batches(2),
        total_frames=8,
        loss_module=loss,
        optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
        optimization_stepper=stepper,
        num_epochs=2,
        progress_bar=False,
        log_rewards=False,
        auto_log_optim_steps=False,
    )
    trainer.train()
    assert stepper.steps == 4 and trainer._optim_count == 4
    assert trainer._ops["optimizer"] == []
