"""DreamerV3's optimiser, its learner step and its replay-ratio schedule.

As ``torchrl.trainers.algorithms`` (TorchRL 0.14.1). Hafner et al., "Mastering Diverse
Domains through World Models", 2023, https://arxiv.org/abs/2301.04104. The loss is
duck-typed (a ``DreamerV3Loss`` of ``rl.objectives``): nothing here imports another
``rl`` package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from ._steppers import OptimizationStepper

__all__ = ["DreamerV3OptimizationStepper", "DreamerV3Optimizer", "DreamerV3UpdateRatio"]


class DreamerV3Optimizer(torch.optim.Optimizer):
    """DreamerV3's optimiser: adaptive gradient clipping, RMS scaling, then momentum.

    For each parameter ``p`` with gradient ``g``, at update ``t``:

    - clip: ``g *= min(1, agc * max(|p|, parameter_norm_min) / |g|)`` (norms over the
      whole tensor; ``agc=0`` disables it);
    - ``v = beta2 v + (1 - beta2) g**2`` and ``u = g / (sqrt(v / (1 - beta2**t)) + eps)``;
    - ``m = beta1 m + (1 - beta1) u`` and ``p -= lr_t * m / (1 - beta1**t)``, where
      ``lr_t = lr * min(1, (t - 1) / warmup_steps)`` (a linear warm-up from zero).

    Moments are kept in float32. Parameters without a gradient are skipped.

    Args:
        parameters (iterable of Tensor or dict): parameters or parameter groups (a group
            may override any keyword below and counts its own updates).

    Keyword Args:
        lr (float, optional): learning rate after the warm-up. Defaults to ``4e-5``.
        agc (float, optional): clipping ratio. Defaults to ``0.3``.
        parameter_norm_min (float, optional): floor of the parameter norm. Defaults to ``1e-3``.
        beta1 (float, optional): momentum decay. Defaults to ``0.9``.
        beta2 (float, optional): squared-gradient decay. Defaults to ``0.999``.
        eps (float, optional): added to the RMS. Defaults to ``1e-20``.
        warmup_steps (int, optional): updates of the warm-up, ``0`` for none. Defaults
            to ``1000``.

    Raises:
        RuntimeError: (in ``step``) when no parameter has a gradient.

    Examples:
        >>> import torch
        >>> from rl.core.trainers import DreamerV3Optimizer
        >>> p = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
        >>> opt = DreamerV3Optimizer([p], lr=0.01, warmup_steps=0)
        >>> p.square().sum().backward()
        >>> opt.step()
        >>> p.detach()
        tensor([ 0.9900, -0.9900])
    """

    def __init__(
        self,
        parameters: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        *,
        lr: float = 4e-5,
        agc: float = 0.3,
        parameter_norm_min: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-20,
        warmup_steps: int = 1000,
    ) -> None:
        defaults = dict(
            lr=lr,
            agc=agc,
            parameter_norm_min=parameter_norm_min,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            warmup_steps=warmup_steps,
            step=0,
        )
        super().__init__(parameters, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not any(p.grad is not None for g in self.param_groups for p in g["params"]):
            raise RuntimeError("DreamerV3 optimizer received no parameter gradients.")
        for group in self.param_groups:
            group["step"] += 1
            t = group["step"]
            warmup = group["warmup_steps"]
            lr = group["lr"] * (min(1.0, (t - 1) / warmup) if warmup else 1.0)
            by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_kind.setdefault((p.device, p.dtype), []).append(p)
            for params in by_kind.values():
                self._update(params, group, t, lr)
        return loss

    def _update(self, params: list[torch.Tensor], group: dict, t: int, lr: float) -> None:
        grads = [p.grad.float() for p in params]
        if group["agc"]:
            grad_norms = torch._foreach_norm(grads)
            limits = torch._foreach_norm([p.detach().float() for p in params])
            torch._foreach_clamp_min_(limits, group["parameter_norm_min"])
            torch._foreach_mul_(limits, group["agc"])
            # min(1, limit / |g|) written as limit / max(|g|, limit)
            scales = torch._foreach_div(limits, torch._foreach_maximum(grad_norms, limits))
            grads = torch._foreach_mul(grads, scales)
        squares, momenta = [], []
        for p in params:
            state = self.state[p]
            if not state:
                state["rms"] = torch.zeros_like(p, dtype=torch.float32)
                state["momentum"] = torch.zeros_like(p, dtype=torch.float32)
            squares.append(state["rms"])
            momenta.append(state["momentum"])
        beta1, beta2 = group["beta1"], group["beta2"]
        torch._foreach_mul_(squares, beta2)
        torch._foreach_addcmul_(squares, grads, grads, value=1 - beta2)
        denominators = torch._foreach_sqrt(torch._foreach_div(squares, 1 - beta2**t))
        torch._foreach_add_(denominators, group["eps"])
        torch._foreach_mul_(momenta, beta1)
        torch._foreach_add_(momenta, torch._foreach_div(grads, denominators), alpha=1 - beta1)
        updates = torch._foreach_div(momenta, 1 - beta1**t)
        updates = [u.to(p.dtype) for u, p in zip(updates, params)]
        torch._foreach_add_(params, updates, alpha=-lr)


class DreamerV3OptimizationStepper(OptimizationStepper):
    """One DreamerV3 learner update: the loss, one backward, the optimiser and target steps.

    ``step(trainer, sub_batch)`` sums the ``loss_*`` entries of ``loss_module(sample)``
    (``sample`` is ``sub_batch`` restricted to the loss's ``in_keys``, reset and done
    flags shaped ``[B, T, 1]``), backpropagates, steps the optimiser then the target
    updater, writes the detached posterior latents back under the loss's
    ``replay_context`` key and returns the detached scalar metrics.

    With ``compile_train_step=True`` the forward-backward is ``torch.compile``-d at
    :meth:`warmup`, which runs it ``warmup_steps`` times on a representative sample and
    restores the loss's buffers and the global RNG afterwards (no parameter moves).

    Args:
        loss_module (DreamerV3Loss): the complete objective.
        optimizer (torch.optim.Optimizer): owns the learner's parameters.
        target_updater (optional): stepped after each optimiser step (a ``SoftUpdate``).

    Keyword Args:
        compile_train_step (bool, optional): compile the forward-backward; ``None``
            compiles on CUDA only. Defaults to ``None``.
        compile_mode (str, optional): ``torch.compile`` mode. Defaults to ``"default"``.
        cudagraph (bool, optional): CUDA-graph capture is not provided by rl; ``True``
            raises, ``None``/``False`` run without it. Defaults to ``None``.
        rssm_scan_unroll (int, optional): accepted for TorchRL compatibility; rl's
            ``RSSMRolloutV3`` has no scan form, so a compiled step traces its loop.
            Defaults to ``8``.
        warmup_steps (int, optional): forward-backward calls of :meth:`warmup`, positive.
            Defaults to ``5``.
        mixed_precision (bool, optional): bfloat16 autocast on CUDA. Defaults to ``False``.

    Raises:
        ValueError: for a non-positive ``warmup_steps`` or ``rssm_scan_unroll``.
        NotImplementedError: for ``cudagraph=True``.
        RuntimeError: (in ``step``) when a compiled step has not been warmed up, or the
            update produced no gradient.
    """

    def __init__(
        self,
        loss_module,
        optimizer: torch.optim.Optimizer,
        target_updater=None,
        *,
        compile_train_step: bool | None = None,
        compile_mode: Literal[
            "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
        ] = "default",
        cudagraph: bool | None = None,
        rssm_scan_unroll: int | None = 8,
        warmup_steps: int = 5,
        mixed_precision: bool = False,
    ) -> None:
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be positive, got {warmup_steps}.")
        if rssm_scan_unroll is not None and (
            not isinstance(rssm_scan_unroll, int)
            or isinstance(rssm_scan_unroll, bool)
            or rssm_scan_unroll < 1
        ):
            raise ValueError(
                f"rssm_scan_unroll must be a positive integer or None, got {rssm_scan_unroll!r}."
            )
        if cudagraph:
            raise NotImplementedError(
                "cudagraph=True (CUDA-graph capture of the learner step) is not provided by rl."
            )
        self.loss_module = loss_module
        self.optimizer = optimizer
        self.target_updater = target_updater
        self.compile_train_step = compile_train_step
        self.compile_mode = compile_mode
        self.cudagraph = cudagraph
        self.rssm_scan_unroll = rssm_scan_unroll
        self.warmup_steps = warmup_steps
        self.mixed_precision = mixed_precision
        self._train_step = self._forward_backward
        self._ready = compile_train_step is False

    def resolve(self, device: torch.device) -> tuple[bool, bool]:
        """The ``(compile_train_step, cudagraph)`` used on ``device``."""
        compile_step = (
            device.type == "cuda"
            if self.compile_train_step is None
            else bool(self.compile_train_step)
        )
        return compile_step, False

    def _prepare_sample(self, sample: TensorDictBase) -> TensorDictBase:
        loss = self.loss_module
        sample = sample.select(*loss.in_keys, strict=False)
        value_keys = loss.value_loss.tensor_keys
        for key in (
            loss.tensor_keys.is_init,
            ("next", value_keys.done),
            ("next", value_keys.terminated),
        ):
            value = sample.get(key, None)
            if value is not None:
                sample.set(key, value.reshape(*sample.batch_size, 1))
        return sample

    def _forward_backward(self, sample: TensorDictBase) -> TensorDictBase:
        reference = sample.get(self.loss_module.in_keys[0])
        with torch.autocast(
            device_type=reference.device.type,
            dtype=torch.bfloat16,
            enabled=self.mixed_precision and reference.device.type == "cuda",
        ):
            losses = self.loss_module(sample)
            total = sum(
                value
                for key, value in losses.items()
                if isinstance(key, str) and key.startswith("loss_")
            )
        self.optimizer.zero_grad(set_to_none=False)
        total.backward()
        return losses.detach()

    def warmup(self, sample: TensorDictBase) -> None:
        """Build (and compile) the step on ``sample`` without training.

        Buffers of the loss (return statistics) and the global RNG state are restored.
        """
        sample = self._prepare_sample(sample)
        device = sample.get(self.loss_module.in_keys[0]).device
        compile_step, _ = self.resolve(device)
        step = self._forward_backward
        if compile_step:
            step = torch.compile(step, mode=self.compile_mode)
        rng = torch.random.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        saved = [(b, b.detach().clone()) for b in self.loss_module.buffers()]
        try:
            for _ in range(self.warmup_steps):
                step(sample)
            self.optimizer.zero_grad(set_to_none=False)
        finally:
            with torch.no_grad():
                for buffer, value in saved:
                    buffer.copy_(value)
            torch.random.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
        self._train_step = step
        self._ready = True

    def step(self, trainer, sub_batch: TensorDictBase) -> TensorDictBase:
        """Update the learner on ``sub_batch`` and return its detached scalar metrics.

        Raises:
            ValueError: if ``trainer`` holds another loss module.
        """
        if trainer is not None and getattr(trainer, "loss_module", self.loss_module) is not (
            self.loss_module
        ):
            raise ValueError("The trainer and stepper must share the same loss module.")
        sample = self._prepare_sample(sub_batch)
        if not self._ready:
            device = sample.get(self.loss_module.in_keys[0]).device
            if self.resolve(device)[0]:
                raise RuntimeError(
                    "Call warmup(sample) before compiled learner updates (on CUDA the "
                    "default compiles the step); pass compile_train_step=False to run "
                    "eagerly without a warm-up."
                )
            self._ready = True
        result = self._train_step(sample)
        if not any(p.grad is not None for g in self.optimizer.param_groups for p in g["params"]):
            raise RuntimeError("The learner update produced no parameter gradients.")
        self.optimizer.step()
        if self.target_updater is not None:
            self.target_updater.step()
        key = self.loss_module.tensor_keys.replay_context
        sub_batch.set(key, result.get(key))
        return result.select(*(k for k, v in result.items() if isinstance(v, torch.Tensor)))

    def state_dict(self) -> dict[str, Any]:
        """The optimiser's and the target updater's progress (checkpoint the loss apart)."""
        state = {"optimizer": self.optimizer.state_dict()}
        if self.target_updater is not None and hasattr(self.target_updater, "state_dict"):
            state["target_updater"] = self.target_updater.state_dict()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict["optimizer"])
        if "target_updater" in state_dict and self.target_updater is not None:
            self.target_updater.load_state_dict(state_dict["target_updater"])


class DreamerV3UpdateRatio:
    """How many learner updates to run for the records collected so far (the replay ratio).

    Each call converts the records since the last accounted one into
    ``int(new_records * ratio)`` updates and keeps the fraction for later; the first call
    returns one update.

    Args:
        ratio (float): updates per record; ``<= 0`` disables updates.

    Examples:
        >>> from rl.core.trainers import DreamerV3UpdateRatio
        >>> schedule = DreamerV3UpdateRatio(0.25)
        >>> schedule(4), schedule(6), schedule(12)
        (1, 0, 2)
    """

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self._previous: float | None = None

    def __call__(self, record_count: int) -> int:
        if self.ratio <= 0:
            return 0
        if self._previous is None:
            self._previous = float(record_count)
            return 1
        repeats = int((record_count - self._previous) * self.ratio)
        self._previous += repeats / self.ratio
        return repeats

    def reset(self, record_count: int) -> None:
        """Forget owed updates and count from ``record_count`` on (after a resume)."""
        self._previous = float(record_count)

    def state_dict(self) -> dict[str, float | None]:
        return {"ratio": self.ratio, "previous": self._previous}

    def load_state_dict(self, state_dict: Mapping[str, float | None]) -> None:
        self.ratio = state_dict["ratio"]
        self._previous = state_dict["previous"]
