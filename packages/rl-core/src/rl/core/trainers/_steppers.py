"""Optimization steppers: one whole optimization step (loss, backward, optimizer) per call."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from ._hooks_optim import (
    check_saved_grads,
    clip_gradients,
    loss_terms,
    restore_grads,
    saved_grads,
    scaler_step,
)
from ._trainer import Trainer, TrainerHookBase, _as_tensordict

__all__ = [
    "DefaultOptimizationStepper",
    "MixedPrecisionOptimizationStepper",
    "OptimizationStepper",
]


class OptimizationStepper(TrainerHookBase):
    """Runs one whole optimization step of a :class:`Trainer` on a sub-batch.

    Pass one as ``Trainer(optimization_stepper=...)``: for each sub-batch the trainer calls
    ``stepper.step(trainer, sub_batch)`` instead of the ``loss_module`` / ``post_loss`` /
    ``process_loss`` / ``optimizer`` points, then runs ``post_optim`` and ``post_optim_log``
    and averages the returned metrics over the batch's steps. A stepper fits updates the
    hook points cannot express: several optimizers, delayed actor updates (TD3), several
    backward passes per step.

    Subclasses define :meth:`step`, returning a TensorDict of detached scalar metrics, and
    :meth:`state_dict` / :meth:`load_state_dict` when they hold state (an optimizer, a
    counter): the trainer registers the stepper as ``"optimization_stepper"``, so that
    state goes into its checkpoints.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class HalfStep(OptimizationStepper):
        ...     def __init__(self, optimizer):
        ...         self.optimizer = optimizer
        ...     def step(self, trainer, sub_batch):
        ...         losses = trainer.compute_loss(sub_batch)
        ...         (0.5 * losses["loss"]).backward()
        ...         self.optimizer.step()
        ...         self.optimizer.zero_grad()
        ...         return losses.detach()
        >>> w = torch.nn.Parameter(torch.ones(1))
        >>> trainer = Trainer(collector=[TensorDict(batch_size=[4])], total_frames=4,
        ...     frame_skip=1, optim_steps_per_batch=1, progress_bar=False,
        ...     loss_module=lambda td: TensorDict(loss=(w ** 2).sum()),
        ...     optimization_stepper=HalfStep(torch.optim.SGD([w], lr=1.0)))
        >>> trainer.train()
        >>> w.data
        tensor([0.])
    """

    def step(self, trainer: Trainer, sub_batch: TensorDictBase) -> TensorDictBase:
        """Runs one optimization step on ``sub_batch``.

        Args:
            trainer (Trainer): the trainer running the loop (``trainer.compute_loss``,
                ``trainer.optimizer``, ``trainer.clip_norm``...).
            sub_batch (TensorDictBase): the batch of this step.

        Returns:
            A TensorDict of detached scalar metrics to log.

        Raises:
            NotImplementedError: the subclass does not define it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define step(trainer, sub_batch)")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def register(self, trainer: Trainer, name: str = "optimization_stepper") -> None:
        """Names the stepper in ``trainer`` so that its state goes into the checkpoints; it is
        not a hook point (pass it as ``Trainer(optimization_stepper=...)`` to use it)."""
        trainer.register_module(name, self)


class DefaultOptimizationStepper(OptimizationStepper):
    """The plain optimization step: ``trainer.compute_loss``, one backward, clip, step.

    Back-propagates the sum of the selected loss entries, clips the gradients with the
    trainer's ``clip_grad_norm`` / ``clip_norm``, steps ``trainer.optimizer`` and zeroes the
    gradients. The metrics are the detached losses and ``grad_norm`` (the global gradient
    norm before clipping).

    Args:
        loss_components (Sequence[str], optional): the loss entries to minimize. Defaults to
            ``None``: every ``loss*`` entry.

    Raises:
        ValueError: ``loss_components`` is empty; (in ``step``) an entry it names is not in
            the losses.
        RuntimeError: (in ``step``) the trainer has no optimizer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
        >>> trainer = Trainer(collector=[], total_frames=1, frame_skip=1,
        ...     optim_steps_per_batch=1, progress_bar=False,
        ...     loss_module=lambda td: TensorDict(loss_a=w[0] ** 2, loss_b=w[1] ** 2),
        ...     optimizer=torch.optim.SGD([w], lr=0.25),
        ...     optimization_stepper=DefaultOptimizationStepper(["loss_a"]))
        >>> out = trainer.optimization_stepper.step(trainer, TensorDict())
        >>> w.data, out["grad_norm"]
        (tensor([0.5000, 1.0000]), tensor(2.))
    """

    def __init__(self, loss_components: Sequence[str] | None = None) -> None:
        if loss_components is not None and not loss_components:
            raise ValueError(
                "DefaultOptimizationStepper loss_components cannot be empty; pass None to use "
                "every 'loss*' entry"
            )
        self.loss_components = None if loss_components is None else list(loss_components)

    def step(self, trainer: Trainer, sub_batch: TensorDictBase) -> TensorDictBase:
        optimizer = getattr(trainer, "optimizer", None)
        if optimizer is None:
            raise RuntimeError(
                "DefaultOptimizationStepper steps the trainer's optimizer, but the trainer has "
                "none: pass optimizer= to the Trainer, or use an OptimizationStepper that owns "
                "its optimizers"
            )
        losses = _as_tensordict(trainer.compute_loss(sub_batch))
        sum(loss_terms(losses, self.loss_components, "DefaultOptimizationStepper")).backward()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grad_norm = clip_gradients(params, trainer.clip_grad_norm, trainer.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        metrics = losses.detach()
        metrics.set("grad_norm", grad_norm)
        return metrics


class MixedPrecisionOptimizationStepper(OptimizationStepper):
    """An optimization step under autocast, with gradient accumulation.

    Each call computes ``trainer.compute_loss(sub_batch)`` under
    ``torch.autocast(device_type, dtype=autocast_dtype)`` (when ``mixed_precision``),
    back-propagates the sum of the ``loss*`` entries divided by
    ``gradient_accumulation_steps`` (scaled by a ``torch.amp.GradScaler`` for float16),
    and every ``gradient_accumulation_steps`` calls unscales, clips the global gradient
    norm to ``clip_norm``, steps the optimizer and zeroes the gradients. bfloat16 autocast
    needs no scaler and works on CPU as on CUDA.

    A non-finite loss is not back-propagated: the gradients accumulated in its window are
    dropped and the window restarts. A non-finite gradient norm skips the optimizer step;
    in float16 the grad scaler skips it itself when the scaled gradients overflow (and
    halves its scale: a few such skips while the scale settles are expected). Every skip
    counts in :attr:`skipped_nonfinite_steps`; the non-finite loss and gradient skips warn,
    the scaler's are logged (``rl.core.trainers`` logger, INFO).

    The metrics are the detached losses (entries with more than one element reduced to
    their mean) and, on the calls whose optimizer step ran, ``grad_norm``: the global norm
    before clipping. A skipped step reports no ``grad_norm`` (neither the infinite norm
    nor a placeholder), so the trainer's mean ``grad_norm`` covers the steps taken. (TorchRL
    reports ``0.`` for a non-finite norm without scaler and the infinite norm, uncounted,
    for a scaler skip.) The state (optimizer,
    scaler, counters and, between two optimizer steps, the gradients accumulated so far)
    goes into the trainer's checkpoints, so a run resumed mid-window steps as an
    uninterrupted one.

    Args:
        optimizer (torch.optim.Optimizer): the optimizer it steps.

    Keyword Args:
        mixed_precision (bool, optional): run the loss under autocast. Defaults to ``False``.
        autocast_dtype (torch.dtype, optional): ``torch.bfloat16`` or ``torch.float16``;
            float16 enables the grad scaler. Defaults to ``torch.bfloat16``.
        gradient_accumulation_steps (int, optional): calls per optimizer step, positive.
            Defaults to ``1``.
        clip_norm (float, optional): the largest global gradient norm; ``None`` measures
            the norm without clipping. Defaults to ``1.0``.
        device_type (str, optional): the device type of autocast and the scaler
            (``"cuda"``, ``"cpu"``). Defaults to the device of the optimizer's first
            parameter (``"cpu"`` when it has none).

    Raises:
        ValueError: ``gradient_accumulation_steps`` is not a positive int, or
            ``autocast_dtype`` is neither bfloat16 nor float16 with ``mixed_precision``.
        RuntimeError: (in ``step``) the losses have no ``loss*`` entry.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.tensor([3.0]))
        >>> stepper = MixedPrecisionOptimizationStepper(torch.optim.SGD([w], lr=0.5),
        ...     gradient_accumulation_steps=2, clip_norm=None)
        >>> trainer = Trainer(collector=[], total_frames=1, frame_skip=1,
        ...     optim_steps_per_batch=1, progress_bar=False,
        ...     loss_module=lambda td: TensorDict(loss=(w ** 2).sum()),
        ...     optimization_stepper=stepper)
        >>> first = stepper.step(trainer, TensorDict())  # accumulates half the gradient
        >>> w.data, "grad_norm" in first
        (tensor([3.]), False)
        >>> second = stepper.step(trainer, TensorDict())  # steps on the mean gradient 6
        >>> w.data, second["grad_norm"], stepper.optimizer_step_count
        (tensor([0.]), tensor(6.), 1)
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        mixed_precision: bool = False,
        autocast_dtype: torch.dtype = torch.bfloat16,
        gradient_accumulation_steps: int = 1,
        clip_norm: float | None = 1.0,
        device_type: str | None = None,
    ) -> None:
        steps = gradient_accumulation_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(
                "MixedPrecisionOptimizationStepper gradient_accumulation_steps must be a "
                f"positive int, got {steps!r}"
            )
        if mixed_precision and autocast_dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(
                "MixedPrecisionOptimizationStepper autocast_dtype must be torch.bfloat16 or "
                f"torch.float16, got {autocast_dtype}"
            )
        self.optimizer = optimizer
        self.mixed_precision = mixed_precision
        self.autocast_dtype = autocast_dtype
        self.gradient_accumulation_steps = steps
        self.clip_norm = clip_norm
        if device_type is None:
            params = self._params()
            device_type = params[0].device.type if params else "cpu"
        self.device_type = device_type
        # float16 gradients underflow without loss scaling; bfloat16 has float32's range
        self._use_scaler = mixed_precision and autocast_dtype == torch.float16
        self.scaler = torch.amp.GradScaler(device_type, enabled=self._use_scaler)
        self._micro_step = 0
        self._optimizer_step_count = 0
        self._skipped_nonfinite_steps = 0

    @property
    def optimizer_step_count(self) -> int:
        """Optimizer steps taken (accumulation calls and skipped steps not counted)."""
        return self._optimizer_step_count

    @property
    def skipped_nonfinite_steps(self) -> int:
        """Steps skipped because the loss or the gradient norm was non-finite, or because
        the float16 grad scaler found an overflow."""
        return self._skipped_nonfinite_steps

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _skip(self, what: str, value: torch.Tensor) -> None:
        self._skipped_nonfinite_steps += 1
        warnings.warn(
            f"MixedPrecisionOptimizationStepper: optimizer step skipped, the {what} is "
            f"non-finite ({value.item()}); {self._skipped_nonfinite_steps} skipped so far",
            RuntimeWarning,
            stacklevel=3,
        )
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, trainer: Trainer, sub_batch: TensorDictBase) -> TensorDictBase:
        with torch.autocast(
            self.device_type, dtype=self.autocast_dtype, enabled=self.mixed_precision
        ):
            losses = _as_tensordict(trainer.compute_loss(sub_batch))
            terms = [v for k, v in losses.items() if str(k).startswith("loss")]
            if not terms:
                raise RuntimeError(
                    "MixedPrecisionOptimizationStepper: the loss module returned no 'loss*' "
                    f"entry, got {sorted(map(str, losses.keys()))}"
                )
            loss = sum(terms) / self.gradient_accumulation_steps
        if not torch.isfinite(loss.detach()).all():
            # one such loss would poison the whole window's gradients: drop them, restart it
            self._skip("loss", loss.detach().sum())
            self._micro_step = 0
            return _scalar_metrics(losses)
        (self.scaler.scale(loss) if self._use_scaler else loss).backward()
        self._micro_step += 1
        metrics = _scalar_metrics(losses)
        if self._micro_step < self.gradient_accumulation_steps:
            return metrics
        self._micro_step = 0
        if self._use_scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = clip_gradients(self._params(), True, self.clip_norm)
        if self._use_scaler:
            stepped = scaler_step(
                self.scaler,
                self.optimizer,
                grad_norm,
                "MixedPrecisionOptimizationStepper",
                self._skipped_nonfinite_steps,
            )
            if not stepped:
                self._skipped_nonfinite_steps += 1
        elif not torch.isfinite(grad_norm):
            self._skip("gradient norm", grad_norm)
            stepped = False
        else:
            self.optimizer.step()
            stepped = True
        self.optimizer.zero_grad(set_to_none=True)
        if stepped:
            self._optimizer_step_count += 1
            metrics.set("grad_norm", grad_norm.float())
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The optimizer, the scaler (float16), the counters and, between two optimizer
        steps, the gradients accumulated so far (``None`` where a parameter has none)."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "micro_step": self._micro_step,
            "optimizer_step_count": self._optimizer_step_count,
            "skipped_nonfinite_steps": self._skipped_nonfinite_steps,
        }
        if self._use_scaler:
            state["scaler"] = self.scaler.state_dict()
        if self._micro_step:
            state["grads"] = saved_grads(self._params())
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`.

        Raises:
            ValueError: the saved gradients are not one per optimizer parameter.
        """
        params = self._params()
        grads = state_dict.get("grads")
        check_saved_grads(params, grads)
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self._micro_step = int(state_dict.get("micro_step", 0))
        self._optimizer_step_count = int(state_dict.get("optimizer_step_count", 0))
        self._skipped_nonfinite_steps = int(state_dict.get("skipped_nonfinite_steps", 0))
        if self._use_scaler and "scaler" in state_dict:
            self.scaler.load_state_dict(state_dict["scaler"])
        restore_grads(params, grads)


def _scalar_metrics(losses: TensorDictBase) -> TensorDictBase:
    """The detached loss entries, each with more than one element reduced to its mean
    (per-token diagnostics of the LLM losses)."""
    metrics = TensorDict()
    for key, value in losses.detach().items(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor):
            metrics.set(key, value.float().mean() if value.numel() > 1 else value)
    return metrics
