"""Optimization steppers: what one step does to the parameters, its metrics, errors and state."""

from __future__ import annotations

import logging

import pytest
import torch
from tensordict import TensorDict

from rl.core.trainers import (
    DefaultOptimizationStepper,
    DreamerV3OptimizationStepper,
    MixedPrecisionOptimizationStepper,
    OptimizationStepper,
    Trainer,
)


def _trainer(loss_module, batches=(), **kwargs):
    defaults = dict(
        collector=list(batches),
        total_frames=10**6,
        frame_skip=1,
        optim_steps_per_batch=1,
        loss_module=loss_module,
        progress_bar=False,
    )
    defaults.update(kwargs)
    return Trainer(**defaults)


def _batches(n, size=2):
    return [TensorDict(x=torch.full((size,), float(i + 1)), batch_size=[size]) for i in range(n)]


class CountingStepper(OptimizationStepper):
    """A stepper with state: counts its calls, steps nothing."""

    def __init__(self):
        self.calls = 0

    def step(self, trainer, sub_batch):
        self.calls += 1
        return TensorDict(loss=torch.tensor(float(self.calls)))

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state_dict):
        self.calls = state_dict["calls"]


class TestOptimizationStepper:
    def test_replaces_the_loss_and_optimizer_points(self):
        seen = []
        stepper = CountingStepper()
        trainer = _trainer(
            lambda td: seen.append("loss_module"),
            _batches(2),
            optim_steps_per_batch=3,
            optimization_stepper=stepper,
        )
        trainer.register_op("post_loss", lambda td: seen.append("post_loss"))
        trainer.register_op("post_optim", lambda: seen.append("post_optim"))
        trainer.train()
        assert stepper.calls == 6
        assert seen == ["post_optim"] * 6
        assert trainer._modules["optimization_stepper"] is stepper
        # the metrics of the last batch's three steps (4, 5, 6), averaged
        assert trainer.last_losses["loss"].item() == 5.0

    def test_state_goes_into_the_checkpoint(self, tmp_path):
        stepper = CountingStepper()
        trainer = _trainer(lambda td: td, optimization_stepper=stepper)
        stepper.calls = 5
        trainer.save_trainer_file = tmp_path / "ckpt.pt"
        trainer.save_trainer(force_save=True)
        restored = CountingStepper()
        _trainer(lambda td: td, optimization_stepper=restored).load_from_file(tmp_path / "ckpt.pt")
        assert restored.calls == 5

    def test_step_is_abstract(self):
        with pytest.raises(NotImplementedError, match="OptimizationStepper does not define step"):
            OptimizationStepper().step(None, TensorDict())
        assert OptimizationStepper().state_dict() == {}

    def test_dreamer_stepper_is_one(self):
        assert issubclass(DreamerV3OptimizationStepper, OptimizationStepper)


def _two_losses(w):
    return lambda td: TensorDict(loss_a=w[0] ** 2, loss_b=w[1] ** 2, other=w.sum())


class TestDefaultOptimizationStepper:
    def test_loss_components_select_what_is_minimized(self):
        w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
        stepper = DefaultOptimizationStepper(loss_components=["loss_a"])
        trainer = _trainer(
            _two_losses(w),
            optimizer=torch.optim.SGD([w], lr=0.25),
            optimization_stepper=stepper,
        )
        out = stepper.step(trainer, TensorDict())
        # d(w0^2)/dw0 = 2: w0 = 1 - 0.25 * 2; w1 untouched
        torch.testing.assert_close(w.detach(), torch.tensor([0.5, 1.0]))
        assert out["grad_norm"].item() == 2.0
        assert not out["loss_a"].requires_grad and w.grad is None

    @pytest.mark.parametrize("clip_grad_norm", [True, False])
    def test_clips_with_the_trainers_settings(self, clip_grad_norm):
        # gradient (2, 2), norm 2 * sqrt(2): clipped to the norm 1 -> each 1 / sqrt(2), or
        # each value clamped to 1
        w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
        trainer = _trainer(
            _two_losses(w),
            optimizer=torch.optim.SGD([w], lr=0.25),
            optimization_stepper=DefaultOptimizationStepper(),
            clip_grad_norm=clip_grad_norm,
            clip_norm=1.0,
        )
        out = trainer.optimization_stepper.step(trainer, TensorDict())
        step = 0.25 * (2**-0.5 if clip_grad_norm else 1.0)
        torch.testing.assert_close(w.detach(), torch.full((2,), 1.0 - step))
        assert out["grad_norm"].item() == pytest.approx(8**0.5)

    def test_matches_the_optimizer_hook(self):
        """A trainer with the default stepper trains as one with only an optimizer."""
        params = []
        for stepper in (None, DefaultOptimizationStepper()):
            torch.manual_seed(0)
            net = torch.nn.Linear(2, 1)
            trainer = _trainer(
                lambda td, net=net: TensorDict(
                    loss=net(td["x"][:, None].expand(-1, 2)).pow(2).mean()
                ),
                _batches(3),
                optim_steps_per_batch=2,
                optimizer=torch.optim.Adam(net.parameters(), lr=0.1),
                optimization_stepper=stepper,
                clip_norm=0.5,
            )
            trainer.train()
            params.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
        torch.testing.assert_close(params[0], params[1], rtol=0, atol=0)

    def test_errors(self):
        w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
        with pytest.raises(ValueError, match="loss_components cannot be empty"):
            DefaultOptimizationStepper([])
        stepper = DefaultOptimizationStepper(["loss_pi"])
        trainer = _trainer(
            _two_losses(w), optimizer=torch.optim.SGD([w], lr=1), optimization_stepper=stepper
        )
        with pytest.raises(ValueError, match="the losses have no entry 'loss_pi'; they have"):
            stepper.step(trainer, TensorDict())
        no_optimizer = _trainer(_two_losses(w), optimization_stepper=DefaultOptimizationStepper())
        with pytest.raises(RuntimeError, match="the trainer has none: pass optimizer="):
            no_optimizer.optimization_stepper.step(no_optimizer, TensorDict())


def _scaled_square(w):
    """``loss = x * sum(w^2)`` with ``x`` the sub-batch's scalar."""
    return lambda td: TensorDict(
        loss=td["x"].mean() * (w**2).sum(), per_item=torch.cat([w, 3 * w]).detach()
    )


class TestMixedPrecisionOptimizationStepper:
    def test_accumulates_then_steps(self):
        w = torch.nn.Parameter(torch.tensor([3.0]))
        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([w], lr=0.5), gradient_accumulation_steps=2, clip_norm=None
        )
        trainer = _trainer(_scaled_square(w), optimization_stepper=stepper)
        first = stepper.step(trainer, TensorDict(x=torch.tensor(1.0)))
        # gradient 2 * w * x / 2 = 3 accumulated, no step yet
        assert w.item() == 3.0 and w.grad.item() == 3.0 and "grad_norm" not in first
        second = stepper.step(trainer, TensorDict(x=torch.tensor(3.0)))
        # 3 + 2 * 3 * 3 / 2 = 12: w = 3 - 0.5 * 12
        assert w.item() == -3.0 and second["grad_norm"].item() == 12.0
        assert stepper.optimizer_step_count == 1 and w.grad is None
        # entries with several elements are reduced to their mean
        assert second["per_item"].shape == () and second["per_item"].item() == 6.0

    def test_clips_the_global_norm(self):
        w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
        stepper = MixedPrecisionOptimizationStepper(torch.optim.SGD([w], lr=1.0), clip_norm=1.0)
        out = stepper.step(_trainer(_scaled_square(w)), TensorDict(x=torch.tensor(0.5)))
        # gradient w = (3, 4), norm 5, clipped to (0.6, 0.8)
        torch.testing.assert_close(w.detach(), torch.tensor([2.4, 3.2]))
        assert out["grad_norm"].item() == 5.0

    def test_bfloat16_autocast_on_cpu(self):
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 1)
        reference = torch.nn.Linear(4, 1)
        reference.load_state_dict(net.state_dict())
        x = torch.randn(8, 4)
        dtypes = []

        def loss(td, net=net):
            out = net(x)
            dtypes.append(out.dtype)
            return TensorDict(loss=out.float().pow(2).mean())

        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD(net.parameters(), lr=0.1), mixed_precision=True, clip_norm=None
        )
        assert stepper.device_type == "cpu" and not stepper.scaler.is_enabled()
        stepper.step(_trainer(loss), TensorDict())
        assert dtypes == [torch.bfloat16]
        assert all(p.dtype == torch.float32 for p in net.parameters())
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        reference(x).pow(2).mean().backward()
        ref_opt.step()
        for p, q in zip(net.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.detach(), q.detach(), atol=2e-2, rtol=2e-2)
            assert not torch.equal(p.detach(), q.detach())  # bfloat16 rounding shows

    def test_float16_scales_the_loss_and_skips_overflows(self, caplog):
        w = torch.nn.Parameter(torch.tensor([1.0]))
        big = {"on": False}

        def loss(td):
            return TensorDict(loss=(w * (1e35 if big["on"] else 2.0)).sum())

        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([w], lr=0.25),
            mixed_precision=True,
            autocast_dtype=torch.float16,
            clip_norm=None,
            device_type="cpu",
        )
        trainer = _trainer(loss, optimization_stepper=stepper)
        assert stepper.scaler.is_enabled()
        scale = stepper.scaler.get_scale()
        stepper.step(trainer, TensorDict())
        # the scaled gradient is unscaled before the step: w = 1 - 0.25 * 2
        assert w.item() == 0.5 and stepper.optimizer_step_count == 1
        big["on"] = True  # 1e35 * scale overflows float32: the scaler skips the step
        with caplog.at_level(logging.INFO, logger="rl.core.trainers"):
            out = stepper.step(trainer, TensorDict())
        assert w.item() == 0.5 and stepper.optimizer_step_count == 1
        assert stepper.scaler.get_scale() == scale / 2
        # the skip is counted and logged; the infinite norm is not reported
        assert stepper.skipped_nonfinite_steps == 1 and "grad_norm" not in out
        assert "grad scaler skipped the optimizer step" in caplog.text
        assert f"from {scale} to {scale / 2}; 1 skipped so far" in caplog.text
        state = stepper.state_dict()
        assert "scaler" in state and state["skipped_nonfinite_steps"] == 1
        big["on"] = False  # finite again: the next step runs at the halved scale
        out = stepper.step(trainer, TensorDict())
        assert w.item() == 0.0 and out["grad_norm"].item() == 2.0
        assert stepper.optimizer_step_count == 2 and stepper.skipped_nonfinite_steps == 1

    def test_float16_overflow_in_the_trainer_loop(self):
        w = torch.nn.Parameter(torch.tensor([1.0]))
        calls = {"n": 0}

        def loss(td):
            calls["n"] += 1  # the 2nd of every 3 calls overflows under the scaler
            return TensorDict(loss=(w * (1e35 if calls["n"] % 3 == 2 else 2.0)).sum())

        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([w], lr=0.125),
            mixed_precision=True,
            autocast_dtype=torch.float16,
            clip_norm=None,
            device_type="cpu",
        )
        trainer = _trainer(loss, _batches(2), optim_steps_per_batch=3, optimization_stepper=stepper)
        trainer.train()
        # per batch: 2 steps on the gradient 2 (w -= 0.25 each), 1 skipped
        assert stepper.optimizer_step_count == 4 and stepper.skipped_nonfinite_steps == 2
        assert w.item() == 0.0
        # the mean grad_norm covers the 2 steps taken (not inf, not pulled down by 0)
        assert trainer.last_losses["grad_norm"].item() == 2.0

    def test_non_finite_loss_drops_the_window(self):
        w = torch.nn.Parameter(torch.tensor([1.0]))
        scale = {"x": 1.0}
        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([w], lr=0.5), gradient_accumulation_steps=2, clip_norm=None
        )
        trainer = _trainer(lambda td: TensorDict(loss=(w * scale["x"]).sum()))
        stepper.step(trainer, TensorDict())
        assert w.grad.item() == 0.5
        scale["x"] = float("nan")
        with pytest.warns(RuntimeWarning, match="the loss is non-finite .*1 skipped so far"):
            out = stepper.step(trainer, TensorDict())
        assert w.grad is None and stepper.skipped_nonfinite_steps == 1
        assert "grad_norm" not in out and w.item() == 1.0
        # the window restarted: two finite calls are needed before the next step
        scale["x"] = 1.0
        stepper.step(trainer, TensorDict())
        assert w.item() == 1.0
        stepper.step(trainer, TensorDict())
        assert w.item() == 0.5 and stepper.optimizer_step_count == 1

    def test_non_finite_gradient_skips_the_step(self):
        w = torch.nn.Parameter(torch.tensor([0.0]))
        stepper = MixedPrecisionOptimizationStepper(torch.optim.SGD([w], lr=0.5), clip_norm=None)
        trainer = _trainer(lambda td: TensorDict(loss=w.sqrt().sum()))  # d sqrt(w)/dw at 0: inf
        with pytest.warns(RuntimeWarning, match="the gradient norm is non-finite"):
            out = stepper.step(trainer, TensorDict())
        assert w.item() == 0.0 and w.grad is None
        # a skipped step reports no grad_norm (neither inf nor a placeholder)
        assert "grad_norm" not in out and out["loss"].item() == 0.0
        assert stepper.optimizer_step_count == 0 and stepper.skipped_nonfinite_steps == 1

    def test_errors(self):
        w = torch.nn.Parameter(torch.tensor([1.0]))
        opt = torch.optim.SGD([w], lr=1.0)
        with pytest.raises(ValueError, match="gradient_accumulation_steps must be a positive int"):
            MixedPrecisionOptimizationStepper(opt, gradient_accumulation_steps=0)
        with pytest.raises(ValueError, match="autocast_dtype must be torch.bfloat16 or"):
            MixedPrecisionOptimizationStepper(
                opt, mixed_precision=True, autocast_dtype=torch.float32
            )
        stepper = MixedPrecisionOptimizationStepper(opt)
        with pytest.raises(RuntimeError, match=r"no 'loss\*' entry, got \['value'\]"):
            stepper.step(_trainer(lambda td: TensorDict(value=w.sum())), TensorDict())

    def test_in_the_trainer_loop(self):
        w = torch.nn.Parameter(torch.tensor([2.0]))
        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([w], lr=0.125), gradient_accumulation_steps=2, clip_norm=None
        )
        trainer = _trainer(
            _scaled_square(w), _batches(2), optim_steps_per_batch=4, optimization_stepper=stepper
        )
        trainer.train()
        assert stepper.optimizer_step_count == 4
        # batch 1 (x=1): each step on the mean gradient 2w: w *= 1 - 0.125 * 2, twice;
        # batch 2 (x=2): gradient 4w: w *= 1 - 0.125 * 4, twice
        assert w.item() == pytest.approx(2.0 * 0.75**2 * 0.5**2)
        # grad_norm averaged over the two steps that wrote it: 4w at w=2*0.75^2, then half
        expected = (4 * 2.0 * 0.75**2 + 4 * 2.0 * 0.75**2 * 0.5) / 2
        assert trainer.last_losses["grad_norm"].item() == pytest.approx(expected)

    def test_resume_mid_window_is_exact(self, tmp_path):
        def run(stop_after=None, load=None):
            w = torch.nn.Parameter(torch.tensor([2.0, -1.0]))
            stepper = MixedPrecisionOptimizationStepper(
                torch.optim.Adam([w], lr=0.1), gradient_accumulation_steps=3
            )
            trainer = _trainer(_scaled_square(w), optimization_stepper=stepper)
            if load is not None:
                w.data.copy_(load[1])
                trainer.load_from_file(load[0])
            xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
            start = 0 if load is None else 4
            for x in xs[start:stop_after]:
                stepper.step(trainer, TensorDict(x=torch.tensor(x)))
            if stop_after is not None:
                trainer.save_trainer_file = tmp_path / "ckpt.pt"
                trainer.save_trainer(force_save=True)
            return w.detach().clone(), stepper

        uninterrupted, full = run()
        at_four, half = run(stop_after=4)  # one step taken, one call into the second window
        assert half._micro_step == 1 and "grads" in half.state_dict()
        resumed, rest = run(load=(tmp_path / "ckpt.pt", at_four))
        torch.testing.assert_close(resumed, uninterrupted, rtol=0, atol=0)
        assert rest.optimizer_step_count == full.optimizer_step_count == 2

    def test_rejects_gradients_of_another_optimizer(self):
        a = torch.nn.Parameter(torch.ones(1))
        stepper = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([a], lr=1.0), gradient_accumulation_steps=2
        )
        stepper.step(_trainer(lambda td: TensorDict(loss=a.sum())), TensorDict())
        other = MixedPrecisionOptimizationStepper(
            torch.optim.SGD([torch.nn.Parameter(torch.ones(1)) for _ in range(2)], lr=1.0)
        )
        with pytest.raises(ValueError, match="gradients of 1 parameters, the optimizer has 2"):
            other.load_state_dict(stepper.state_dict())
