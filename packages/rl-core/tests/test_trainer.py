"""Trainer loop: hook points and their order, frame counting, logging, errors, progress bar."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.core.trainers import (
    HOOK_POINTS,
    EarlyStopping,
    EpisodeReturns,
    LogScalar,
    ProgressBar,
    Trainer,
)

sys.path.insert(0, str(Path(__file__).parent))
from _rl_core_trainer_fakes import FakeCollector, FakeLoss  # noqa: E402


class RecordingLogger:
    def __init__(self):
        self.calls = []

    def log_scalar(self, name, value, step=None):
        self.calls.append((name, float(value), step))


def _batches(n, size=8, mask=None):
    out = []
    for i in range(n):
        td = TensorDict(
            {"obs": torch.full((size, 3), float(i)), "target": torch.ones(size, 1)},
            batch_size=[size],
        )
        if mask is not None:
            td["collector", "mask"] = mask.clone()
        out.append(td)
    return out


def _linear_trainer(batches, **kwargs):
    net = torch.nn.Linear(3, 1)

    def loss(td):
        return TensorDict(loss_mse=(net(td["obs"]) - td["target"]).pow(2).mean())

    defaults = dict(
        collector=batches,
        total_frames=10**6,
        frame_skip=1,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=torch.optim.SGD(net.parameters(), lr=0.01),
        progress_bar=False,
    )
    defaults.update(kwargs)
    return Trainer(**defaults), net


class TestTrainerLoop:
    def test_hook_points_are_called_in_loop_order(self):
        trainer, _ = _linear_trainer(_batches(2))
        seen = []
        plain = ("pre_optim_steps", "post_steps", "post_optim", "post_epoch", "setup", "shutdown")
        for point in HOOK_POINTS:
            if point in ("optimizer", "process_loss", "post_optim_complete_log"):
                trainer.register_op(point, lambda td, *a, p=point: seen.append(p))
            elif point in plain:
                trainer.register_op(point, lambda p=point: seen.append(p))
            else:
                trainer.register_op(point, lambda td, p=point: seen.append(p))
        trainer.train()
        optim = ["process_optim_batch", "post_loss", "process_loss", "optimizer", "post_optim"]
        optim += ["post_optim_log"]
        one_batch = ["batch_process", "pre_steps_log", "pre_optim_steps", "pre_epoch_log"]
        one_batch += ["pre_epoch", *optim, *optim, "post_epoch_log", "post_epoch"]
        one_batch += ["post_optim_complete_log", "post_steps", "post_steps_log"]
        assert seen == ["setup", *one_batch, *one_batch, "shutdown"]

    def test_process_loss_replaces_the_losses_the_optimizer_steps_on(self):
        w = torch.nn.Parameter(torch.tensor([1.0]))
        trainer = Trainer(
            collector=_batches(1),
            total_frames=8,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=lambda td: TensorDict(loss=(w**2).sum()),
            optimizer=torch.optim.SGD([w], lr=0.1),
            progress_bar=False,
        )
        seen = []

        def scale(sub_batch, losses, factor):
            seen.append(sub_batch.shape[0])
            return losses.apply(lambda x: x * factor)

        trainer.register_op("process_loss", scale, factor=3.0)
        trainer.register_op("process_loss", lambda sub_batch, losses: None)  # keeps them
        trainer.train()
        # d(3 w^2)/dw = 6 at w = 1: one SGD step of lr 0.1 gives 0.4; the logged loss is 3
        torch.testing.assert_close(w.data, torch.tensor([0.4]))
        assert seen == [8] and float(trainer.last_losses["loss"]) == 3.0

    def test_epoch_and_complete_log_points_log_what_they_return(self):
        logger = RecordingLogger()
        trainer, _ = _linear_trainer(
            _batches(2), logger=logger, log_interval=-1, num_epochs=2, optim_steps_per_batch=3
        )
        epochs, completes = [], []
        trainer.register_op("pre_epoch_log", lambda td: epochs.append(td.shape) or {"e": 1.0})
        trainer.register_op("post_epoch_log", lambda td: {"e_end": float(len(epochs))})

        def complete(optim_steps, losses):
            completes.append((optim_steps, sorted(losses.keys())))
            return {"steps_seen": float(optim_steps)}

        trainer.register_op("post_optim_complete_log", complete)
        trainer.train()
        # 2 epochs x 3 steps per batch; the mean losses hold the loss and the grad norm
        assert completes == [(6, ["grad_norm_0", "loss_mse"]), (12, ["grad_norm_0", "loss_mse"])]
        assert epochs == [torch.Size([8])] * 4
        logged = [(n, v) for n, v, _ in logger.calls if n in ("e", "e_end", "steps_seen")]
        assert logged == [("e", 1.0), ("e_end", 1.0), ("e", 1.0), ("e_end", 2.0)] + [
            ("steps_seen", 6.0)
        ] + [("e", 1.0), ("e_end", 3.0), ("e", 1.0), ("e_end", 4.0), ("steps_seen", 12.0)]

    def test_shutdown_ops_run_when_the_loop_raises(self):
        trainer, _ = _linear_trainer(_batches(3))
        calls = []
        trainer.register_op("setup", lambda: calls.append("setup"))
        trainer.register_op("shutdown", lambda: calls.append("shutdown"))

        def fail(td):
            raise ValueError("boom")

        trainer.register_op("batch_process", fail)
        with pytest.raises(ValueError, match="boom"):
            trainer.train()
        assert calls == ["setup", "shutdown"]

    def test_unknown_point_lists_the_valid_ones(self):
        trainer, _ = _linear_trainer(_batches(1))
        with pytest.raises(ValueError, match=r"unknown hook point 'post_batch'.*batch_process, "):
            trainer.register_op("post_batch", lambda td: td)
        with pytest.raises(TypeError, match="callable"):
            trainer.register_op("batch_process", 3)

    def test_register_module_names_are_unique(self):
        trainer, _ = _linear_trainer(_batches(1))
        trainer.register_module("a", object())
        with pytest.raises(RuntimeError, match="'a' is already registered"):
            trainer.register_module("a", object())

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"total_frames": 0}, ValueError, "total_frames must be a positive int or None, got 0"),
            (
                {"total_frames": -8},
                ValueError,
                "total_frames must be a positive int or None, got -8",
            ),
            ({"total_frames": 8.0}, TypeError, r"total_frames must be .* got 8.0 \(float\)"),
            ({"total_frames": True}, TypeError, r"total_frames must be .* got True \(bool\)"),
            ({"frame_skip": 1.5}, TypeError, r"frame_skip must be a positive int or None, got 1.5"),
            ({"frame_skip": 0}, ValueError, "frame_skip must be a positive int or None, got 0"),
            ({"frame_skip": "2"}, TypeError, r"frame_skip must be .* got '2' \(str\)"),
            (
                {"save_trainer_interval": None},
                TypeError,
                "save_trainer_interval must be a positive int, got None",
            ),
            (
                {"optim_steps_per_batch": -1},
                ValueError,
                "optim_steps_per_batch must be an int >= 0",
            ),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            _linear_trainer(_batches(1), **kwargs)

    def test_frames_count_mask_and_frame_skip_and_stop_at_total(self):
        mask = torch.tensor([True] * 6 + [False] * 2)
        trainer, _ = _linear_trainer(_batches(10, mask=mask), frame_skip=2, total_frames=30)
        trainer.train()
        # 6 valid steps x 2 frames per batch: stops after the 3rd batch (36 >= 30)
        assert trainer.collected_frames == 36
        assert trainer._optim_count == 6

    def test_total_frames_none_runs_until_the_collector_runs_out(self):
        mask = torch.tensor([True] * 5 + [False] * 3)
        trainer, _ = _linear_trainer(_batches(7, mask=mask), total_frames=None, frame_skip=3)
        seen = []
        trainer.register_op("post_steps", lambda: seen.append(trainer.collected_frames))
        trainer.train()
        # every batch is used: 5 valid steps x 3 frames each, 2 optimization steps each
        assert seen == [15 * (i + 1) for i in range(7)]
        assert trainer.collected_frames == 105 and trainer._optim_count == 14
        assert trainer.total_frames is None and trainer.frame_skip == 3

    def test_frame_skip_none_counts_one_frame_per_step(self):
        mask = torch.tensor([True] * 6 + [False] * 2)
        trainer, _ = _linear_trainer(_batches(10, mask=mask), frame_skip=None, total_frames=20)
        trainer.train()
        # 6 frames per batch: 6, 12, 18, 24 >= 20 after the 4th batch
        assert trainer.frame_skip == 1
        assert trainer.collected_frames == 24 and trainer._optim_count == 8

    def test_both_none_with_request_stop(self):
        trainer, _ = _linear_trainer(_batches(10), total_frames=None, frame_skip=None)
        trainer.register_op(
            "post_steps",
            lambda: trainer.collected_frames >= 24 and trainer.request_stop("enough"),
        )
        trainer.train()
        assert trainer.collected_frames == 24 and trainer._optim_count == 6

    def test_total_frames_none_async_needs_a_budget(self):
        class Buffer:
            write_count = 0

        class Collector:
            total_frames = -1  # an endless collector: no budget to take

            def start(self):
                Buffer.write_count = 4

        trainer, _ = _linear_trainer(
            Collector(), total_frames=None, async_collection=True, replay_buffer=Buffer()
        )
        with pytest.raises(RuntimeError, match=r"collector \(Collector\) has total_frames=-1"):
            trainer.train()

    def test_total_frames_none_async_takes_the_collectors_budget(self):
        class Buffer:
            write_count = 0
            batch_size = 4

        class Collector:
            total_frames = 12

            def start(self):
                Buffer.write_count = 4

        buffer = Buffer()
        trainer, _ = _linear_trainer(
            Collector(),
            total_frames=None,
            async_collection=True,
            replay_buffer=buffer,
            optim_steps_per_batch=1,
        )
        sub_batch = _batches(1)[0]
        writes = []

        def sample(td):
            # each optimization step sees 4 more frames written in the background
            writes.append(buffer.write_count)
            buffer.write_count += 4
            return sub_batch

        trainer.register_op("process_optim_batch", sample)
        trainer.train()
        # 4, 8 written at the steps; the loop ends once 12 (the collector's budget) are in
        assert writes == [4, 8] and trainer._optim_count == 2

    def test_batch_process_output_replaces_the_batch(self):
        trainer, _ = _linear_trainer(_batches(1), optim_steps_per_batch=1)
        trainer.register_op("batch_process", lambda td: td[:3])
        trainer.register_op("batch_process", lambda td: None)  # None keeps the batch
        sizes = []
        trainer.register_op("process_optim_batch", lambda td: sizes.append(td.shape[0]))
        trainer.train()
        assert sizes == [3] and trainer.collected_frames == 3

    def test_init_random_frames_delays_optimization(self):
        batches = _batches(4)
        collector = type("C", (), {"init_random_frames": 17, "__iter__": lambda s: iter(batches)})
        trainer, _ = _linear_trainer(collector())
        trainer.train()
        # 8, 16 frames: no optimization; 24, 32: two steps each
        assert trainer._optim_count == 4

    def test_losses_are_averaged_and_logged_with_grad_norm(self):
        logger = RecordingLogger()
        trainer, net = _linear_trainer(_batches(2), logger=logger, log_interval=0)
        trainer.train()
        names = [c[0] for c in logger.calls]
        assert names.count("optim_steps") == 2 and "grad_norm_0" in names
        steps = [c for c in logger.calls if c[0] == "optim_steps"]
        assert [s[1] for s in steps] == [2.0, 4.0] and [s[2] for s in steps] == [8, 16]
        assert trainer.last_losses["loss_mse"].ndim == 0

    def test_clip_grad_norm(self):
        w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
        batches = [TensorDict(batch_size=[1])]
        seen = {}

        def loss(td):
            return TensorDict(loss=(w * w).sum() / 2)  # grad = w, norm 5

        def check(*a):
            seen["grad"] = w.grad.clone() if w.grad is not None else None

        trainer = Trainer(
            collector=batches,
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=loss,
            optimizer=torch.optim.SGD([w], lr=1.0),
            clip_norm=1.0,
            progress_bar=False,
        )
        trainer.train()
        # clipped to norm 1: w <- w - w / 5
        torch.testing.assert_close(w.detach(), torch.tensor([2.4, 3.2]))
        assert float(trainer.last_losses["grad_norm_0"]) == pytest.approx(5.0)

    def test_clip_grad_value(self):
        w = torch.nn.Parameter(torch.tensor([3.0, 0.5]))
        trainer = Trainer(
            collector=[TensorDict(batch_size=[1])],
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=lambda td: TensorDict(loss=(w * w).sum() / 2),
            optimizer=torch.optim.SGD([w], lr=1.0),
            clip_grad_norm=False,
            clip_norm=1.0,
            progress_bar=False,
        )
        trainer.train()
        torch.testing.assert_close(w.detach(), torch.tensor([2.0, 0.0]))

    def test_seed_reproduces_the_run(self):
        init = FakeLoss().state_dict()

        def run():
            torch.manual_seed(123)  # the seed below, not this one, decides the run
            loss = FakeLoss()
            loss.load_state_dict(init)
            collector = FakeCollector(loss.actor, total_frames=48)
            trainer = Trainer(
                collector=collector,
                total_frames=48,
                frame_skip=1,
                optim_steps_per_batch=1,
                loss_module=loss,
                optimizer=torch.optim.Adam(loss.parameters()),
                progress_bar=False,
                seed=3,
            )
            trainer.train()
            return loss.state_dict()

        with torch.random.fork_rng():
            a, b = run(), run()
        for k in a:
            assert torch.equal(a[k], b[k]), k

    def test_early_stopping_stops_and_saves(self, tmp_path):
        rewards = [1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
        batches = [
            TensorDict({("next", "reward"): torch.full((4, 1), r)}, batch_size=[4]) for r in rewards
        ]
        trainer = Trainer(
            collector=batches,
            total_frames=10**6,
            frame_skip=1,
            optim_steps_per_batch=0,
            loss_module=lambda td: TensorDict(),
            progress_bar=False,
            save_trainer_file=tmp_path / "ckpt.pt",
            save_trainer_interval=10**6,
        )
        LogScalar(logname="r_training").register(trainer)
        stop = EarlyStopping(monitor="r_training", patience=8, wait_for=0)
        stop.register(trainer)
        trainer.train()
        # improvement at 4 and 8 frames, none after: stops at 16 (8 frames without progress)
        assert trainer.collected_frames == 16
        assert "did not improve for 8 frames" in stop.stop_reason
        assert (tmp_path / "ckpt.pt").exists()

    def test_early_stopping_on_non_finite_and_bad_args(self):
        batches = [TensorDict({("next", "reward"): torch.full((2, 1), float("nan"))}, [2])] * 3
        trainer = Trainer(
            collector=batches,
            total_frames=100,
            frame_skip=1,
            optim_steps_per_batch=0,
            loss_module=lambda td: TensorDict(),
            progress_bar=False,
        )
        LogScalar(logname="r").register(trainer)
        EarlyStopping(monitor="r", wait_for=0).register(trainer)
        trainer.train()
        assert trainer.collected_frames == 2 and "became nan" in trainer._stop_reason
        with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
            EarlyStopping(mode="up")
        with pytest.raises(RuntimeError, match="not registered with a trainer"):
            EarlyStopping()(None)


class TestProgress:
    def test_episode_returns_match_a_plain_loop(self):
        torch.manual_seed(0)
        tracker = EpisodeReturns(window=100)
        expected, running = [], [0.0, 0.0, 0.0]
        for _ in range(3):
            reward = torch.randn(3, 7, 1)
            done = torch.rand(3, 7, 1) < 0.3
            td = TensorDict({("next", "reward"): reward, ("next", "done"): done}, [3, 7])
            tracker.update(td)
            for t in range(7):
                for n in range(3):
                    running[n] += float(reward[n, t])
                    if done[n, t]:
                        expected.append((n, t, running[n]))
                        running[n] = 0.0
        # the tracker lists episodes by env, then time, within a batch
        got = list(tracker.recent)
        assert len(got) == len(expected)
        assert sorted(got) == pytest.approx(sorted(e[2] for e in expected))

    def test_off_when_not_a_terminal_or_not_asked(self, monkeypatch):
        assert not ProgressBar(True, 100).active  # pytest captures stdout
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
        assert not ProgressBar(False, 100).active

    def test_bar_shows_frames_return_and_loss(self, monkeypatch, capsys):
        import io

        stream = io.StringIO()
        stream.isatty = lambda: True
        monkeypatch.setattr(sys, "stdout", stream)
        monkeypatch.setattr(sys, "stderr", stream)
        batches = [
            TensorDict(
                {
                    "obs": torch.ones(4, 3),
                    "target": torch.ones(4, 1),
                    ("next", "reward"): torch.ones(4, 1),
                    ("next", "done"): torch.tensor([[False], [True], [False], [True]]),
                },
                batch_size=[4],
            )
        ] * 2
        trainer, _ = _linear_trainer(batches, total_frames=8, progress_bar=True)
        trainer.train()
        text = stream.getvalue()
        assert "8/8" in text and "return=2" in text and "loss=" in text


def test_readme_training_example(capsys):
    import re

    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"## Training example\n.*?```python\n(.*?)```", text, re.S).group(1)
    with torch.random.fork_rng():
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("320 [") and "'r_training.csv'" in out and "'loss_mse.csv'" in out


@pytest.mark.parametrize(
    "module",
    [
        "rl.core.trainers._trainer",
        "rl.core.trainers._hooks_data",
        "rl.core.trainers._hooks_optim",
        "rl.core.trainers._hooks_log",
        "rl.core.trainers._steppers",
        "rl.core.trainers._grpo",
        "rl.core.loggers._csv",
        "rl.core.loggers._tensorboard",
        "rl.core.loggers._utils",
    ],
)
def test_doctests(module):
    import doctest
    import importlib

    with torch.random.fork_rng():
        result = doctest.testmod(
            importlib.import_module(module),
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        )
    assert result.attempted > 0 and result.failed == 0
