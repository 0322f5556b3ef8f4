"""DreamerV3's optimiser, learner stepper and update-ratio schedule."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.core.trainers import DreamerV3OptimizationStepper, DreamerV3Optimizer, DreamerV3UpdateRatio


def _reference_step(p, g, state, t, lr, agc=0.3, pmin=1e-3, b1=0.9, b2=0.999, eps=1e-20):
    """One update written element by element with Python floats."""
    pn = max(sum(x * x for x in p) ** 0.5, pmin)
    gn = sum(x * x for x in g) ** 0.5
    scale = min(1.0, agc * pn / gn) if agc else 1.0
    out = []
    for i, (pi, gi) in enumerate(zip(p, g)):
        gi *= scale
        state["v"][i] = b2 * state["v"][i] + (1 - b2) * gi * gi
        u = gi / ((state["v"][i] / (1 - b2**t)) ** 0.5 + eps)
        state["m"][i] = b1 * state["m"][i] + (1 - b1) * u
        out.append(pi - lr * state["m"][i] / (1 - b1**t))
    return out


class TestDreamerV3Optimizer:
    def test_matches_elementwise_loop_with_warmup(self):
        torch.manual_seed(0)
        p = nn.Parameter(torch.randn(5, dtype=torch.float64))
        opt = DreamerV3Optimizer([p], lr=0.1, warmup_steps=4)
        ref, state = p.detach().tolist(), {"v": [0.0] * 5, "m": [0.0] * 5}
        for t in range(1, 7):
            p.grad = torch.randn(5, dtype=torch.float64) * 10 ** (t % 3)
            ref = _reference_step(ref, p.grad.tolist(), state, t, 0.1 * min(1, (t - 1) / 4))
            opt.step()
            torch.testing.assert_close(p.detach(), torch.tensor(ref, dtype=torch.float64))
        assert opt.param_groups[0]["step"] == 6
        opt.load_state_dict(opt.state_dict())

    def test_no_gradient_raises(self):
        opt = DreamerV3Optimizer([nn.Parameter(torch.ones(2))])
        with pytest.raises(RuntimeError, match="no parameter gradients"):
            opt.step()


class TestDreamerV3UpdateRatio:
    def test_schedule_keeps_fractions_and_restores(self):
        schedule = DreamerV3UpdateRatio(0.25)
        assert [schedule(n) for n in (4, 6, 12, 13, 14, 15, 16)] == [1, 0, 2, 0, 0, 0, 1]
        saved = schedule.state_dict()
        expected = schedule(40)
        schedule.load_state_dict(saved)
        assert schedule(40) == expected == 6
        assert DreamerV3UpdateRatio(0.0)(100) == 0
        schedule.reset(100)
        assert schedule(104) == 1


class _FakeLoss(nn.Module):
    """A stand-in DreamerV3Loss: one parameter, a buffer, the keys the stepper reads."""

    class _Keys:
        is_init = "is_init"
        replay_context = "replay_context"
        done = "done"
        terminated = "terminated"

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.register_buffer("calls", torch.zeros(()))
        self.tensor_keys = self._Keys()
        self.value_loss = self
        self.in_keys = ["obs", "is_init", ("next", "done"), ("next", "terminated")]

    def forward(self, sample):
        self.calls += 1
        assert sample["is_init"].shape == (*sample.batch_size, 1)
        loss = (sample["obs"] * self.w).square().mean()
        return TensorDict(
            loss_a=loss,
            metric=loss.detach() * 2,
            replay_context=TensorDict(state=sample["obs"] * self.w, batch_size=sample.batch_size),
        )


def _batch():
    return TensorDict(
        obs=torch.randn(2, 4, 3),
        is_init=torch.zeros(2, 4, dtype=torch.bool),
        extra=torch.zeros(2, 4),
        next=TensorDict(
            done=torch.zeros(2, 4, dtype=torch.bool),
            terminated=torch.zeros(2, 4, dtype=torch.bool),
            batch_size=[2, 4],
        ),
        batch_size=[2, 4],
    )


class TestDreamerV3OptimizationStepper:
    def test_step_updates_and_writes_context(self):
        loss = _FakeLoss()
        opt = torch.optim.SGD(loss.parameters(), lr=0.1)
        stepper = DreamerV3OptimizationStepper(loss, opt, compile_train_step=False)
        batch = _batch()
        expected_grad = torch.autograd.grad((batch["obs"] * loss.w).square().mean(), loss.w)[0]
        metrics = stepper.step(None, batch)
        torch.testing.assert_close(loss.w.detach(), 1 - 0.1 * expected_grad)
        assert set(metrics.keys()) == {"loss_a", "metric"}
        assert not batch["replay_context", "state"].requires_grad
        stepper.load_state_dict(stepper.state_dict())

    def test_warmup_restores_buffers_and_rng(self):
        loss = _FakeLoss()
        stepper = DreamerV3OptimizationStepper(
            loss,
            torch.optim.SGD(loss.parameters(), lr=0.1),
            compile_train_step=False,
            warmup_steps=3,
        )
        torch.manual_seed(5)
        before = loss.w.detach().clone()
        stepper.warmup(_batch())
        assert loss.calls == 0 and torch.equal(loss.w.detach(), before)
        batch = _batch()
        torch.manual_seed(5)
        a = torch.rand(2)
        torch.manual_seed(5)
        stepper.warmup(batch)
        torch.testing.assert_close(torch.rand(2), a)

    def test_bad_arguments(self):
        loss = _FakeLoss()
        opt = torch.optim.SGD(loss.parameters(), lr=0.1)
        with pytest.raises(ValueError, match="warmup_steps must be positive, got 0"):
            DreamerV3OptimizationStepper(loss, opt, warmup_steps=0)
        with pytest.raises(ValueError, match="rssm_scan_unroll"):
            DreamerV3OptimizationStepper(loss, opt, rssm_scan_unroll=0)
        with pytest.raises(NotImplementedError, match="cudagraph"):
            DreamerV3OptimizationStepper(loss, opt, cudagraph=True)
        stepper = DreamerV3OptimizationStepper(loss, opt, compile_train_step=True)
        with pytest.raises(RuntimeError, match="Call warmup"):
            stepper.step(None, _batch())
